"""The life of one request, written once for every framework, sync or async.

:func:`lifecycle` is the whole sequence: match the route, run the host's ``auth`` and
``principals``, refuse a body by its declared size, apply the route's scope and rate limit,
read the JSON body or multipart form, validate, dispatch, and turn every failure into the error
contract. It never touches a framework: wherever it needs the outside world it yields an effect
(call a host callable, read the body, read the form, run the handler), and a driver carries the
effect out: :func:`serve_sync` in a sync framework's request thread, :func:`serve_async` on an
async framework's event loop. An adapter only subclasses :class:`SyncRequest` or
:class:`AsyncRequest` with a few translation methods.

Host callables run before any body is read, so an unauthenticated upload is never spooled. A sync
one runs in the framework's request thread (Flask, Django) or the framework's threadpool
(FastAPI), never on an event loop's thread, so it may block or use the Django ORM. The engine
runs on the framework's own loop (FastAPI) or on the one shared loop of ``routing_core.sync_bridge``.
"""

from __future__ import annotations

import inspect
import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from context_engine import ContextEngine
from context_engine.errors import ContextEngineError, IngestTooLarge, known_failure
from context_engine.principals import TRUSTED
from routing_core import sync_bridge
from routing_core.access import caller_identity, granted_scopes
from routing_core.bodies import parse_form_fields, parse_json_body, too_large
from routing_core.call import Call, Caller
from routing_core.http import (
    CoreRequest,
    CoreResponse,
    HttpError,
    Upload,
    content_length,
    error,
    is_multipart,
    malformed_multipart,
)
from routing_core.params import check_query
from routing_core.router import AuthError, Router
from routing_core.routes import Route

log = logging.getLogger("context_engine.routes")

Form = tuple[list[tuple[str, str]], list[tuple[str, Upload]]]


class RequestAdapter:
    """One framework request as the lifecycle reads it."""

    def __init__(self, native: Any, method: str, path: str, headers: Mapping[str, str], query: Mapping[str, list[str]]):
        self.native = native
        self.method = method
        #: path below the mount point, starting with ``/``
        self.path = path
        #: lower-cased names
        self.headers = headers
        self.query = query

    @property
    def content_type(self) -> str | None:
        return self.headers.get("content-type")

    @property
    def content_length(self) -> int | None:
        return content_length(self.headers.get("content-length"))


class SyncRequest(RequestAdapter, ABC):
    @abstractmethod
    def read_body(self) -> bytes: ...

    @abstractmethod
    def read_form(self) -> Form:
        """The form's fields and files; raises :class:`HttpError` for a body the framework refuses."""


class AsyncRequest(RequestAdapter, ABC):
    @abstractmethod
    async def read_body(self) -> bytes: ...

    @abstractmethod
    async def read_form(self) -> Form: ...

    @abstractmethod
    async def run_sync(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        """Run a sync host callable off the event loop (the framework's threadpool)."""

    async def close(self) -> None:
        """Release what reading the form opened."""


# ---------------------------------------------------------------------- effects
@dataclass
class Outcome:
    """What one host callable returned or raised."""

    value: Any = None
    exc: Exception | None = None

    @property
    def admits(self) -> bool:
        """Worth calling the next one: no exception, and neither ``False`` nor ``None``."""
        return self.exc is None and self.value is not False and self.value is not None


class HostCalls:
    """Call the host's callables in turn with the native request, until one does not admit.

    Sync callables run where the framework runs its own sync code: in its request thread, or
    together in one trip to the framework's threadpool (never on an event loop's thread).
    """

    def __init__(self, arg: Any, *fns: Callable[[Any], Any]):
        self.arg, self.fns = arg, fns

    def run_sync(self, request: SyncRequest | None = None) -> list[Outcome]:
        outcomes: list[Outcome] = []
        for fn in self.fns:
            outcomes.append(self._one_sync(fn))
            if not outcomes[-1].admits:
                break
        return outcomes

    async def run_async(self, request: AsyncRequest) -> list[Outcome]:
        if not any(_is_async(fn) for fn in self.fns):
            return await request.run_sync(self.run_sync, None)
        outcomes: list[Outcome] = []
        for fn in self.fns:
            outcomes.append(await self._one_async(fn, request))
            if not outcomes[-1].admits:
                break
        return outcomes

    def _one_sync(self, fn: Callable[[Any], Any]) -> Outcome:
        try:
            value = fn(self.arg)
            if inspect.isawaitable(value):  # an async callable in a sync framework: the shared loop runs it
                value = sync_bridge.run(_await(value))
        except Exception as exc:
            return Outcome(exc=exc)
        return Outcome(value)

    async def _one_async(self, fn: Callable[[Any], Any], request: AsyncRequest) -> Outcome:
        try:
            value = fn(self.arg) if _is_async(fn) else await request.run_sync(fn, self.arg)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:
            return Outcome(exc=exc)
        return Outcome(value)


class ReadBody:
    def run_sync(self, request: SyncRequest) -> bytes:
        return request.read_body()

    async def run_async(self, request: AsyncRequest) -> bytes:
        return await request.read_body()


class ReadForm:
    def run_sync(self, request: SyncRequest) -> Form:
        return request.read_form()

    async def run_async(self, request: AsyncRequest) -> Form:
        return await request.read_form()


class Dispatch:
    """Run the handler: on the shared loop from a sync framework, on the framework's loop otherwise."""

    def __init__(self, start: Callable[[], Coroutine[Any, Any, CoreResponse]]):
        self.start = start

    def run_sync(self, request: SyncRequest) -> CoreResponse:
        return sync_bridge.run(self.start())

    async def run_async(self, request: AsyncRequest) -> CoreResponse:
        return await self.start()


Effect = HostCalls | ReadBody | ReadForm | Dispatch
Steps = Generator[Effect, Any, CoreResponse]


# ---------------------------------------------------------------------- drivers
class _Stepper:
    """Feeds each effect's outcome (or exception) back into the lifecycle."""

    def __init__(self, steps: Steps):
        self.steps = steps
        self.value: Any = None
        self.failure: Exception | None = None
        self.response: CoreResponse | None = None

    def next_effect(self) -> Effect | None:
        try:
            if self.failure is not None:
                failure, self.failure = self.failure, None
                return self.steps.throw(failure)
            return self.steps.send(self.value)
        except StopIteration as done:
            self.response = done.value
            return None

    def record(self, outcome: Callable[[], Any]) -> None:
        try:
            self.value = outcome()
        except Exception as exc:
            self.value, self.failure = None, exc


def serve_sync(router: Router, request: SyncRequest) -> CoreResponse:
    """Serve one request of a sync framework in its request thread."""
    stepper = _Stepper(lifecycle(router, request))
    while (effect := stepper.next_effect()) is not None:
        stepper.record(lambda: effect.run_sync(request))
    assert stepper.response is not None
    return stepper.response


async def serve_async(router: Router, request: AsyncRequest) -> CoreResponse:
    """Serve one request of an async framework on its event loop."""
    stepper = _Stepper(lifecycle(router, request))
    try:
        while (effect := stepper.next_effect()) is not None:
            try:
                stepper.value = await effect.run_async(request)
            except Exception as exc:
                stepper.value, stepper.failure = None, exc
    finally:
        await request.close()
    assert stepper.response is not None
    return stepper.response


# ---------------------------------------------------------------------- the sequence
def lifecycle(router: Router, adapter: SyncRequest | AsyncRequest) -> Steps:
    """Every step of one request; every failure becomes the JSON error contract, never a trace."""
    route: Route | None = None
    try:
        route, params = router.match(adapter.method, adapter.path)
        request = CoreRequest(adapter.method, adapter.path, adapter.headers, adapter.query, native=adapter.native)
        call = Call(request, router.engine, None, params)
        if not route.public:
            call.caller = yield from _identify(router, adapter.native)
            call.engine = yield from _engine_for(router, adapter.native)
            _check_declared_size(router, route, adapter)
            _check_access(router, route, call.caller)
            if route.approval_scope:
                call.approval_scope = yield from _approval_scope(router, adapter.native)
        call.query = check_query(route.query_params, adapter.query)
        if route.form_model is not None and is_multipart(adapter.content_type):
            fields, files = yield ReadForm()
            if not fields and not files:
                raise malformed_multipart()
            request.form, request.files = dict(fields), dict(files)
            call.body = parse_form_fields(fields, route.form_model)
        elif route.request_model is not None:
            request.body = yield ReadBody()
            call.body = parse_json_body(request.body, adapter.content_type, route.request_model, router.max_json_bytes)
        return (yield Dispatch(lambda: route.endpoint(call)))
    except HttpError as exc:
        return exc.response()
    except ContextEngineError as exc:
        return error(exc.status, exc.code, exc.message, _retry_after(exc))
    except Exception as exc:
        known = known_failure(exc)
        if known is not None:
            log.warning("%s %s: %s", adapter.method, route.path if route else adapter.path, known.code)
            return error(known.status, known.code, known.message, _retry_after(known))
        log.exception("unhandled error in %s %s", adapter.method, route.path if route else adapter.path)
        return error(500, "internal_error", "the server failed to handle this request")


def _retry_after(exc: ContextEngineError) -> dict[str, str] | None:
    """``Retry-After`` for an error the same call may get past by waiting."""
    return {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else None


def _identify(router: Router, native: Any) -> Generator[Effect, Any, Caller]:
    """401 unless the host's ``auth`` admits the request; then its principals, checked."""
    outcomes = yield HostCalls(native, router.auth, router.principals)
    allowed = _settled(outcomes[0])
    if allowed is False or allowed is None:
        raise HttpError(401, "unauthorized", "missing or invalid credentials")
    resolved = _settled(outcomes[1])
    if resolved is None:
        log.error("principals resolver returned None; refusing the request")
        raise HttpError(
            500,
            "principals_unresolved",
            "the principals resolver returned None; return a list (or TRUSTED), never None",
        )
    if resolved is TRUSTED:
        return Caller(TRUSTED, allowed)
    values = list(resolved) if isinstance(resolved, list | tuple | set | frozenset) else None
    if values is None or not all(isinstance(p, str) for p in values):
        raise HttpError(
            500, "principals_unresolved", "the principals resolver must return a list of strings or TRUSTED"
        )
    return Caller(tuple(values), allowed)


def _settled(outcome: Outcome) -> Any:
    """The value a host callable returned; an ``AuthError`` it raised is a 401, anything else a 500."""
    if isinstance(outcome.exc, AuthError):
        raise HttpError(401, "unauthorized", str(outcome.exc) or "authentication failed")
    if outcome.exc is not None:
        raise outcome.exc
    return outcome.value


def _engine_for(router: Router, native: Any) -> Generator[Effect, Any, ContextEngine]:
    """The engine for this request: a redaction view when the host set a policy for it.

    The policy and key come from the host (a value, or a callable taking the framework's
    request) and never from a request field.
    """
    policy = router.redaction
    if _is_resolver(policy):
        policy = _settled((yield HostCalls(native, policy))[0])
    if policy is None:
        return router.engine
    key = router.redaction_secret_key
    if _is_resolver(key):
        key = _settled((yield HostCalls(native, key))[0])
    return router.engine.with_redaction(policy, secret_key=key)


def _approval_scope(router: Router, native: Any) -> Generator[Effect, Any, str | None]:
    """The host's approval scope for this request (a value, or a callable taking its request)."""
    scope = router.approval_scope
    if _is_resolver(scope):
        scope = _settled((yield HostCalls(native, scope))[0])
    if scope is not None and not isinstance(scope, str):
        raise HttpError(500, "approval_scope_unresolved", "the approval_scope resolver must return a string or None")
    return scope


def _check_declared_size(router: Router, route: Route, adapter: RequestAdapter) -> None:
    """Refuse a body by its declared length before a byte of it is read."""
    declared = adapter.content_length
    if declared is None or not route.takes_body:
        return
    if route.form_model is not None and is_multipart(adapter.content_type):
        limit = route.upload_cap(router.engine.config) if route.upload_cap else None
        if limit is not None and declared > limit:
            refused = IngestTooLarge("ingest.max_file_bytes", limit, declared)
            raise HttpError(refused.status, refused.code, refused.message)
    elif declared > router.max_json_bytes:
        raise too_large(declared, router.max_json_bytes)


def _check_access(router: Router, route: Route, caller: Caller) -> None:
    """The route's scope (403) and rate limit (429)."""
    if route.scope is not None:
        scopes = granted_scopes(caller.auth)
        if scopes is not None and route.scope not in scopes:
            raise HttpError(403, "scope_denied", f"these credentials lack the '{route.scope}' scope")
    if route.rate_limit is None:
        return
    limit = route.rate_limit.per_minute(router.engine.config)
    if limit is not None:
        wait = router.limiter.hit(f"{route.handler}:{caller_identity(caller.auth, caller.principals)}", limit)
        if wait is not None:
            message = f"more than {limit} {route.rate_limit.counts} per minute from this caller; see Retry-After"
            raise HttpError(429, "rate_limited", message, {"Retry-After": str(wait)})


def _is_resolver(value: Any) -> bool:
    """A host setting given as a callable of the request (a policy object is not one)."""
    return callable(value) and not isinstance(value, type) and not hasattr(value, "model_fields")


def _is_async(fn: Callable[[Any], Any]) -> bool:
    """An ``async def`` function, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


async def _await(value: Awaitable[Any]) -> Any:
    return await value

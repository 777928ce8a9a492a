"""What the three mounts share, so FastAPI, Flask and Django answer byte-for-byte alike.

Nothing here decides what a route does; that is ``routing_core``. This module only fixes the parts
of translation a framework would otherwise decide differently: which URL reaches which route,
when a body is read at all, how a body too large or a multipart body that does not parse is
refused, in which thread the host's ``auth`` and ``principals`` run, and how JSON is written.

The host's callables are evaluated by the adapter before the body is read (an unauthenticated
upload is never spooled), a sync one in the framework's own request thread (so it may touch the
Django ORM or block without stalling an event loop; FastAPI runs sync ones in its threadpool, as
it does sync dependencies), and their outcome is then replayed to
:class:`~routing_core.router.Router`, which still decides what a refusal answers.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from context_engine import ContextEngine
from context_engine.errors import IngestTooLarge
from routing_core import sync_bridge
from routing_core.http import CoreResponse, error
from routing_core.router import ROUTES, AuthCallable, PrincipalsCallable, Route, Router, upload_limit_bytes

#: every method the catch-all answers (the router turns the ones it has no route for into 405)
ALL_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT")

_PARAM = re.compile(r"\{(\w+)\}")

#: runs a sync callable off the event loop, e.g. ``starlette.concurrency.run_in_threadpool``
RunSync = Callable[..., Awaitable[Any]]


@dataclass
class Outcome:
    """What a host callable returned or raised, kept to be replayed inside the router."""

    value: Any = None
    exc: Exception | None = None

    def replay(self) -> Any:
        if self.exc is not None:
            raise self.exc
        return self.value

    @property
    def passed(self) -> bool:
        """Mirrors the router's reading: no exception, and neither ``False`` nor ``None``."""
        return self.exc is None and self.value is not False and self.value is not None


@dataclass
class Prepared:
    """The native request with its ``auth`` (and, if auth passed, ``principals``) outcome."""

    native: Any
    auth: Outcome
    principals: Outcome | None = None

    @property
    def admitted(self) -> bool:
        """Worth reading the body for: the router will not refuse with 401 or 500 first."""
        return self.auth.passed and self.principals is not None and self.principals.passed


def _on_native(value: Any) -> Any:
    """A host callable receives the framework's request, not the adapter's wrapper."""
    if value is None or not callable(value) or isinstance(value, type):
        return value
    if hasattr(value, "model_fields"):  # a policy object, not a resolver
        return value

    def resolve(prepared: Prepared) -> Any:
        return value(prepared.native)

    return resolve


def _replay_auth(prepared: Prepared) -> Any:
    return prepared.auth.replay()


def _replay_principals(prepared: Prepared) -> Any:
    assert prepared.principals is not None, "principals are only asked for after auth passed"
    return prepared.principals.replay()


async def _await(value: Awaitable[Any]) -> Any:
    return await value


class Mount:
    """One engine, the host's callables and the route table, as every adapter uses them."""

    def __init__(
        self,
        engine: ContextEngine,
        *,
        auth: AuthCallable,
        principals: PrincipalsCallable,
        max_json_bytes: int,
        redaction: Any = None,
        redaction_secret_key: Any = None,
    ):
        # the router checks the host's callables and names what is missing
        Router(engine, auth=auth, principals=principals, max_json_bytes=max_json_bytes)
        self.engine = engine
        self._auth = auth
        self._principals = principals
        self.router = Router(
            engine,
            auth=_replay_auth,
            principals=_replay_principals,
            max_json_bytes=max_json_bytes,
            redaction=_on_native(redaction),
            redaction_secret_key=_on_native(redaction_secret_key),
        )

    # ------------------------------------------------------------------ routing
    @staticmethod
    def templates() -> list[tuple[str, list[str]]]:
        """Each path of the route table once, with its methods, in table order."""
        found: dict[str, list[str]] = {}
        for route in ROUTES:
            found.setdefault(route.path, []).append(route.method)
        return list(found.items())

    def match(self, method: str, path: str) -> Route | None:
        """The route the router will dispatch to (same rule: trailing slashes do not count)."""
        path = path.rstrip("/") or "/"
        for route in self.router.routes:
            if route.method == method.upper() and route.pattern.match(path):
                return route
        return None

    # ------------------------------------------------------------------ host callables
    def prepare_sync(self, native: Any) -> Prepared:
        """Run the host's callables in this (the framework's request) thread."""
        auth = _outcome_sync(self._auth, native)
        principals = _outcome_sync(self._principals, native) if auth.passed else None
        return Prepared(native, auth, principals)

    async def prepare_async(self, native: Any, run_sync: RunSync) -> Prepared:
        """Await async callables on the framework's loop; run sync ones off it with ``run_sync``."""
        auth = await _outcome_async(self._auth, native, run_sync)
        principals = await _outcome_async(self._principals, native, run_sync) if auth.passed else None
        return Prepared(native, auth, principals)

    # ------------------------------------------------------------------ bodies
    def wants_form(self, route: Route, content_type: str | None) -> bool:
        """Parse a multipart form only where a route takes one; any other body stays raw bytes."""
        return route.multipart and is_multipart(content_type)

    def wants_body(self, route: Route) -> bool:
        return route.request_model is not None

    def precheck(self, route: Route, content_type: str | None, content_length: int | None) -> CoreResponse | None:
        """Refuse a body by its declared length before a byte of it is read."""
        if content_length is None:
            return None
        if self.wants_form(route, content_type):
            limit = upload_limit_bytes(self.engine)
            if limit is not None and content_length > limit:
                refused = IngestTooLarge("ingest.max_file_bytes", limit, content_length)
                return error(refused.status, refused.code, refused.message)
            return None
        if self.wants_body(route) and content_length > self.router.max_json_bytes:
            # the router's own wording, said before the body is read instead of after
            limit = self.router.max_json_bytes
            return error(413, "too_large", f"the request body is {content_length} bytes; the limit is {limit}")
        return None


def _outcome_sync(fn: Callable[[Any], Any], native: Any) -> Outcome:
    try:
        value = fn(native)
        if inspect.isawaitable(value):  # an async callable in a sync framework: the shared loop runs it
            value = sync_bridge.run(_await(value))
        return Outcome(value)
    except Exception as exc:
        return Outcome(exc=exc)


def _is_async(fn: Callable[[Any], Any]) -> bool:
    """An ``async def`` function, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


async def _outcome_async(fn: Callable[[Any], Any], native: Any, run_sync: RunSync) -> Outcome:
    try:
        if _is_async(fn):
            value = fn(native)
        else:  # a sync callable may block (a session lookup, a token check over HTTP): keep it off the loop
            value = await run_sync(fn, native)
        if inspect.isawaitable(value):
            value = await value
        return Outcome(value)
    except Exception as exc:
        return Outcome(exc=exc)


# ---------------------------------------------------------------------- translation helpers
def fill(template: str, params: Mapping[str, str]) -> str:
    """The path below the mount for a route-specific URL rule (``/documents/{document_id}``)."""
    return _PARAM.sub(lambda m: params[m.group(1)], template)


def rest_path(rest: str) -> str:
    """The path below the mount for the catch-all rule."""
    return "/" + rest


def is_multipart(content_type: str | None) -> bool:
    return (content_type or "").split(";", 1)[0].strip().lower() == "multipart/form-data"


def content_length(raw: Any) -> int | None:
    try:
        value = int(raw)
    except (TypeError, ValueError):
        return None
    return value if value >= 0 else None


def headers(items: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Lower-cased names; a repeated header joined with ``, `` as HTTP allows."""
    out: dict[str, str] = {}
    for name, value in items:
        key = name.lower()
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out


def multi(items: Iterable[tuple[str, Any]]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for name, value in items:
        out.setdefault(name, []).append(value)
    return out


def last(items: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """One value per form field: the last, as the router reads repeated query parameters."""
    return {name: values[-1] for name, values in multi(items).items()}


def upload_name(raw: str | None) -> str | None:
    """The file name without any client path, as Django hands it over; ``None`` when empty."""
    name = (raw or "").rsplit("/", 1)[-1].rsplit("\\", 1)[-1].replace("\x00", "").strip()
    return None if name in ("", ".", "..") else name


def malformed_multipart() -> CoreResponse:
    return error(
        400,
        "invalid_multipart",
        "the multipart body could not be parsed; send a 'file' part and optional name, source_id, acl "
        "and attributes fields",
    )


def framework_too_large() -> CoreResponse:
    """The framework's own body cap (Flask ``MAX_CONTENT_LENGTH``, Django ``DATA_UPLOAD_*``) refused."""
    return error(413, "too_large", "the request body is larger than this server accepts")


def unreadable_body() -> CoreResponse:
    return error(400, "invalid_request", "the request body could not be read")


def encode(response: CoreResponse) -> tuple[int, bytes, dict[str, str]]:
    """Status, JSON bytes and headers; one encoder, so the three mounts send identical bytes."""
    if response.body is None:
        return response.status, b"", dict(response.headers)
    body = json.dumps(response.body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return response.status, body.encode("utf-8"), dict(response.headers)


JSON_TYPE = "application/json"

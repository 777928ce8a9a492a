"""One framework-neutral implementation of every route.

An adapter turns its framework's request into a :class:`CoreRequest`, awaits
:meth:`Router.handle`, and turns the :class:`CoreResponse` back. Authentication and principal
resolution are the host's, passed in as callables (sync or async) that receive the framework's
native request; nothing here has a default that could open a mount by accident.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from context_engine import ContextEngine
from context_engine.errors import ContextEngineError
from context_engine.knowledge.access import KNOWLEDGE_SCOPE, SlidingWindowLimiter, caller_identity, granted_scopes
from context_engine.principals import TRUSTED
from routing_core.http import CoreRequest, CoreResponse, error
from routing_core.schemas import (
    DeletedBody,
    Document,
    DocumentPage,
    IngestReport,
    IngestTextBody,
    KnowledgeQueryBody,
    KnowledgeResult,
    SearchBody,
    SearchResult,
    Stats,
    UpdateDocumentBody,
)

log = logging.getLogger("context_engine.routes")

AuthCallable = Callable[[Any], Any]
PrincipalsCallable = Callable[[Any], Any]

#: default cap on a JSON body (uploads are capped by ``ingest.max_file_bytes`` instead)
DEFAULT_MAX_JSON_BYTES = 8 * 1024 * 1024


class AuthError(Exception):
    """Raise from an ``auth`` callable to refuse a request with 401 and this message."""


@dataclass
class Caller:
    principals: Any  # tuple of strings, or TRUSTED
    #: what the host's ``auth`` returned (``True``, or a mapping/object reporting ``scopes``/``identity``)
    auth: Any = None
    #: the engine this request runs on: the mounted one, or its per-tenant redaction view
    engine: Any = None

    @property
    def trusted(self) -> bool:
        return self.principals is TRUSTED


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # OpenAPI-style template, e.g. /documents/{document_id}
    handler: str
    summary: str
    request_model: type[BaseModel] | None = None
    response_model: type[BaseModel] | None = None
    success_status: int = 200
    multipart: bool = False
    query_params: tuple[tuple[str, str, str], ...] = ()  # (name, type, description)

    @property
    def pattern(self) -> re.Pattern[str]:
        return re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", self.path) + "$")


ROUTES: tuple[Route, ...] = (
    Route(
        "POST",
        "/documents",
        "ingest",
        "Ingest a document (JSON text or a multipart file upload)",
        IngestTextBody,
        IngestReport,
        201,
        multipart=True,
    ),
    Route(
        "GET",
        "/documents",
        "list_documents",
        "List the documents the caller may see, paged",
        None,
        DocumentPage,
        query_params=(
            ("limit", "integer", "page size, 1 to 500 (default 50)"),
            ("cursor", "string", "next_cursor of the previous page"),
            ("source_id", "string", "restrict to a source; repeatable"),
        ),
    ),
    Route(
        "GET",
        "/documents/{document_id}",
        "get_document",
        "Read one document",
        None,
        Document,
        query_params=(("include_text", "boolean", "include the extracted text (default true)"),),
    ),
    Route(
        "PATCH",
        "/documents/{document_id}",
        "update_document",
        "Change a document's ACL, attributes or name",
        UpdateDocumentBody,
        Document,
    ),
    Route(
        "DELETE",
        "/documents/{document_id}",
        "delete_document",
        "Delete a document from the next revision on",
        None,
        DeletedBody,
    ),
    Route("POST", "/search", "search", "Hybrid search under the caller's permissions", SearchBody, SearchResult),
    Route(
        "GET",
        "/stats",
        "stats",
        "Counts over what the caller may see",
        None,
        Stats,
        query_params=(("source_id", "string", "restrict to a source; repeatable"),),
    ),
    Route(
        "POST",
        "/knowledge/query",
        "knowledge_query",
        "Retrieve the passages that best answer a question, with a trace of how they were found",
        KnowledgeQueryBody,
        KnowledgeResult,
    ),
    # reserved for later routes: /tools/execute
)


async def _call(fn: Callable[[Any], Any], arg: Any) -> Any:
    result = fn(arg)
    if inspect.isawaitable(result):
        result = await result
    return result


class Router:
    """The route table bound to one engine and the host's ``auth`` and ``principals``."""

    def __init__(
        self,
        engine: ContextEngine,
        *,
        auth: AuthCallable,
        principals: PrincipalsCallable,
        max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
        redaction: Any = None,
        redaction_secret_key: Any = None,
    ):
        if not callable(auth):
            raise TypeError(
                "auth is required: a callable taking the request (return False or raise AuthError to refuse)"
            )
        if not callable(principals):
            raise TypeError("principals is required: a callable taking the request and returning a list or TRUSTED")
        self.engine = engine
        self._auth = auth
        self._principals = principals
        self.max_json_bytes = max_json_bytes
        #: host-set per-tenant redaction: a RedactionPolicy (and key), or callables taking the request
        self._redaction = redaction
        self._redaction_secret_key = redaction_secret_key
        self.routes = ROUTES
        self._limiter = SlidingWindowLimiter()  # per-caller window of POST /knowledge/query

    @property
    def upload_limit_bytes(self) -> int | None:
        return upload_limit_bytes(self.engine)

    async def handle(self, request: CoreRequest) -> CoreResponse:
        """Dispatch one request; every failure becomes the JSON error contract, never a trace."""
        route, params = self._match(request.method, request.path)
        if route is None:
            stripped = request.path.rstrip("/") or "/"
            allowed = [r.method for r in self.routes if r.pattern.match(stripped)]
            if allowed:
                return error(
                    405,
                    "method_not_allowed",
                    f"{request.method} is not allowed on {request.path}",
                    {"Allow": ", ".join(allowed)},
                )
            return error(404, "route_not_found", f"no route for {request.method} {request.path}")
        try:
            try:
                allowed = await _call(self._auth, request.native)
            except AuthError as exc:
                return error(401, "unauthorized", str(exc) or "authentication failed")
            if allowed is False or allowed is None:
                return error(401, "unauthorized", "missing or invalid credentials")
            try:
                resolved = await _call(self._principals, request.native)
            except AuthError as exc:
                return error(401, "unauthorized", str(exc) or "authentication failed")
            if resolved is None:
                log.error("principals resolver returned None; refusing the request")
                return error(
                    500,
                    "principals_unresolved",
                    "the principals resolver returned None; return a list (or TRUSTED), never None",
                )
            if resolved is not TRUSTED:
                values = list(resolved) if isinstance(resolved, list | tuple | set | frozenset) else None
                if values is None or not all(isinstance(p, str) for p in values):
                    return error(
                        500, "principals_unresolved", "the principals resolver must return a list of strings or TRUSTED"
                    )
                resolved = tuple(values)
            caller = Caller(resolved, allowed, await self._engine_for(request))
            handler: Callable[..., Awaitable[CoreResponse]] = getattr(self, f"_{route.handler}")
            return await handler(request, caller, **params)
        except _BadRequest as exc:
            return error(exc.status, exc.code, exc.message)
        except ContextEngineError as exc:
            return error(exc.status, exc.code, exc.message)
        except Exception:
            log.exception("unhandled error in %s %s", request.method, route.path)
            return error(500, "internal_error", "the server failed to handle this request")

    async def _engine_for(self, request: CoreRequest) -> ContextEngine:
        """The engine for this request: a redaction view when the host set a policy for it.

        The policy and key come from the host (a value, or a callable taking the framework's
        request) and never from a request field.
        """
        policy = self._redaction
        if callable(policy) and not isinstance(policy, type):
            policy = await _call(policy, request.native)
        if policy is None:
            return self.engine
        key = self._redaction_secret_key
        if callable(key):
            key = await _call(key, request.native)
        return self.engine.with_redaction(policy, secret_key=key)

    def _match(self, method: str, path: str) -> tuple[Route | None, dict[str, str]]:
        path = path.rstrip("/") or "/"
        for route in self.routes:
            found = route.pattern.match(path)
            if found and route.method == method.upper():
                return route, found.groupdict()
        return None, {}

    # ------------------------------------------------------------------ body helpers
    def _json(self, request: CoreRequest, model: type[BaseModel]) -> Any:
        body = request.body or b""
        if len(body) > self.max_json_bytes:
            raise _BadRequest(
                413, "too_large", f"the request body is {len(body)} bytes; the limit is {self.max_json_bytes}"
            )
        if not body.strip():
            raise _BadRequest(400, "invalid_request", "a JSON body is required")
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise _BadRequest(400, "invalid_json", f"the body is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise _BadRequest(400, "invalid_request", "the body must be a JSON object")
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise _BadRequest(400, "invalid_request", _describe(exc)) from None

    @staticmethod
    def _principals_arg(caller: Caller) -> Any:
        return TRUSTED if caller.trusted else list(caller.principals)

    # ------------------------------------------------------------------ handlers
    async def _ingest(self, request: CoreRequest, caller: Caller) -> CoreResponse:
        if request.files or request.form:
            return await self._ingest_upload(request, caller)
        body: IngestTextBody = self._json(request, IngestTextBody)
        report = await caller.engine.ingest(
            text=body.text,
            name=body.name,
            source_id=body.source_id,
            acl=body.acl,
            attributes=body.attributes,
            principals=self._principals_arg(caller),
        )
        return self._report(report, caller)

    async def _ingest_upload(self, request: CoreRequest, caller: Caller) -> CoreResponse:
        upload = request.files.get("file")
        if upload is None:
            raise _BadRequest(400, "invalid_request", "multipart body needs a 'file' part")
        form = request.form
        acl = _form_list(form.get("acl"), "acl")
        attributes = _form_json(form.get("attributes"), "attributes")
        report = await caller.engine.ingest(
            file=upload.file,
            name=form.get("name") or upload.filename or "upload",
            source_id=form.get("source_id") or "default",
            acl=acl,
            attributes=attributes,
            principals=self._principals_arg(caller),
        )
        return self._report(report, caller)

    def _report(self, report: IngestReport, caller: Caller) -> CoreResponse:
        if not caller.trusted:  # raw provider text is an operator's copy only
            for doc in report.documents:
                doc.error = None
        status = 200 if all(d.status == "skipped" for d in report.documents) else 201
        return CoreResponse(status, report.model_dump(mode="json"))

    async def _list_documents(self, request: CoreRequest, caller: Caller) -> CoreResponse:
        limit = _int_param(request, "limit", 50)
        page = await caller.engine.list_documents(
            principals=self._principals_arg(caller),
            source_ids=request.query.get("source_id") or None,
            limit=limit,
            cursor=_one(request, "cursor"),
        )
        for doc in page.documents:
            doc.failure_message = None  # a list carries the code only
        return CoreResponse(200, page.model_dump(mode="json"))

    async def _get_document(self, request: CoreRequest, caller: Caller, document_id: str) -> CoreResponse:
        include_text = _bool_param(request, "include_text", True)
        doc = await caller.engine.get_document(
            document_id, principals=self._principals_arg(caller), include_text=include_text
        )
        return CoreResponse(200, doc.model_dump(mode="json"))

    async def _update_document(self, request: CoreRequest, caller: Caller, document_id: str) -> CoreResponse:
        body: UpdateDocumentBody = self._json(request, UpdateDocumentBody)
        doc = await caller.engine.update_document(
            document_id,
            principals=self._principals_arg(caller),
            acl=body.acl,
            attributes=body.attributes,
            name=body.name,
        )
        return CoreResponse(200, doc.model_dump(mode="json"))

    async def _delete_document(self, request: CoreRequest, caller: Caller, document_id: str) -> CoreResponse:
        revision = await caller.engine.delete_document(document_id, principals=self._principals_arg(caller))
        return CoreResponse(200, DeletedBody(id=document_id, deleted=True, revision=revision).model_dump())

    async def _search(self, request: CoreRequest, caller: Caller) -> CoreResponse:
        body: SearchBody = self._json(request, SearchBody)
        result = await caller.engine.search(
            body.query,
            source_ids=body.source_ids,
            document_ids=body.document_ids,
            principals=self._principals_arg(caller),
            top_k=body.top_k,
        )
        return CoreResponse(200, result.model_dump(mode="json"))

    async def _knowledge_query(self, request: CoreRequest, caller: Caller) -> CoreResponse:
        """403 without the ``knowledge`` scope, 429 past ``knowledge.rate_limit_per_minute``, then the query."""
        scopes = granted_scopes(caller.auth)
        if scopes is not None and KNOWLEDGE_SCOPE not in scopes:
            return error(403, "scope_denied", f"these credentials lack the '{KNOWLEDGE_SCOPE}' scope")
        limit = self.engine.config.knowledge.rate_limit_per_minute
        wait = None if limit is None else self._limiter.hit(caller_identity(caller.auth, caller.principals), limit)
        if wait is not None:
            message = f"more than {limit} knowledge queries per minute from this caller; see Retry-After"
            return error(429, "rate_limited", message, {"Retry-After": str(wait)})
        body: KnowledgeQueryBody = self._json(request, KnowledgeQueryBody)
        result = await caller.engine.knowledge_query(
            body.query,
            top_k=body.top_k,
            agent_id=body.agent_id,
            expand=body.expand,
            rerank=body.rerank,
            principals=self._principals_arg(caller),
        )
        return CoreResponse(200, result.model_dump(mode="json", by_alias=True))

    async def _stats(self, request: CoreRequest, caller: Caller) -> CoreResponse:
        stats = await caller.engine.stats(
            principals=self._principals_arg(caller), source_ids=request.query.get("source_id") or None
        )
        return CoreResponse(200, stats.model_dump(mode="json"))


def upload_limit_bytes(engine: ContextEngine) -> int | None:
    """The byte cap for a host's own upload middleware (``ingest.max_file_bytes``)."""
    return engine.config.ingest.max_file_bytes


class _BadRequest(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        field = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{field}: {err['msg']}")
    return "; ".join(parts)


def _one(request: CoreRequest, name: str) -> str | None:
    values = request.query.get(name)
    return values[-1] if values else None


def _int_param(request: CoreRequest, name: str, default: int) -> int:
    raw = _one(request, name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise _BadRequest(400, "invalid_request", f"{name}: must be an integer") from None


def _bool_param(request: CoreRequest, name: str, default: bool) -> bool:
    raw = _one(request, name)
    if raw is None:
        return default
    if raw.lower() in ("1", "true", "yes"):
        return True
    if raw.lower() in ("0", "false", "no"):
        return False
    raise _BadRequest(400, "invalid_request", f"{name}: must be true or false")


def _form_list(raw: str | None, name: str) -> list[str] | None:
    if raw is None or raw == "":
        return None
    if raw.lstrip().startswith("["):
        value = _form_json(raw, name)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _BadRequest(400, "invalid_request", f"{name}: must be a JSON list of strings")
        return value
    return [part.strip() for part in raw.split(",") if part.strip()]


def _form_json(raw: str | None, name: str) -> Any:
    if raw is None or raw == "":
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise _BadRequest(400, "invalid_request", f"{name}: must be valid JSON") from None

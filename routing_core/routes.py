"""The route table: each route's path, its handler, its bodies and its access policy, declared once.

A route names its handler function directly, so a route without a handler fails when this module
is imported. Scope, rate limit and body caps are fields of the route, read by the lifecycle;
handlers never check them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pydantic import BaseModel

from context_engine.config import ContextEngineConfig
from context_engine.limits import (
    LIST_LIMIT_DEFAULT,
    LIST_LIMIT_MAX,
    LIST_LIMIT_MIN,
    MAX_CURSOR_CHARS,
    MAX_SOURCE_ID_CHARS,
)
from context_engine.tools import kinds
from routing_core import handlers
from routing_core.access import KNOWLEDGE_SCOPE, scope_for
from routing_core.call import Call
from routing_core.http import CoreResponse
from routing_core.params import ERROR_CODE, QueryParam
from routing_core.schemas import (
    NOT_BLANK,
    ApprovalRequired,
    DeletedBody,
    Document,
    DocumentPage,
    DocumentVersions,
    ErrorBody,
    Health,
    IngestFailed,
    IngestFields,
    IngestListFailed,
    IngestListReport,
    IngestReport,
    IngestTextBody,
    KnowledgeQueryBody,
    KnowledgeResult,
    SearchBody,
    SearchResult,
    Stats,
    ToolExecuteBody,
    ToolList,
    ToolResult,
    UpdateDocumentBody,
)

LIMIT_SCHEMA = {"type": "integer", "minimum": LIST_LIMIT_MIN, "maximum": LIST_LIMIT_MAX}
REVISION_SCHEMA = {"type": "integer", "minimum": 0}
SOURCE_ID_SCHEMA = {"type": "string", "minLength": 1, "maxLength": MAX_SOURCE_ID_CHARS, "pattern": NOT_BLANK}
#: a page cursor is opaque URL-safe base64: only a ``next_cursor`` this server returned continues a list
CURSOR_SCHEMA = {
    "type": "string",
    "maxLength": MAX_CURSOR_CHARS,
    "pattern": "^[A-Za-z0-9_-]*$",
    ERROR_CODE: "invalid_cursor",
}
CURSOR_DOC = "next_cursor of the previous page (opaque; any other value answers 400 invalid_cursor)"
AS_OF_DOC = (
    "a revision this caller was told: a trusted caller's store revision, at most the current one; any other "
    "caller's revision handle from a response (handles count no one's writes); anything else answers 400"
)

Handler = Callable[[Call], Coroutine[Any, Any, CoreResponse]]
#: reads a per-route number from the engine's configuration (``None``: no limit)
ConfigLimit = Callable[[ContextEngineConfig], int | None]


def knowledge_rate_limit(config: ContextEngineConfig) -> int | None:
    return config.knowledge.rate_limit_per_minute


def upload_limit(config: ContextEngineConfig) -> int | None:
    """The byte cap of a multipart upload (``ingest.max_file_bytes``)."""
    return config.ingest.max_file_bytes


@dataclass(frozen=True)
class RateLimit:
    """At most ``per_minute(config)`` hits a minute per caller; ``counts`` names them in the refusal."""

    per_minute: ConfigLimit
    counts: str


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # OpenAPI-style template, e.g. /documents/{document_id}
    endpoint: Handler
    summary: str
    request_model: type[BaseModel] | None = None
    response_model: type[BaseModel] | None = None
    success_status: int = 200
    #: the model of a multipart form's fields when the route also takes one (with a ``file`` part),
    #: capped by ``upload_cap``; JSON bodies are capped by the mount's ``max_json_bytes``
    form_model: type[BaseModel] | None = None
    upload_cap: ConfigLimit | None = None
    query_params: tuple[QueryParam, ...] = ()
    #: answered without the host's ``auth``: operational routes that reveal nothing but a status
    public: bool = False
    #: statuses this route answers besides the success status and the common errors
    responses: tuple[tuple[int, str, type[BaseModel]], ...] = ()
    #: the scope the host's ``auth`` must grant (see ``routing_core.access``)
    scope: str | None = None
    rate_limit: RateLimit | None = None
    #: the handler reads the host's ``approval_scope`` (resolved per request, never from the request)
    approval_scope: bool = False
    #: the JSON list form of the body, when the route takes one (``schemas.LIST_BODIES``), and what it
    #: answers with, per status, beside the single form's answers
    list_item_model: type[BaseModel] | None = None
    list_responses: tuple[tuple[int, str, type[BaseModel]], ...] = ()
    #: statuses answered with an HTML page instead of JSON, each with its description (the OAuth popup)
    html_responses: tuple[tuple[int, str], ...] = ()

    @property
    def handler(self) -> str:
        """The handler's name, also the OpenAPI ``operationId``."""
        return self.endpoint.__name__

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        return re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", self.path) + "$")

    @property
    def takes_body(self) -> bool:
        return self.request_model is not None

    @property
    def multipart(self) -> bool:
        return self.form_model is not None


_TABLE: tuple[Route, ...] = (
    Route(
        "POST",
        "/documents",
        handlers.ingest,
        "Ingest a document (JSON text or a multipart file upload)",
        IngestTextBody,
        IngestReport,
        201,
        form_model=IngestFields,
        upload_cap=upload_limit,
        responses=(
            (200, "Unchanged: the same content was already stored (every document skipped)", IngestReport),
            (422, "Nothing stored: the error of the first failed document, beside the report", IngestFailed),
            (409, "A document the caller may not replace already holds that name in the source (said alike "
             "whether or not the caller may read it); or, retryable with a `Retry-After` header, another "
             "ingest of the document is still running (`document_busy`) or still holds the idempotency "
             "key (`idempotency_in_progress`)", ErrorBody),
        ),
        list_item_model=IngestTextBody,
        list_responses=(
            (201, "A list: every entry was stored", IngestListReport),
            (200, "A list with mixed outcomes, or all unchanged: each item says what became of its entry",
             IngestListReport),
            (422, "A list of which nothing was stored: the first entry's error beside the items, with the status "
             "that entry alone would answer (422: it could not be read)", IngestListFailed),
            (400, "A list of which nothing was stored, its first entry not valid", IngestListFailed),
            (403, "A list of which nothing was stored, its first entry under an ACL the caller does not hold",
             IngestListFailed),
            (409, "A list of which nothing was stored, its first entry's name held by a document the caller may "
             "not replace", IngestListFailed),
            (413, "A list of which nothing was stored, its first entry over a size cap", IngestListFailed),
            (422, "A request this deployment cannot carry out, refused before anything is read: `batch` "
             "on an embedding provider without a batch API (`batch_unsupported`)", ErrorBody),
        ),
    ),
    Route(
        "GET",
        "/documents",
        handlers.list_documents,
        "List the documents the caller may see, paged",
        None,
        DocumentPage,
        query_params=(
            ("limit", LIMIT_SCHEMA, f"page size (default {LIST_LIMIT_DEFAULT})"),
            ("cursor", CURSOR_SCHEMA, CURSOR_DOC),
            ("source_id", SOURCE_ID_SCHEMA, "restrict to a source; repeatable"),
            ("as_of", REVISION_SCHEMA, f"list as of this revision (default: the current one), {AS_OF_DOC}"),
        ),
    ),
    Route(
        "GET",
        "/documents/{document_id}",
        handlers.get_document,
        "Read one document",
        None,
        Document,
        query_params=(
            ("include_text", {"type": "boolean"}, "include the extracted text (default true)"),
            ("as_of", REVISION_SCHEMA, f"the document as it was at this revision, {AS_OF_DOC}"),
            ("version", {"type": "integer", "minimum": 1}, "this version of the document (with as_of: 400)"),
        ),
    ),
    Route(
        "GET",
        "/documents/{document_id}/versions",
        handlers.document_versions,
        "Every version of a document the caller may see, with the revisions each was current in (a deleted "
        "document's history stays readable: deleting ends its current version, not its past)",
        None,
        DocumentVersions,
    ),
    Route(
        "PATCH",
        "/documents/{document_id}",
        handlers.update_document,
        "Change a document's ACL, attributes or name",
        UpdateDocumentBody,
        Document,
        responses=((409, "Conflict: a document already holds that name in its source (said alike whether or not "
                    "the caller may read it)", ErrorBody),),
    ),
    Route(
        "DELETE",
        "/documents/{document_id}",
        handlers.delete_document,
        "Delete a document from the next revision on",
        None,
        DeletedBody,
    ),
    Route(
        "POST",
        "/search",
        handlers.search,
        "Hybrid search under the caller's permissions",
        SearchBody,
        SearchResult,
        responses=((409, "mode graph asked where there is no graph (graph_disabled, graph_not_enabled)", ErrorBody),),
    ),
    Route(
        "GET",
        "/stats",
        handlers.stats,
        "Counts over what the caller may see",
        None,
        Stats,
        query_params=(
            ("source_id", SOURCE_ID_SCHEMA, "restrict to a source; repeatable"),
            ("as_of", REVISION_SCHEMA, f"counts as of this revision, {AS_OF_DOC}"),
        ),
    ),
    Route(
        "POST",
        "/knowledge/query",
        handlers.knowledge_query,
        "Retrieve the passages that best answer a question, with a trace of how they were found",
        KnowledgeQueryBody,
        KnowledgeResult,
        scope=KNOWLEDGE_SCOPE,
        rate_limit=RateLimit(knowledge_rate_limit, "knowledge queries"),
    ),
    Route(
        "GET", "/health", handlers.health, "Liveness: the process answers (no database call)", None, Health, public=True
    ),
    Route(
        "GET",
        "/ready",
        handlers.ready,
        "Readiness: the database answers and holds the current schema",
        None,
        Health,
        public=True,
        responses=((503, "Not ready: the database is unreachable or its schema is not current", ErrorBody),),
    ),
    Route(
        "POST",
        "/tools/execute",
        handlers.execute_tool,
        "Call one governed tool the caller may see (ACL, approval gate, audit, result budget)",
        ToolExecuteBody,
        ToolResult,
        responses=(
            (202, "Waiting for a person's approval in the host's approval scope; call again once approved",
             ApprovalRequired),
            (404, "No such tool, or one the caller may not see (the two answers are identical)", ErrorBody),
            (409, "Several visible tools share that name: pass tool_id", ErrorBody),
            (502, "The tool failed (its error stripped of row data and masked)", ErrorBody),
            (504, "The tool did not answer in time", ErrorBody),
        ),
        approval_scope=True,
    ),
    Route(
        "GET",
        "/tools/oauth/callback",
        handlers.mcp_oauth_callback,
        "Where an OAuth provider sends the popup back after connecting an mcp tool (unauthenticated: "
        "the flow's single-use state is the credential)",
        public=True,
        query_params=tuple(
            (name, {"type": "string"}, doc)
            for name, doc in (
                ("state", "the state the flow sent to the provider"),
                ("code", "the authorization code"),
                ("error", "the provider's refusal (the popup answers idp_denied)"),
                ("error_description", "the provider's explanation: logged, never shown"),
                ("iss", "the authorization server's issuer (RFC 9207), checked by the SDK"),
            )
        ),
        html_responses=(
            (
                200,
                "The popup page, posting its outcome to its opener: {type: mcp-oauth-success, correlation_id, "
                "tool_id} or {type: mcp-oauth-error, code, message, correlation_id}",
            ),
        ),
    ),
    Route(
        "GET",
        "/tools",
        handlers.list_tools,
        "The tools the caller may see, paged (configs are never listed)",
        None,
        ToolList,
        query_params=(
            ("q", {"type": "string", "maxLength": 500}, "ranks by and keeps tools matching these words"),
            ("kind", kinds.filter_schema, "only tools of this kind"),
            ("name_contains", {"type": "string", "minLength": 1, "maxLength": 200, "pattern": NOT_BLANK},
             "only names containing this"),
            ("requires_approval", {"type": "boolean"}, "only gated (true) or ungated (false) tools"),
            ("limit", {"type": "integer", "minimum": 1, "maximum": 100}, "page size (default 20)"),
            ("cursor", CURSOR_SCHEMA, CURSOR_DOC + "; it continues only the query and filters it was issued for"),
        ),
    ),
)

#: the route table, each route with the scope :func:`routing_core.access.scope_for` maps it to
ROUTES: tuple[Route, ...] = tuple(
    dataclasses.replace(r, scope=r.scope or scope_for(r.path)) if not r.public else r for r in _TABLE
)

"""Request bodies (validated with pydantic, unknown fields refused) and response shapes."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from annotated_types import Ge, Le
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StringConstraints
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from context_engine.knowledge.models import KnowledgeResult
from context_engine.limits import (
    INGEST_MANY_MAX,
    KNOWLEDGE_TOP_K_DEFAULT,
    KNOWLEDGE_TOP_K_MAX,
    MAX_ACL_ENTRIES,
    MAX_ACL_ENTRY_CHARS,
    MAX_AGENT_ID_CHARS,
    MAX_ATTRIBUTES_DEPTH,
    MAX_COMPRESS_TOKENS,
    MAX_FILTER_IDS,
    MAX_NAME_CHARS,
    MAX_QUERY_CHARS,
    MAX_SOURCE_ID_CHARS,
    SEARCH_TOP_DOCUMENTS_MAX,
    SEARCH_TOP_K_DEFAULT,
    SEARCH_TOP_K_MAX,
)
from context_engine.models import Document, DocumentPage, DocumentReport, IngestReport, SearchResult, Stats
from context_engine.revisions.models import DocumentVersion
from context_engine.validation import check_json_object

_STRICT = ConfigDict(extra="forbid")


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail


def _json_integer(value: Any) -> Any:
    """An integer as JSON Schema reads one: ``5`` or ``5.0``, never ``"5"`` or ``true``."""
    if isinstance(value, str | bool):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


JsonInt = Annotated[int, BeforeValidator(_json_integer)]


def _optional_int_schema(minimum: int, maximum: int | None = None) -> dict[str, Any]:
    """An optional integer's bounds as JSON Schema words (pydantic leaves ``ge``/``le`` there otherwise)."""
    bounds: dict[str, Any] = {"type": "integer", "minimum": minimum}
    if maximum is not None:
        bounds["maximum"] = maximum
    return {"anyOf": [bounds, {"type": "null"}]}


def _check_attributes(value: dict[str, Any]) -> dict[str, Any]:
    return check_json_object(value, "attributes", MAX_ATTRIBUTES_DEPTH)


#: a string holding a character that is not white space: what Python's ``str.strip`` (the engine's
#: test) leaves, written so JSON Schema, pydantic and Python regular expressions all read it alike
NOT_BLANK = r"[^\s\u001c-\u001f\u0085\ufeff]"
#: a principal holds at least one character that is not white space
Principal = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ACL_ENTRY_CHARS, pattern=NOT_BLANK)]
Acl = Annotated[list[Principal], Field(max_length=MAX_ACL_ENTRIES)]
FilterIds = Annotated[list[str], Field(max_length=MAX_FILTER_IDS)]
DocumentIds = Annotated[list[UUID], Field(max_length=MAX_FILTER_IDS)]
Query = Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS, pattern=NOT_BLANK)]
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS, pattern=NOT_BLANK)]
SourceId = Annotated[str, Field(min_length=1, max_length=MAX_SOURCE_ID_CHARS, pattern=NOT_BLANK)]
Attributes = Annotated[
    dict[str, Any],
    AfterValidator(_check_attributes),
    Field(description=f"a JSON object nested at most {MAX_ATTRIBUTES_DEPTH} levels deep"),
]


class IngestFields(BaseModel):
    """What ``POST /documents`` says about a document besides its content (JSON fields or form fields)."""

    model_config = _STRICT
    name: Name | None = None
    source_id: SourceId = "default"
    acl: Acl | None = None
    attributes: Attributes | None = None
    batch: StrictBool = Field(
        default=False,
        description="embed through the provider's batch API: the document answers batch_pending until a poll",
    )


class IngestTextBody(IngestFields):
    """``POST /documents`` as JSON: a text document."""

    text: str = Field(min_length=1, pattern=NOT_BLANK)


class IngestFailed(IngestReport):
    """``POST /documents`` when nothing was stored: the error contract beside the report."""

    error: ErrorDetail


class IngestTextList(BaseModel):
    """``POST /documents`` as a JSON list of text documents (at most ``INGEST_MANY_MAX``), each
    entry checked on its own: an entry that does not validate is refused alone, with its error."""

    documents: list[IngestTextBody | ErrorDetail] = Field(max_length=INGEST_MANY_MAX)


class IngestListItem(BaseModel):
    """One entry of a list ``POST /documents``, at its place in the list: its report or its error."""

    index: int
    report: DocumentReport | None = None
    error: ErrorDetail | None = None


class IngestListReport(BaseModel):
    """A list ``POST /documents``: one item per entry in order; ``totals`` counts statuses and ``refused``."""

    items: list[IngestListItem]
    totals: dict[str, int]


class IngestListFailed(IngestListReport):
    """A list ``POST /documents`` of which nothing was stored: the first entry's error beside the items."""

    error: ErrorDetail


#: single-object request bodies that also come as a JSON list, and the model the list becomes
LIST_BODIES: dict[type[BaseModel], type[BaseModel]] = {IngestTextBody: IngestTextList}


#: ``top_k``'s ceiling depends on ``group_by``: passages up to ``SEARCH_TOP_K_MAX``, documents further
_TOP_K_BY_GROUPING: dict[str, Any] = {
    "if": {"properties": {"group_by": {"const": "document"}}, "required": ["group_by"]},
    "then": {"properties": {"top_k": {"maximum": SEARCH_TOP_DOCUMENTS_MAX}}},
    "else": {"properties": {"top_k": {"maximum": SEARCH_TOP_K_MAX}}},
}


class SearchBody(BaseModel):
    """``POST /search``."""

    model_config = ConfigDict(**_STRICT, json_schema_extra=_TOP_K_BY_GROUPING)
    query: Query
    #: the ceiling is the engine's ``search.max_top_k``; the document states its default
    top_k: JsonInt = Field(
        default=SEARCH_TOP_K_DEFAULT,
        json_schema_extra={"minimum": 1, "maximum": SEARCH_TOP_DOCUMENTS_MAX},
        description=(
            f"how many hits: passages 1 to search.max_top_k ({SEARCH_TOP_K_MAX} unless configured otherwise); "
            f"with group_by document, documents 1 to search.max_top_documents ({SEARCH_TOP_DOCUMENTS_MAX})"
        ),
    )
    source_ids: FilterIds | None = None
    document_ids: DocumentIds | None = None
    group_by: Literal["chunk", "document"] = Field(
        default="chunk",
        description="chunk: the best passages; document: top_k counts distinct documents, each with its best passages",
    )
    compress_to_tokens: Annotated[int, BeforeValidator(_json_integer), Ge(1), Le(MAX_COMPRESS_TOKENS)] | None = Field(
        default=None,
        json_schema_extra=_optional_int_schema(1, MAX_COMPRESS_TOKENS),
        description="fit the hits to this many tokens (the embedder's count): weakest hits first, then long tails",
    )
    as_of: Annotated[int, BeforeValidator(_json_integer), Ge(0)] | None = Field(
        default=None,
        json_schema_extra=_optional_int_schema(0),
        description="search the corpus as it was at this revision",
    )
    mode: Literal["hybrid", "graph"] | None = Field(
        default=None,
        description=(
            "left out: the graph leg joins when the query names an entity; hybrid: never; graph: asked for "
            "(409 graph_disabled / graph_not_enabled when this deployment has no graph)"
        ),
    )


class KnowledgeQueryBody(BaseModel):
    """``POST /knowledge/query``: camelCase on the wire, unknown fields refused."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=False)
    query: Query = Field(description="the question; must not be empty")
    top_k: JsonInt = Field(
        default=KNOWLEDGE_TOP_K_DEFAULT,
        ge=1,
        le=KNOWLEDGE_TOP_K_MAX,
        description="how many passages to return",
    )
    agent_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_AGENT_ID_CHARS,
        description="restrict to the sources linked to this agent",
    )
    expand: StrictBool = Field(default=True, description="let the model split a compound question into sub-queries")
    rerank: StrictBool = Field(default=True, description="let the model re-score the fused candidates (guarded)")
    as_of: Annotated[int, BeforeValidator(_json_integer), Ge(0)] | None = Field(
        default=None,
        json_schema_extra=_optional_int_schema(0),
        description="answer from the corpus as it was at this revision",
    )


class UpdateDocumentBody(BaseModel):
    """``PATCH /documents/{id}``: only the fields given change."""

    model_config = _STRICT
    acl: Acl | None = None
    attributes: Attributes | None = None
    name: Name | None = None


class DocumentVersions(BaseModel):
    """``GET /documents/{document_id}/versions``: every version the caller may see, oldest first."""

    versions: list[DocumentVersion]


class ToolExecuteBody(BaseModel):
    """``POST /tools/execute``: which tool, with what arguments. The approval scope is the host's, never a field."""

    model_config = _STRICT
    name: str = Field(min_length=1, max_length=200, pattern=NOT_BLANK, description="the tool's call name")
    arguments: dict[str, Any] = Field(default_factory=dict, description="checked against the tool's schema")
    tool_id: str | None = Field(default=None, min_length=1, max_length=100, description="picks one of two same-named")
    response_mode: Literal["json", "tsv"] | None = Field(default=None, description="tsv: arrays of objects as TSV")


class ToolResult(BaseModel):
    """``POST /tools/execute`` 200: the (shaped, redacted) result and what the call cost."""

    result: Any = None
    usage: dict[str, Any] = Field(default_factory=dict)
    tool_id: str | None = None
    call_id: str | None = None


class ApprovalRequired(BaseModel):
    """``POST /tools/execute`` 202: the tool waits for a person; call again once it is approved."""

    approval_required: dict[str, Any]


class ToolList(BaseModel):
    """``GET /tools``: a page of the tools the caller may see (configs are never listed)."""

    tools: list[dict[str, Any]]
    next_cursor: str | None = None


class ReplicaCounts(BaseModel):
    """``GET /ready`` with read replicas configured: how many there are and how many answer."""

    configured: int
    up: int


class Health(BaseModel):
    """``GET /health`` and ``GET /ready``: the status and, on ``/ready``, the read replicas' counts."""

    status: Literal["ok", "ready"]
    #: only when ``database.read_urls`` is set; a replica down leaves the service ready (the writer reads)
    replicas: ReplicaCounts | None = None
    #: only on ``/ready`` when a feature is off by configuration (``tools``: no secret_key, so stored tools
    #: cannot run); the service is still ready
    disabled: dict[str, str] | None = None


class DeletedBody(BaseModel):
    id: str
    deleted: bool
    revision: int


__all__ = [
    "DeletedBody",
    "Document",
    "DocumentPage",
    "ErrorBody",
    "Health",
    "IngestFailed",
    "IngestFields",
    "IngestReport",
    "IngestTextBody",
    "KnowledgeQueryBody",
    "KnowledgeResult",
    "SearchBody",
    "SearchResult",
    "Stats",
    "UpdateDocumentBody",
]

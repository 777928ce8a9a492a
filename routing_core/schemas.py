"""Request bodies (validated with pydantic, unknown fields refused) and response shapes."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from context_engine.knowledge.models import KnowledgeResult
from context_engine.models import Document, DocumentPage, IngestReport, SearchResult, Stats

_STRICT = ConfigDict(extra="forbid")


class IngestTextBody(BaseModel):
    """``POST /documents`` as JSON: a text document."""

    model_config = _STRICT
    text: str = Field(min_length=1)
    name: str | None = Field(default=None, min_length=1, max_length=1000)
    source_id: str = Field(default="default", min_length=1, max_length=500)
    acl: list[str] | None = None
    attributes: dict[str, Any] | None = None


class SearchBody(BaseModel):
    """``POST /search``."""

    model_config = _STRICT
    query: str
    top_k: int = 10
    source_ids: list[str] | None = None
    document_ids: list[str] | None = None


class KnowledgeQueryBody(BaseModel):
    """``POST /knowledge/query``: camelCase on the wire, unknown fields refused."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=False)
    query: str = Field(description="the question; must not be empty", json_schema_extra={"minLength": 1})
    top_k: int = Field(default=5, ge=1, le=20, description="how many passages to return")
    agent_id: str | None = Field(
        default=None, min_length=1, max_length=200, description="restrict to the sources linked to this agent"
    )
    expand: bool = Field(default=True, description="let the model split a compound question into sub-queries")
    rerank: bool = Field(default=True, description="let the model re-score the fused candidates (guarded)")


class UpdateDocumentBody(BaseModel):
    """``PATCH /documents/{id}``: only the fields given change."""

    model_config = _STRICT
    acl: list[str] | None = None
    attributes: dict[str, Any] | None = None
    name: str | None = Field(default=None, min_length=1, max_length=1000)


class DeletedBody(BaseModel):
    id: str
    deleted: bool
    revision: int


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail


__all__ = [
    "DeletedBody",
    "Document",
    "DocumentPage",
    "ErrorBody",
    "IngestReport",
    "IngestTextBody",
    "KnowledgeQueryBody",
    "KnowledgeResult",
    "SearchBody",
    "SearchResult",
    "Stats",
    "UpdateDocumentBody",
]

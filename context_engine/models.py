"""Result types the engine returns (and the routes serialise)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

DocumentStatus = Literal["completed", "failed", "embedding", "processing", "batch_pending"]
FailureReason = Literal[
    "input_too_large",
    "provider_rejected",
    "provider_unavailable",
    "extraction_failed",
    "chunk_set_changed",
    "vision_failed",
    "batch_failed",
    "unknown",
]

#: one fixed sentence per failure code, never interpolated with provider text
FAILURE_MESSAGES: dict[str, str] = {
    "input_too_large": "A part of the document is larger than the embedding model accepts in one input.",
    "provider_rejected": "The embedding provider rejected the request.",
    "provider_unavailable": "The embedding provider could not be reached or kept failing.",
    "extraction_failed": "The file could not be read as a supported document format.",
    "chunk_set_changed": "The document changed while it was being embedded.",
    "vision_failed": "The model that transcribes scanned pages and images failed on a page of this document.",
    "batch_failed": "The embedding provider's batch job ended without a vector for every chunk.",
    "unknown": "The document could not be processed.",
}


def shown_failure(reason: str | None) -> str | None:
    """The failure code a reader is shown: a stored code outside the vocabulary reads ``unknown``."""
    if not reason:
        return None
    return reason if reason in FAILURE_MESSAGES else "unknown"


class Hit(BaseModel):
    """One ranked passage."""

    document_id: str
    document_name: str
    chunk_text: str
    score: float
    source_id: str
    chunk_idx: int | None
    chunk_id: int
    section: str | None = None
    page: int | None = None
    #: legs that found this passage (``fts``, ``trigram``, ``vector``)
    matched_by: list[str] = Field(default_factory=list)
    #: cosine similarity to the query when the vector leg scored it
    similarity: float | None = None


class DocumentHit(BaseModel):
    """One document of a ``group_by="document"`` search: its best passages and its score."""

    document_id: str
    document_name: str
    source_id: str
    #: the fused score of its best passage
    score: float
    #: legs that found any of its passages, in registry order
    matched_by: list[str] = Field(default_factory=list)
    #: its best passages, best first (at most ``search.passages_per_document``)
    passages: list[Hit]


class SearchResult(BaseModel):
    #: the best passages (for ``group_by="document"``, the passages of ``documents`` in their order)
    hits: list[Hit]
    usage: dict[str, Any]
    #: only for ``group_by="document"``: the best documents, ``top_k`` of them at most
    documents: list[DocumentHit] | None = None


def search_wire(result: SearchResult) -> dict[str, Any]:
    """A search result as the routes send it (and the framework integrations read it): JSON types,
    ``documents`` only for a ``group_by="document"`` search. Redaction happened in ``engine.search``."""
    passages_only = {"documents"} if result.documents is None else None
    return result.model_dump(mode="json", exclude=passages_only)


class DocumentReport(BaseModel):
    """What happened to one document of an ingest call."""

    document_id: str | None
    name: str
    source_id: str
    #: ``batch_pending``: stored and readable by the text legs; ``poll_batches`` completes it
    status: Literal["completed", "failed", "skipped", "embedding", "batch_pending"]
    version: int | None = None
    revision: int | None = None
    chunks: int = 0
    skip_reason: str | None = None
    failure_reason: FailureReason | None = None
    failure_message: str | None = None
    #: raw error text for operators only; routers drop it for non-trusted callers
    error: str | None = None
    mime: str | None = None
    pages: int | None = None
    pages_source: str | None = None
    #: ``ingest(mode="graph")``: the mode that ran (a spreadsheet stays ``hybrid``) and why
    mode_used: str | None = None
    mode_reason: str | None = None
    #: the stored text was cut at ``ingest.max_document_text_chars`` (every chunk is still stored)
    text_truncated: bool = False


class IngestReport(BaseModel):
    documents: list[DocumentReport]
    totals: dict[str, int]


class IngestManyError(BaseModel):
    """Why one document of a batch was refused (nothing of it was stored): the code and HTTP status the
    same refusal of a single ingest answers with."""

    code: str
    message: str
    status: int


class IngestManyItem(BaseModel):
    """One document of ``ingest_many``, at its place in the input: a report, or the refusal."""

    index: int
    report: DocumentReport | None = None
    error: IngestManyError | None = None


class IngestManyReport(BaseModel):
    """``ingest_many``: one item per input document, in input order; ``totals`` counts statuses
    (``refused`` counts the errors)."""

    items: list[IngestManyItem]
    totals: dict[str, int]


class Document(BaseModel):
    id: str
    name: str
    source_id: str
    mime: str
    acl: list[str]
    attributes: dict[str, Any]
    status: str
    failure_reason: str | None = None
    failure_message: str | None = None
    error: str | None = None
    version: int
    revision: int
    chunk_count: int
    meta: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
    updated_at: datetime
    text: str | None = None
    #: ``text`` was cut at ``ingest.max_document_text_chars`` when it was stored (the chunks were not)
    text_truncated: bool = False


class DocumentPage(BaseModel):
    documents: list[Document]
    next_cursor: str | None = None


class Stats(BaseModel):
    documents: int
    chunks: int
    by_status: dict[str, int]
    sources: dict[str, int]
    revision: int

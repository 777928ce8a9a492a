"""What ``knowledge_query`` returns: snake_case in Python, camelCase on the wire (``by_alias``).

Field mapping to our storage, fixed here so every door says the same thing:

- ``source_id``/``source_name`` (wire ``sourceId``/``sourceName``): the *document* the passage
  comes from, its id and its name (what the reference calls a knowledge source).
- ``collection_id``/``dossier_name`` (``collectionId``/``dossierName``): our ``source_id``, the
  collection the document was filed under; we keep no separate display name, so both carry it.
- ``chunk_id`` (``chunkId``): the stored chunk's id as a string. It is stable across calls for as
  long as the document's text is unchanged (re-ingesting changed text writes new chunks).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

_WIRE = ConfigDict(alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True)


class KnowledgeMatch(BaseModel):
    """One passage, best first."""

    model_config = _WIRE

    source_id: str = Field(description="id of the document the passage comes from")
    source_name: str = Field(description="name of that document")
    collection_id: str | None = Field(description="the source (collection) the document is filed under")
    dossier_name: str | None = Field(description="display name of that collection (its id: no separate name)")
    chunk_id: str = Field(description="stable id of the passage")
    section: str | None = Field(description="nearest heading")
    page: int | None = Field(description="1-based page; null for a document without pages")
    content: str = Field(description="the passage text, at most about 2,000 characters")
    similarity: float | None = Field(
        description="best cosine similarity to any searched query, 0 to 1; null only for a passage with no vector"
    )
    score: float = Field(description="fused reciprocal-rank score; compare only within one response")
    matched_by: list[str] = Field(description="the search legs that found it, for any of the searched queries")
    rerank_score: float | None = Field(description="the judge's relevance, 0 to 1, when its order was used; else null")


class KnowledgeTimings(BaseModel):
    model_config = _WIRE

    expand_ms: int
    search_ms: int
    rerank_ms: int


class KnowledgeTrace(BaseModel):
    """How the matches were found."""

    model_config = _WIRE

    queries: list[str] = Field(description="every query searched: the question first, then any sub-queries")
    vector_backend: Literal["pgvector", "memory"]
    candidate_count: int = Field(description="distinct passages fused, before the final cut")
    rerank_applied: bool = Field(description="true only when the judge's order was used")
    timings: KnowledgeTimings
    tokens_used: int = Field(description="model tokens spent on expansion and reranking")
    #: why the judge's order was or was not used (engine callers only; not on the wire)
    rerank_reason: str = Field(default="not_requested", exclude=True)


class KnowledgeResult(BaseModel):
    model_config = _WIRE

    matches: list[KnowledgeMatch]
    trace: KnowledgeTrace


class AgentLinks(BaseModel):
    """The documents and collections an agent retrieves from."""

    agent_id: str
    document_ids: list[str]
    source_ids: list[str]

"""A document's part of the graph: built after it is stored in graph mode, repaired after it changes.

``extract_document`` is what ingest calls once a document's chunks are stored with
``mode="graph"``: it reads the chunks (or takes them from the caller), extracts their facts with
the model (one call per batch of chunks), replaces the document's facts in one transaction and
rebuilds the communities of every group whose facts changed. A tabular document (CSV, TSV, XLSX)
stays hybrid: no model is called and the report says why. Because the facts of the document's old
version are replaced too, a re-ingest that changed the document repairs its graph by itself.

``repair_document`` is what a delete calls after the document's chunks are closed: it removes the
facts of chunks that are no longer current, recounts frequencies, deletes orphaned entities and
rebuilds the communities of the groups those chunks belonged to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

from context_engine.config import ContextEngineConfig, LLMConfig
from context_engine.errors import ConfigError, NotFound
from context_engine.graph import names, store
from context_engine.graph.entities import ChunkText, extract
from context_engine.graph.errors import GraphNeedsLLM
from context_engine.graph.schema import graph_enabled
from context_engine.llm.base import LLMClient
from context_engine.services import Services

TABULAR_MIMES = frozenset(
    {"text/csv", "text/tab-separated-values", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"}
)
#: the one fixed reason a graph-mode document is processed as hybrid
TABULAR_REASON = "tabular documents stay hybrid"


@dataclass
class GraphReport:
    """What graph mode did for one document (``mode_used`` is what actually ran)."""

    document_id: str
    mode_used: str
    mode_reason: str | None
    chunks: int = 0
    batches: int = 0
    llm_calls: int = 0
    entities: int = 0
    relationships: int = 0
    removed_entities: int = 0
    communities: int = 0
    summary_calls: int = 0
    tokens: int = 0


async def extract_document(
    services: Services, document_id: str, chunks: Sequence[ChunkText] | None = None
) -> GraphReport:
    """Build the graph facts of a stored document; ``chunks`` defaults to its current chunk rows."""
    db = await services.db()
    await store.require_graph(db)
    mime, stored = await store.document_chunks(db, document_id)
    if mime is None:
        raise NotFound(f"document {document_id} not found")
    if mime in TABULAR_MIMES:
        return GraphReport(document_id, "hybrid", TABULAR_REASON)
    if extraction_llm(services.config) is None:
        raise GraphNeedsLLM()
    community = _communities()  # before any model call: a missing extra must not cost an extraction
    chunks = list(chunks) if chunks is not None else stored
    llm = _llm(services)
    try:
        # no connection is held while the model works
        extraction = await extract(llm, chunks, hooks=services.hooks, document_id=document_id)
        written = await store.write_document(db, document_id, extraction.facts)
        names.forget(db)
        rebuilt = await community.rebuild(db, llm, written.groups)
    finally:
        await llm.aclose()
    return GraphReport(
        document_id,
        "graph",
        None,
        chunks=len(chunks),
        batches=extraction.batches,
        llm_calls=extraction.llm_calls,
        entities=written.entities,
        relationships=written.relationships,
        removed_entities=written.removed_entities,
        communities=rebuilt.communities,
        summary_calls=rebuilt.llm_calls,
        tokens=extraction.tokens + rebuilt.tokens,
    )


@dataclass
class RepairReport:
    document_id: str
    mentions_removed: int
    relationships_removed: int
    entities_removed: int
    communities: int
    summary_calls: int


async def repair_document(services: Services, document_id: str) -> RepairReport:
    """Remove what the document's closed chunks stated; a no-op when the graph tables do not exist."""
    db = await services.db()
    async with db.connect() as conn:
        if not await graph_enabled(conn):
            return RepairReport(document_id, 0, 0, 0, 0, 0)
    community = _communities()
    removed = await store.remove_stale(db, document_id)
    names.forget(db)
    llm = _llm(services) if extraction_llm(services.config) is not None else None
    try:
        rebuilt = await community.rebuild(db, llm, removed.groups)
    finally:
        if llm is not None:
            await llm.aclose()
    return RepairReport(
        document_id,
        removed.mentions,
        removed.relationships,
        removed.removed_entities,
        rebuilt.communities,
        rebuilt.llm_calls,
    )


def _communities() -> ModuleType:
    """The community module, which needs networkx (the ``graph`` extra)."""
    try:
        from context_engine.graph import communities
    except ImportError as exc:
        raise ConfigError(
            'graph mode needs networkx for community detection: pip install "pg-context-engine[graph]"'
        ) from exc
    return communities


def _llm(services: Services) -> LLMClient:
    from context_engine.llm.factory import build_llm

    chosen = extraction_llm(services.config)
    assert chosen is not None
    return build_llm(chosen, services.http_client_factory)


def extraction_llm(config: ContextEngineConfig) -> LLMConfig | None:
    """``graph.extraction_llm``, else the ``llm`` section."""
    return config.graph.extraction_llm or config.llm

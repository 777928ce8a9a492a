"""The knowledge graph behind ``mode="graph"``: its tables, a document's facts (built at ingest or
later, repaired after a delete) and the navigation actions over them.

The graph modules that read, write and navigate facts all load the entity-extraction code, which
``import context_engine`` and the search path never load (``tests/test_graph_entities.py``): they are
imported by the functions here that use them, on the first graph call, and nowhere else.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from context_engine.errors import ContextEngineError
from context_engine.graph import names
from context_engine.graph.errors import GraphDisabled, GraphNeedsLLM
from context_engine.graph.redact import redact_answer
from context_engine.models import DocumentReport
from context_engine.operations.context import EngineContext
from context_engine.operations.document_reads import get_document
from context_engine.principals import TRUSTED, Principals, resolve
from context_engine.redaction import RedactionPolicy
from context_engine.storage.migrate import migrate
from context_engine.storage.predicates import ReadScope
from context_engine.validation import check_document_id, check_document_ids, check_id_list
from context_engine.write_access import WriteTarget

log = logging.getLogger("context_engine")


async def migrate_graph(ctx: EngineContext) -> list[str]:
    """Create the graph tables (``context-engine migrate --graph``); returns the revisions applied."""
    db = await ctx.db()
    announce = logging.getLogger("context_engine.migrate").info  # a library logs its index builds
    report = await migrate(
        db,
        dim=ctx.services.embedder.dim,
        text_search_config=ctx.services.text_search_config,
        announce=announce,
        graph=True,
        trigram=ctx.config.fusion.trigram_enabled,
        halfvec=ctx.config.storage.hnsw_halfvec,
        document_fts=ctx.config.fusion.document_fts_enabled,
    )
    names.forget(db)
    return report.applied


async def extract_graph(ctx: EngineContext, document_id: str, *, principals: Principals = TRUSTED) -> Any:
    """Build the graph facts of a stored document (what ``ingest(mode="graph")`` runs after storing it)."""
    from context_engine.graph.document import extract_document

    doc = await get_document(ctx, document_id, principals=principals, include_text=False)
    # it rewrites the document's graph facts (and spends model calls): a write, not a read
    target = WriteTarget(doc.id, doc.source_id, doc.name, tuple(doc.acl))
    ctx.services.write_access.check(target, resolve(principals))
    return await extract_document(ctx.services, doc.id)


async def repair_graph(ctx: EngineContext, document_id: str) -> Any:
    """Remove what a deleted or replaced document's closed chunks stated (what ``delete_document`` runs after)."""
    from context_engine.graph.document import repair_document

    return await repair_document(ctx.services, check_document_id(document_id))


async def graph_query(
    ctx: EngineContext,
    action: str,
    *,
    principals: Principals = None,
    source_ids: Sequence[str] | None = None,
    document_ids: Sequence[str] | None = None,
    redaction: RedactionPolicy | None = None,
    redaction_secret_key: str | bytes | None = None,
    **arguments: Any,
) -> dict[str, Any]:
    """One navigation action (``get_neighbors``, ``traverse``, ``find_related``, ``community_summary``)
    under the caller's ACL (and ``document_ids``, a knowledge tool's ceiling), its text fields redacted
    by the output policy (ids are not)."""
    from context_engine.graph.navigate import run_action

    caller = resolve(principals)
    scope = ReadScope(caller, check_id_list(source_ids, "source_ids"), check_document_ids(document_ids))
    answer = await run_action(await ctx.db(), scope, action, arguments)
    return redact_answer(answer, ctx.redactor(caller, redaction, redaction_secret_key))


async def check_graph_ingest(ctx: EngineContext) -> None:
    """Refuse ``ingest(mode="graph")`` before anything is stored: no graph tables, or no model."""
    from context_engine.graph import store
    from context_engine.graph.document import extraction_llm

    if not ctx.config.graph.enabled:
        raise GraphDisabled()
    await store.require_graph(await ctx.db())
    if extraction_llm(ctx.config) is None:
        raise GraphNeedsLLM()


async def graph_step(ctx: EngineContext, report: DocumentReport) -> None:
    """Extract a stored document's graph facts; the report says which mode ran and why."""
    from context_engine.graph.document import extract_document

    try:
        graph = await extract_document(ctx.services, report.document_id)  # type: ignore[arg-type]
        report.mode_used, report.mode_reason = graph.mode_used, graph.mode_reason
    except ContextEngineError as exc:  # stored and searchable; its graph facts are missing
        log.warning("graph extraction failed for document %s (%s)", report.document_id, exc.code)
        report.mode_used, report.mode_reason = "hybrid", exc.code

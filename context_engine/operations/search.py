"""The two reads by query: ``search`` (every registered leg, fused) and ``knowledge_query`` (expansion,
per-query search, fusion and a guarded rerank). Both run under the caller's ACL, may read a replica,
and tell chunk ids to a non-trusted caller as handles."""

from __future__ import annotations

from collections.abc import Sequence

from context_engine.errors import InvalidRequest
from context_engine.knowledge.models import KnowledgeResult
from context_engine.knowledge.pipeline import knowledge_query as run_knowledge_query
from context_engine.limits import KNOWLEDGE_TOP_K_MAX, MAX_COMPRESS_TOKENS, MAX_QUERY_CHARS
from context_engine.models import SearchResult
from context_engine.operations.context import EngineContext
from context_engine.principals import Principals, resolve
from context_engine.redaction import RedactionPolicy
from context_engine.retrieval.search import search as run_search
from context_engine.revisions import view as revision_view
from context_engine.services import Consistency
from context_engine.storage.predicates import ReadScope
from context_engine.validation import check_document_ids, check_id_list, check_int_range, check_question


async def search(
    ctx: EngineContext,
    query: str,
    *,
    source_ids: Sequence[str] | None = None,
    document_ids: Sequence[str] | None = None,
    principals: Principals = None,
    top_k: int = 10,
    group_by: str = "chunk",
    compress_to_tokens: int | None = None,
    redaction: RedactionPolicy | None = None,
    redaction_secret_key: str | bytes | None = None,
    as_of: int | None = None,
    consistency: Consistency = "replica",
    min_revision: int | None = None,
    mode: str | None = None,
    explain: bool = False,
) -> SearchResult:
    """Hybrid search: every registered leg (full-text, trigram, vector, ...) fused by ``fusion.method``.

    ``mode``: left out, the graph leg joins when the query names an entity the caller may see;
    ``"hybrid"`` leaves it out; ``"graph"`` asks for it and raises when this deployment has no
    graph. ``usage["mode"]`` / ``usage["mode_used"]`` say what was asked and what ran, and
    ``usage["graph"]["reason"]`` why (one of ``GRAPH_REASONS``).

    ``usage["vector_plan"]`` (the planner's choice and its figures, which are sized by the whole
    index) is reported to a trusted caller only, or with ``explain=True``: a host's own
    diagnostics, never to be passed on to the caller whose principals the search ran with.

    ``as_of`` searches the store as it was at that revision (``None``: the current one).
    With read replicas configured the search runs on one (``usage["read_from"]`` names the server):
    ``consistency="primary"`` reads the writer instead, and ``min_revision`` (or ``as_of``) picks a
    server that has applied that revision, so a caller sees its own ingest (docs/scaling.md).

    ``group_by="document"`` counts distinct documents in ``top_k`` (up to
    ``search.max_top_documents``), each with its best passages (``SearchResult.documents``).
    ``compress_to_tokens=N`` fits the hits to N tokens of the embedder's counter: the weakest hits
    go first, then the tails of the longest; ``usage["compression"]`` says what was cut.
    Hits are redacted by the output policy (the engine's, the view's, or this call's)
    before they are returned.
    """
    query = check_question(query, "query", MAX_QUERY_CHARS)
    if group_by not in ("chunk", "document"):
        raise InvalidRequest('group_by must be "chunk" (passages) or "document"')
    if mode is not None and mode not in ("auto", "hybrid", "graph"):
        raise InvalidRequest('mode must be "hybrid" or "graph" (or left out)')
    cfg = ctx.config.search
    top_k = check_int_range(top_k, "top_k", 1, cfg.max_top_documents if group_by == "document" else cfg.max_top_k)
    caller = resolve(principals)
    redactor = ctx.redactor(caller, redaction, redaction_secret_key)
    sources, documents = check_id_list(source_ids, "source_ids"), check_document_ids(document_ids)
    if compress_to_tokens is not None:
        check_int_range(compress_to_tokens, "compress_to_tokens", 1, MAX_COMPRESS_TOKENS)

    revs = await ctx.revisions(caller)
    at, floor = revs.heard(as_of), revs.heard(min_revision, "min_revision")

    async def read() -> SearchResult:
        db = await ctx.services.read_db()
        revision = await revision_view.resolve(db, at, revs, caller, source_ids=sources, document_ids=documents)
        scope = ReadScope(caller, sources, documents, as_of=revision)
        return await run_search(
            ctx.retriever,
            redactor,
            query,
            scope,
            top_k=top_k,
            group_by=group_by,
            compress_to_tokens=compress_to_tokens,
            mode=mode or "auto",
        )

    result, server = await ctx.services.reading(
        read, consistency=consistency, as_of=at, min_revision=floor, trusted=caller is None
    )
    result.usage["read_from"] = server
    if caller is not None and not explain:  # its figures count rows of every tenant
        result.usage.pop("vector_plan", None)
    if caller is not None:  # chunk ids come from one sequence for every tenant: told as handles
        passages = {id(h): h for h in result.hits}
        for grouped in result.documents or []:
            passages.update({id(h): h for h in grouped.passages})
        for hit in passages.values():
            hit.chunk_id = revs.told_chunk(hit.chunk_id)
    return result


async def knowledge_query(
    ctx: EngineContext,
    query: str,
    *,
    top_k: int = 5,
    agent_id: str | None = None,
    expand: bool = True,
    rerank: bool = True,
    principals: Principals = None,
    source_ids: Sequence[str] | None = None,
    redaction: RedactionPolicy | None = None,
    redaction_secret_key: str | bytes | None = None,
    as_of: int | None = None,
    consistency: Consistency = "replica",
    min_revision: int | None = None,
) -> KnowledgeResult:
    """The passages that best answer ``query``, with a trace of how they were found.

    Expansion, per-query vector + full-text search, fusion, enumeration widening and a guarded
    rerank: see :mod:`context_engine.knowledge.pipeline`. ``expand=False, rerank=False`` calls no
    model. ``agent_id`` narrows to the agent's links (an unknown agent is ``NotFound``). Output
    redaction applies as for ``search``, to the judge's view of the passages as well. ``as_of``
    reads the store as of that revision. Read replicas: as for ``search`` (a replica that fails
    mid-way hands the whole query, model calls included, to the writer).
    """
    query = check_question(query, "query", MAX_QUERY_CHARS)
    top_k = check_int_range(top_k, "top_k", 1, KNOWLEDGE_TOP_K_MAX)
    if not isinstance(expand, bool) or not isinstance(rerank, bool):
        raise InvalidRequest("expand and rerank must be booleans")
    caller = resolve(principals)
    sources = check_id_list(source_ids, "source_ids")

    revs = await ctx.revisions(caller)
    at, floor = revs.heard(as_of), revs.heard(min_revision, "min_revision")

    async def read() -> KnowledgeResult:
        db = await ctx.services.read_db()
        revision = await revision_view.resolve(db, at, revs, caller, source_ids=sources)
        return await run_knowledge_query(
            ctx.retriever,
            ctx.redactor(caller, redaction, redaction_secret_key),
            query,
            caller=caller,
            top_k=top_k,
            agent_id=agent_id,
            expand=expand,
            rerank=rerank,
            source_ids=sources,
            as_of=revision,
        )

    result, _ = await ctx.services.reading(
        read, consistency=consistency, as_of=at, min_revision=floor, trusted=caller is None
    )
    for match in result.matches if caller is not None else []:
        match.chunk_id = str(revs.told_chunk(int(match.chunk_id)))
    return result

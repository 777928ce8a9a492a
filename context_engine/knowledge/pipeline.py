"""``knowledge_query``: expand, search each sub-query on two channels, fuse, widen, guarded rerank, trace.

1. **Expand.** Only when ``expand`` is set, an LLM is configured and the question may be compound
   (:func:`~context_engine.knowledge.shape.maybe_compound`); the model splits it into sub-queries
   and the question itself is always searched too. Any failure (error, invalid reply twice,
   ``knowledge.expand_timeout``) falls back to the question alone.
2. **Search.** The one retriever (:mod:`context_engine.retrieval.retriever`) runs every active leg
   for every query concurrently (the queries are embedded in one call), all under the same ACL +
   scope predicate as ``/search`` (narrowed further to an agent's links when ``agent_id`` is given).
3. **Fuse.** The question searched alone (no model, or no sub-queries) is fused exactly as
   ``/search`` fuses it (``fusion.method``), so the no-model path ranks what plain search ranks.
   With sub-queries, every leg of every query is one ranking in weighted reciprocal rank fusion
   (``fusion.k``, each leg's ``fusion.weights``): ranks, not scores, because scores of different
   sub-queries are not comparable. A passage found by several legs, or for several sub-queries,
   ranks higher.
4. **Enumeration.** A question asking for a list takes ``knowledge.enumeration_candidates`` per leg
   instead of ``knowledge.candidates``; the candidates the usual depth finds keep that depth's order
   and the deeper ones follow them, and the list-shaped candidates (tables, sheet rows, three or
   more list items) form one more ranking in the fusion, so the chunk holding the list rises.
5. **Guarded rerank.** Only when ``rerank`` is set, a judge is configured and more candidates were
   fused than ``top_k``; see :mod:`context_engine.knowledge.guard` for when the verdict is used.
6. **Trace.** The searched queries, the vector backend, the candidate count, whether the judge's
   order was used, stage timings and model tokens.

No model is called with ``expand=False, rerank=False`` (only the embedder, for the query vectors),
nor when no ``llm``/``rerank`` section is configured. Provider clients are built per call and
closed at its end unless the host supplied them (``http_client_factory``), which then owns them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.config import ContextEngineConfig, RerankConfig
from context_engine.errors import ContextEngineError
from context_engine.knowledge import agents, guard, shape
from context_engine.knowledge.expand import expand_query, searched_queries
from context_engine.knowledge.models import KnowledgeMatch, KnowledgeResult, KnowledgeTimings, KnowledgeTrace
from context_engine.llm.base import HttpClientFactory, LLMClient
from context_engine.redaction.apply import Redactor
from context_engine.rerank.base import Reranker
from context_engine.retrieval.retriever import Retriever
from context_engine.storage import repository as repo
from context_engine.storage.predicates import ReadScope
from context_engine.storage.vectors import vector_literal

log = logging.getLogger("context_engine.knowledge")

#: the ranking of list-shaped candidates added for an enumeration question (not a leg)
STRUCTURE = "structure"


class _Models:
    """The LLM and the judge for one call, built on first use (so the no-model path builds nothing)."""

    def __init__(self, config: ContextEngineConfig, factory: HttpClientFactory | None):
        self._config = config
        self._factory = factory
        self._llm: LLMClient | None = None
        self._reranker: Reranker | None = None
        self._reranker_built = False

    def llm(self) -> LLMClient:
        if self._llm is None:
            from context_engine.llm.factory import build_llm

            assert self._config.llm is not None
            self._llm = build_llm(self._config.llm, self._factory)
        return self._llm

    def reranker(self) -> Reranker | None:
        if not self._reranker_built:
            from context_engine.rerank.factory import build_reranker

            uses_llm = self._config.rerank is None or self._config.rerank.provider == "llm"
            llm = self.llm() if uses_llm and self._config.llm is not None else None
            self._reranker = build_reranker(self._config, self._factory, llm)
            self._reranker_built = True
        return self._reranker

    async def aclose(self) -> None:
        for closable in (self._reranker, self._llm):
            if closable is not None:
                await closable.aclose()


def _ms(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)


async def knowledge_query(
    retriever: Retriever,
    redactor: Redactor,
    query: str,
    *,
    caller: tuple[str, ...] | None,
    top_k: int,
    agent_id: str | None,
    expand: bool,
    rerank: bool,
    source_ids: Sequence[str] | None,
    as_of: int | None = None,
) -> KnowledgeResult:
    """The best ``top_k`` passages for ``query`` and a trace of how they were found (see module doc).

    The arguments were validated by the engine. ``redactor`` (the output redaction for this call) applies
    to every text that leaves the engine: the passages, names and sections returned, and the passages
    shown to the judge. ``as_of`` (checked by the engine) is the revision read, ``None`` the current one.
    """
    services = retriever.services
    db = await services.read_db()  # a read replica when the read was given one
    if agent_id is not None:
        agent_id = await agents.require_agent(db, agent_id)
    scope = ReadScope(caller, list(source_ids) if source_ids is not None else None, None, agent_id, as_of)
    config = services.config
    models = _Models(config, services.http_client_factory)
    tokens = 0
    try:
        # 1. expand
        started = time.perf_counter()
        queries = [query]
        if expand and config.llm is not None and shape.maybe_compound(query):
            llm = models.llm()  # a misconfigured model is the operator's error, raised, not skipped
            try:
                subs, used = await asyncio.wait_for(
                    expand_query(llm, query, max_sub_queries=config.knowledge.max_sub_queries),
                    timeout=config.knowledge.expand_timeout,
                )
                tokens += used
                queries = searched_queries(query, subs)
            except Exception as exc:  # any failure: the question alone is still searched
                tokens += int(getattr(exc, "tokens", 0) or 0)
                log.warning("query expansion failed (%s); searching the question alone", _describe(exc))
        expand_ms = _ms(started)

        # 2-4. search every query on both channels, fuse, widen for enumerations
        started = time.perf_counter()
        enumeration = shape.is_enumeration(query)
        limit = config.knowledge.enumeration_candidates if enumeration else config.knowledge.candidates
        retrieval = await retriever.retrieve(queries, scope, limit)
        rankings = retrieval.rankings()
        similarity = _best_similarity(retrieval.results.get("vector", []))
        vectors = retrieval.vectors or []
        # one query: the fusion /search uses; several: ranks, since their scores do not compare
        method = config.fusion.method if len(queries) == 1 else "rrf"
        fused = retriever.fuse(method, rankings)
        rows: dict[int, dict[str, Any]] = {}
        if enumeration and fused:
            fused = _widened(retriever, method, rankings, fused, config.knowledge.candidates)
            rows = await repo.fetch_hits(db, [cid for cid, _ in fused], scope)
            listed = [cid for cid, _ in fused if cid in rows and shape.list_like(rows[cid]["text"], rows[cid]["kind"])]
            if listed:
                rankings[STRUCTURE] = [(cid, 0.0) for cid in listed]
                strongest = max(retriever.weights()[leg] for leg in retrieval.legs) if retrieval.legs else 0.0
                fused = retriever.fuse("rrf", rankings, {STRUCTURE: strongest})
        search_ms = _ms(started)
        scores = dict(fused)
        order = [cid for cid, _ in fused]

        # 5. guarded rerank
        started = time.perf_counter()
        reason, rerank_scores = "not_requested", {}
        if rerank:
            reranker = models.reranker()
            if reranker is None:
                reason = "no_reranker"
            elif len(order) <= top_k:
                reason = "pool_not_larger_than_top_k"
            else:
                settings = config.rerank or RerankConfig()
                pool = order[: max(settings.pool_size, top_k)]
                missing = [cid for cid in pool if cid not in rows]
                if missing:
                    rows.update(await repo.fetch_hits(db, missing, scope))
                pool = [cid for cid in pool if cid in rows]
                passages = [redactor.text(rows[cid]["text"]) or "" for cid in pool]
                reason, judged, used = await _judge(reranker, query, passages, settings)
                tokens += used
                if judged is not None:
                    picked = guard.judged_order(judged)
                    rerank_scores = {pool[i]: judged[i] for i in picked}
                else:
                    picked = guard.deterministic_order(query, passages)
                head = [pool[i] for i in picked]
                judged_ids = set(head)
                order = head + [cid for cid in order if cid not in judged_ids]
        judged_at_all = reason not in ("not_requested", "no_reranker", "pool_not_larger_than_top_k")
        rerank_ms = _ms(started) if judged_at_all else 0

        # the answer
        started = time.perf_counter()
        top = order[:top_k]
        missing = [cid for cid in top if cid not in rows]
        if missing:
            rows.update(await repo.fetch_hits(db, missing, scope))
        top = [cid for cid in top if cid in rows]
        unscored = [cid for cid in top if cid not in similarity]
        if unscored and vectors:
            similarity.update(await _similarity(db, unscored, vectors, scope))
        search_ms += _ms(started)
        found_by = retrieval.found_by()
        matches = [
            KnowledgeMatch(
                source_id=str(rows[cid]["document_id"]),
                source_name=redactor.text(rows[cid]["document_name"]) or "",
                collection_id=rows[cid]["source_id"],
                dossier_name=rows[cid]["source_id"],
                chunk_id=str(cid),
                section=redactor.text(rows[cid]["section"]),
                page=rows[cid]["page"],
                content=shape.clip(redactor.text(rows[cid]["text"]) or ""),
                similarity=round(min(1.0, max(0.0, similarity[cid])), 6) if cid in similarity else None,
                score=round(scores[cid], 6),
                matched_by=found_by.get(cid, []),
                rerank_score=round(judge, 4) if (judge := rerank_scores.get(cid)) is not None else None,
            )
            for cid in top
        ]
        trace = KnowledgeTrace(
            queries=queries,
            vector_backend="pgvector",
            candidate_count=len(fused),
            rerank_applied=reason == "applied",
            timings=KnowledgeTimings(expand_ms=expand_ms, search_ms=search_ms, rerank_ms=rerank_ms),
            tokens_used=tokens,
            rerank_reason=reason,
        )
        return KnowledgeResult(matches=matches, trace=trace)
    finally:
        await models.aclose()


def _widened(
    retriever: Retriever,
    method: str,
    rankings: dict[str, list[tuple[int, float]]],
    fused: list[tuple[int, float]],
    usual: int,
) -> list[tuple[int, float]]:
    """An enumeration's fused candidates: the order of the first ``usual`` per ranking (what the
    question would have fused at the usual depth, so what ``/search`` ranks), then the candidates
    only the wider lists found, in their fused order, scored no higher than the last of the first.
    Fusion normalises each list over its depth, so fusing the wider lists alone reorders the head."""
    head = retriever.fuse(method, {key: pairs[:usual] for key, pairs in rankings.items()})
    if not head:
        return fused
    kept = {cid for cid, _ in head}
    floor = head[-1][1]
    return head + [(cid, min(score, floor)) for cid, score in fused if cid not in kept]


def _best_similarity(per_query: list[list[tuple[int, float]]]) -> dict[int, float]:
    """Each chunk's best cosine similarity over the vector leg's lists (one per query)."""
    best: dict[int, float] = {}
    for pairs in per_query:
        for cid, sim in pairs:
            best[cid] = max(sim, best.get(cid, -1.0))
    return best


async def _similarity(
    db: AsyncEngine, ids: list[int], vectors: list[list[float]], scope: ReadScope
) -> dict[int, float]:
    """Best cosine similarity to any query vector, for passages only the full-text channel found."""
    params: dict[str, Any] = {"ids": ids}
    terms = []
    for i, vector in enumerate(vectors):
        params[f"qv{i}"] = vector_literal(vector)
        terms.append(f"1 - (c.embedding <=> CAST(:qv{i} AS vector))")
    best = terms[0] if len(terms) == 1 else f"GREATEST({', '.join(terms)})"
    query = (
        f"SELECT c.id, {best} FROM ce_chunks c WHERE c.id = ANY(CAST(:ids AS bigint[])) "
        f"AND c.embedding IS NOT NULL AND {scope.predicate('c', params)}"
    )
    async with db.connect() as conn:
        return {int(r[0]): float(r[1]) for r in (await conn.execute(text(query), params)).all()}


async def _judge(
    reranker: Reranker, query: str, passages: list[str], settings: RerankConfig
) -> tuple[str, list[float | None] | None, int]:
    """(reason, the judge's scores when its verdict stands else None, tokens)."""
    try:
        result = await asyncio.wait_for(reranker.rerank(query, passages), timeout=settings.timeout)
    except TimeoutError:
        log.warning("rerank judge timed out after %.1f s; using the deterministic order", settings.timeout)
        return "timeout", None, 0
    except Exception as exc:
        log.warning("rerank judge failed (%s); using the deterministic order", _describe(exc))
        return "error", None, int(getattr(exc, "tokens", 0) or 0)
    use, reason, tau = guard.verdict(
        result.scores, relevance_floor=settings.relevance_floor, min_tau=settings.min_consensus_tau
    )
    if not use:
        log.info("rerank verdict discarded (%s, tau=%.2f); using the deterministic order", reason, tau)
    return reason, (result.scores if use else None), result.tokens


def _describe(exc: BaseException) -> str:
    """Type and stable code only: provider messages stay out of logs (they are redacted, but may be long)."""
    code = exc.code if isinstance(exc, ContextEngineError) else None
    return type(exc).__name__ + (f", code {code}" if code else "")

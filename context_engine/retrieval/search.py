"""``engine.search`` behind the front door: retrieve, fuse, load the winners, redact, report.

Passages (the default) or documents (``group_by="document"``): a document search counts distinct
documents in ``top_k``, scores each by its best passage and returns its best passages with it.
Candidates are taken per leg as for passages; when the fused candidates hold fewer than ``top_k``
documents while some leg came back full (so more may exist), the per-leg depth doubles and the
legs run again, up to ``MAX_DOCUMENT_DEPTH`` candidates per leg.

Round trips are what a search waits on under load, so after the legs there is one statement: for
a document search it groups the fused candidates by document in the server and returns only the
winning documents' passages whole (:func:`repository.group_hits`), for a passage search it reads the
winners' rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from context_engine.models import DocumentHit, Hit, SearchResult
from context_engine.redaction.apply import Redactor
from context_engine.retrieval import budget, registry
from context_engine.retrieval.legs.graph import settle_mode
from context_engine.retrieval.retriever import Retrieval, Retriever
from context_engine.storage import repository as repo
from context_engine.storage.predicates import ReadScope

#: the deepest a document search asks any leg for (candidates per leg)
MAX_DOCUMENT_DEPTH = 20_000


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


async def search(
    retriever: Retriever,
    redactor: Redactor,
    query: str,
    scope: ReadScope,
    *,
    top_k: int,
    group_by: str,
    compress_to_tokens: int | None = None,
    mode: str = "auto",
) -> SearchResult:
    """The fused, redacted answer; inputs were validated by the engine."""
    started = time.perf_counter()
    config = retriever.services.config
    method = config.fusion.method
    db = await retriever.services.reads()  # the server the legs read, so the winners are found
    rows: dict[int, dict[str, Any]]
    fusing = loading = 0.0  # the stages after the legs, summed over a document search's rounds
    if group_by == "document":
        depth = max(config.search.candidates, 2 * top_k)
        while True:
            retrieval = await retriever.retrieve([query], scope, depth, mode)
            results = retrieval.for_query(0)
            t0 = time.perf_counter()
            ranked = retriever.fuse(method, results)
            ids = [cid for cid, _ in ranked]
            t1 = time.perf_counter()
            rows, found = await repo.group_hits(
                db, ids, scope, documents=top_k, per_document=config.search.passages_per_document
            )
            fusing += t1 - t0
            loading += time.perf_counter() - t1
            full = any(len(pairs) >= depth for pairs in results.values())
            if found >= top_k or not full or depth >= MAX_DOCUMENT_DEPTH:
                break
            depth = min(2 * depth, MAX_DOCUMENT_DEPTH)
        scores = dict(ranked)
        fused = [(cid, scores[cid]) for cid in rows]  # best document first, best passage first
    else:
        depth = max(config.search.candidates, top_k)
        retrieval = await retriever.retrieve([query], scope, depth, mode)
        results = retrieval.for_query(0)
        t0 = time.perf_counter()
        ranked = retriever.fuse(method, results)
        fused = ranked[:top_k]
        t1 = time.perf_counter()
        rows = await repo.fetch_hits(db, [cid for cid, _ in fused], scope)
        fusing, loading = t1 - t0, time.perf_counter() - t1
    t0 = time.perf_counter()
    hits = _hits(redactor, retrieval, fused, rows)
    compression: dict[str, Any] | None = None
    if compress_to_tokens is not None:
        hits, compression = budget.compress(hits, compress_to_tokens, retriever.services.embedder.count_tokens)
    documents = _documents(hits) if group_by == "document" else None
    timings = retrieval.timings
    timings["fuse"] = round(fusing * 1000, 2)
    timings["load"] = round(loading * 1000, 2)  # the winners' rows: grouped by document, or fetched
    timings["hits"] = _ms(t0)
    timings["total"] = _ms(started)
    usage: dict[str, Any] = {
        "kind": "search",
        "legs": list(results),
        "leg_hits": {leg: len(pairs) for leg, pairs in results.items()},
        "candidates": len(ranked),
        "fusion": method,
        "timings_ms": timings,
    }
    if group_by == "document":
        usage["group_by"] = {"documents": len(documents or []), "depth": depth}
    if compression is not None:
        usage["compression"] = compression
    usage.update(retrieval.usage)
    settle_mode(usage, mode)
    return SearchResult(hits=hits, usage=usage, documents=documents)


#: A hit validated from a dict by the model's own pydantic-core validator: what ``Hit(**fields)`` runs,
#: without its keyword and wrapper layers (1.5 against 4.1 µs a hit here, pydantic 2.14; a
#: 100-document search builds a few hundred).
_new_hit = Hit.__pydantic_validator__.validate_python
_new_document = DocumentHit.__pydantic_validator__.validate_python


def _hits(
    redactor: Redactor, retrieval: Retrieval, fused: list[tuple[int, float]], rows: dict[int, dict[str, Any]]
) -> list[Hit]:
    """The winners as hits, in fused order, redacted (a no-op policy is checked once, not per field)."""
    similarity = dict(retrieval.for_query(0).get("vector", []))
    found_by = retrieval.found_by()
    redact: Callable[[str], str] = (lambda value: value) if redactor.noop else redactor.text
    return [
        _new_hit(
            {
                "document_id": str(row["document_id"]),
                "document_name": redact(row["document_name"]),
                "chunk_text": redact(row["text"]),
                "score": round(score, 6),
                "source_id": row["source_id"],
                "chunk_idx": row["position"],
                "chunk_id": cid,
                "section": redact(row["section"]),
                "page": row["page"],
                "matched_by": found_by.get(cid, []),
                "similarity": round(similarity[cid], 6) if cid in similarity else None,
            }
        )
        for cid, score in fused
        if (row := rows.get(cid)) is not None
    ]


def _documents(hits: list[Hit]) -> list[DocumentHit]:
    """Hits grouped by document in the order they arrive (best document first, best passage first)."""
    grouped: dict[str, list[Hit]] = {}
    for hit in hits:
        grouped.setdefault(hit.document_id, []).append(hit)
    names = registry.names()
    place = {leg: i for i, leg in enumerate(names)}
    unknown = len(names)
    documents = []
    for passages in grouped.values():
        legs = dict.fromkeys(leg for hit in passages for leg in hit.matched_by)  # first seen first
        first = passages[0]
        documents.append(
            _new_document(
                {
                    "document_id": first.document_id,
                    "document_name": first.document_name,
                    "source_id": first.source_id,
                    "score": first.score,
                    "matched_by": sorted(legs, key=lambda leg: place.get(leg, unknown)),
                    "passages": passages,
                }
            )
        )
    return documents

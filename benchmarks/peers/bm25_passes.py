"""The full-text leg's ways to its top rows, side by side on one store: the direct pass over the
postings (migration 0020, the default), the direct pass over every candidate's ``tsvector`` (the
default before it), and the gated pass (per-lexeme bounds, a floor, the GIN index walking only the
term sets that can reach it; direct pass off), which is what a block-max or WAND pass refines.

For each query, ``bm25.rank`` alone (the leg's statement(s), no fusion) as a trusted caller at the
depth a ``search(top_k=100, group_by="document")`` asks of the leg, the three passes in a rotating
order: wall time of the call (its statements and round trips), chunks read, and whether the answer
is the ``tsvector`` pass's (the same scores in the same order, to 1e-9).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from typing import Any

from context_engine import ContextEngine
from context_engine.retrieval import bm25, lexical
from context_engine.storage.predicates import ReadScope

#: label -> ``bm25.rank`` keyword arguments
PASSES: dict[str, dict[str, Any]] = {
    "direct over the postings (0020, default)": {},
    "direct over each candidate's tsvector (before 0020)": {"postings": False},
    "gated by the kept bounds (no direct pass)": {"direct_factor": 0.0},
}


async def one(
    engine: ContextEngine, query: str, limit: int, options: dict[str, Any]
) -> tuple[list[tuple[int, float]], dict[str, Any], float]:
    config = engine.services.config.search
    params: dict[str, Any] = {"lx_cfg": engine.services.text_search_config, "limit": limit}
    tsquery = lexical.tsquery_sql(query, match=config.lexical_match, params=params, stopwords=config.lexical_stopwords)
    if tsquery is None:
        return [], {"candidates": 0, "scored": 0, "pass": "none"}, 0.0
    scope = ReadScope(None)
    report: dict[str, Any] = {}
    db = await engine.services.reads()
    started = time.perf_counter()
    async with db.connect() as conn:
        rows = await bm25.rank(
            conn,
            tsquery=tsquery,
            terms=lexical.terms_sql(params),
            chunk_predicate=scope.predicate("c", params),
            stats_scope={"principals": None, "source_ids": None},
            params=params,
            k1=config.bm25.k1,
            b=config.bm25.b,
            limit=limit,
            report=report,
            **options,
        )
    return rows, report, (time.perf_counter() - started) * 1000


def _same(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> bool:
    """The same scores in the same order (ties may swap ids, so scores are compared, then the ids
    at every score but the last)."""
    if len(a) != len(b) or not all(math.isclose(x[1], y[1], rel_tol=1e-9) for x, y in zip(a, b, strict=True)):
        return False
    cut = round(b[-1][1], 9) if b else None
    ids = {(cid, round(s, 9)) for cid, s in a if round(s, 9) != cut}
    return ids == {(cid, round(s, 9)) for cid, s in b if round(s, 9) != cut}


async def compare(engine: ContextEngine, queries: Sequence[str], limit: int = 200) -> list[str]:
    """Markdown rows: per pass, chunks read (candidates) and ms; answers against the tsvector pass."""
    labels = list(PASSES)
    seen: dict[str, dict[str, list[float]]] = {label: {} for label in labels}
    same = {label: 0 for label in labels}
    taken: dict[str, dict[str, int]] = {label: {} for label in labels}
    for label in labels:  # warm each once
        await one(engine, queries[0], limit, PASSES[label])
    for n, query in enumerate(queries):
        order = labels[n % len(labels) :] + labels[: n % len(labels)]
        answers = {}
        for label in order:
            rows, report, ms = await one(engine, query, limit, PASSES[label])
            answers[label] = rows
            taken[label][report["pass"]] = taken[label].get(report["pass"], 0) + 1
            for key, value in (("candidates", report["candidates"]), ("ms", ms)):
                seen[label].setdefault(key, []).append(float(value))
        for label in labels:
            same[label] += _same(answers[label], answers[labels[1]])
    lines = [
        f"BM25 passes, full-text ranking alone (limit {limit}, trusted), {len(queries)} queries, rotating order",
        "",
        "| pass | passes taken | chunks read p50 | mean | ms p50 | ms p95 | same answer as the tsvector pass |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for label in labels:
        got = seen[label]
        ms = sorted(got["ms"])
        p95 = ms[int(0.95 * (len(ms) - 1))]
        passes = ", ".join(f"{k} {v}" for k, v in sorted(taken[label].items()))
        lines.append(
            f"| {label} | {passes} | {statistics.median(got['candidates']):.0f} | "
            f"{statistics.fmean(got['candidates']):.0f} | {statistics.median(ms):.1f} | {p95:.1f} | "
            f"{same[label]} of {len(queries)} |"
        )
    return lines

"""The BM25 bounds the write path keeps (migration 0019) against the loose bound ``idf * (k1 + 1)``.

The full-text leg's ranking alone (``bm25.rank``, the default ``pruned`` strategy, direct pass off so
every query takes the bounded or gated pass) for each query, as a trusted caller, once with the kept
per-lexeme bounds and once with the loose bound, alternating: chunks read through the gate or
bounded, chunks scored, time, and whether the two answers are the same (they must be).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import bm25_passes  # the script's own folder is on the path, as for run.py

from context_engine import ContextEngine


async def _one(engine: ContextEngine, query: str, limit: int, kept: bool) -> tuple[list[int], dict[str, Any], float]:
    rows, report, ms = await bm25_passes.one(engine, query, limit, {"direct_factor": 0.0, "kept_bounds": kept})
    return [cid for cid, _ in rows], report, ms


async def compare(engine: ContextEngine, queries: Sequence[str], limit: int = 50) -> list[str]:
    """Markdown rows: median candidates, scored and ms for each bound, and the answers compared."""
    seen: dict[bool, dict[str, list[float]]] = {True: {}, False: {}}
    same = 0
    for n, query in enumerate(queries):
        answers = {}
        for kept in (True, False) if n % 2 == 0 else (False, True):
            ids, report, ms = await _one(engine, query, limit, kept)
            answers[kept] = ids
            for key, value in (("candidates", report["candidates"]), ("scored", report["scored"]), ("ms", ms)):
                seen[kept].setdefault(key, []).append(float(value))
        same += answers[True] == answers[False]
    lines = [
        f"BM25 bounds, full-text ranking alone (limit {limit}, trusted, no direct pass), {len(queries)} queries; "
        f"same top {limit} ids in the same order: {same} of {len(queries)}",
        "",
        "| bound | candidates p50 | mean | scored p50 | ms p50 | ms p95 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for kept, label in ((True, "kept per lexeme and group (0019)"), (False, "idf x (k1 + 1)")):
        got = seen[kept]
        ms = sorted(got["ms"])
        p95 = ms[int(0.95 * (len(ms) - 1))]
        lines.append(
            f"| {label} | {statistics.median(got['candidates']):.0f} | {statistics.fmean(got['candidates']):.0f} | "
            f"{statistics.median(got['scored']):.0f} | {statistics.median(ms):.1f} | {p95:.1f} |"
        )
    return lines

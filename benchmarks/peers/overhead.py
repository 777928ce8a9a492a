"""Where one search's time goes, stage by stage: the engine's own timers, and every statement it sent.

The server is restarted with ``pg_stat_statements`` loaded (only for this part, after the timed
comparisons, so its bookkeeping never slows the other figures), its counters are reset, and the
searches run one at a time. Per search, it prints the median of each timer the engine reports
(``usage["timings_ms"]``: the legs run side by side, so they overlap), the wall time, and per
statement the server saw: how many a search sent (every statement is at least one message; a
psycopg pipeline sends several in one round trip) and its execution time in the server. What the
wall time holds beyond the statements on its critical path is Python, the driver and the wake-ups
of both processes.
"""

from __future__ import annotations

import asyncio
import re
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import text

from context_engine import ContextEngine
from context_engine.storage import embedded

_SPACE = re.compile(r"\s+")


async def with_statement_stats(
    engine: ContextEngine, pgdata: Path, reopen: Callable[[], ContextEngine]
) -> ContextEngine:
    """``engine`` closed and reopened (``reopen()``) on a server restarted with ``pg_stat_statements``."""
    db = await engine.services.db()
    async with db.connect() as conn:
        auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await auto.execute(text("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'"))
    await engine.aclose()
    await asyncio.to_thread(embedded.stop_server, pgdata)  # if closing did not stop it already
    reopened = reopen()
    db = await reopened.services.db()
    async with db.connect() as conn:
        auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await auto.execute(text("CREATE EXTENSION IF NOT EXISTS pg_stat_statements"))
    return reopened


async def _reset(engine: ContextEngine) -> None:
    db = await engine.services.db()
    async with db.connect() as conn:
        auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await auto.execute(text("SELECT pg_stat_statements_reset()"))


async def _statements(engine: ContextEngine) -> list[tuple[str, int, float]]:
    """``(statement, calls, total execution ms)`` in this database since the reset, costliest first."""
    db = await engine.services.db()
    async with db.connect() as conn:
        auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
        rows = await auto.execute(
            text(
                "SELECT query, calls, total_exec_time FROM pg_stat_statements "
                "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                "AND query NOT LIKE '%pg_stat_statements%' ORDER BY total_exec_time DESC"
            )
        )
        return [(str(r[0]), int(r[1]), float(r[2])) for r in rows]


def _label(statement: str, width: int = 90) -> str:
    flat = _SPACE.sub(" ", statement).strip()
    return (flat[: width - 1] + "…" if len(flat) > width else flat).replace("|", "\\|")


async def breakdown(
    engine: ContextEngine,
    name: str,
    search: Callable[[str], Awaitable[Any]],
    queries: Sequence[str],
    *,
    timers: bool,
) -> list[str]:
    """Markdown: the medians of the engine's timers (when ``timers``), the wall time, and the statements."""
    await _reset(engine)
    walls: list[float] = []
    stages: dict[str, list[float]] = {}
    for query in queries:
        started = time.perf_counter()
        found = await search(query)
        walls.append((time.perf_counter() - started) * 1000)
        if timers:
            for stage, ms in (found.usage.get("timings_ms") or {}).items():
                stages.setdefault(stage, []).append(float(ms))
    statements = await _statements(engine)
    n = len(queries)
    lines = [f"**{name}**, {n} searches one at a time: wall p50 {statistics.median(walls):.1f} ms"]
    if stages:
        medians = ", ".join(f"{stage} {statistics.median(v):.1f}" for stage, v in stages.items())
        lines.append(f"timers (median ms; the legs overlap): {medians}")
    sent = sum(calls for _, calls, _ in statements) / n
    server = sum(total for _, _, total in statements) / n
    lines += [
        f"statements per search {sent:.1f}, their server execution time {server:.2f} ms per search",
        "",
        "| statement | per search | server ms per search | ms per call |",
        "|---|---:|---:|---:|",
    ]
    for statement, calls, total in statements:
        lines.append(f"| `{_label(statement)}` | {calls / n:.2f} | {total / n:.2f} | {total / max(calls, 1):.3f} |")
    return lines

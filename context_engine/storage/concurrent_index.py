"""Index builds that never stop writes: ``CREATE INDEX CONCURRENTLY`` outside any transaction.

A concurrent build takes only a SHARE UPDATE EXCLUSIVE lock, so inserts, updates and deletes on
the table carry on while it runs; in exchange it waits for transactions already open when it
started, and a build that is interrupted (a cancelled statement, a killed process) leaves an
INVALID index behind that ``IF NOT EXISTS`` would silently keep. So every build here first looks
the index up: present and valid is left alone and not announced, present and invalid is dropped
(concurrently) and built again, absent is built. One line per build goes to ``announce``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from context_engine.errors import ContextEngineError

#: statements that may not run inside a transaction block
_CONCURRENT = re.compile(r"^\s*(?:CREATE\s+(?:UNIQUE\s+)?INDEX|DROP\s+INDEX|REINDEX\s+\w+)\s+CONCURRENTLY\b", re.I)
_CREATE = re.compile(
    r"^\s*CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)\s+ON\s+(?:ONLY\s+)?(\w+)", re.I
)

Announce = Callable[[str], None]


class IndexBuildFailed(ContextEngineError):
    """A concurrent index build failed; the message names the index and what was left behind."""

    code = "index_build_failed"
    status = 500


@dataclass(frozen=True)
class IndexBuild:
    """One ``CREATE INDEX CONCURRENTLY`` statement and the index and table it names."""

    statement: str
    index: str
    table: str


def is_concurrent(statement: str) -> bool:
    """True for a statement Postgres refuses inside a transaction block (``... CONCURRENTLY``)."""
    return _CONCURRENT.match(statement) is not None


def parse_build(statement: str) -> IndexBuild | None:
    """The build a ``CREATE INDEX CONCURRENTLY`` statement describes, or None for any other."""
    found = _CREATE.match(statement)
    if found is None:
        return None
    return IndexBuild(statement=statement, index=found.group(1), table=found.group(2))


async def index_validity(conn: AsyncConnection, index: str) -> bool | None:
    """``indisvalid`` of the index of that name on the search path; None when there is none."""
    return await conn.scalar(
        text(
            "SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(:name) "
            "AND (SELECT relkind FROM pg_class WHERE oid = i.indexrelid) = 'i'"
        ),
        {"name": index},
    )


async def build(conn: AsyncConnection, step: IndexBuild, announce: Announce) -> bool:
    """Build the index unless a valid one exists; True when a build ran.

    ``conn`` must be in autocommit mode (no transaction open), as Postgres requires.
    """
    valid = await index_validity(conn, step.index)
    if valid:
        return False
    if valid is False:
        announce(
            f"rebuilding index {step.index} on {step.table}: an interrupted build left it invalid "
            "(CREATE INDEX CONCURRENTLY; writes continue)"
        )
        await conn.exec_driver_sql(f"DROP INDEX CONCURRENTLY IF EXISTS {step.index}")
    else:
        announce(
            f"building index {step.index} on {step.table} (CREATE INDEX CONCURRENTLY; writes continue, "
            "progress in pg_stat_progress_create_index)"
        )
    try:
        await conn.exec_driver_sql(step.statement)
    except DBAPIError as exc:
        raise IndexBuildFailed(
            f"building index {step.index} on {step.table} failed ({server_reason(exc)}); {await _clean_up(conn, step)}",
            details={"index": step.index, "table": step.table},
        ) from exc
    return True


async def _clean_up(conn: AsyncConnection, step: IndexBuild) -> str:
    """Drop the invalid copy a failed build leaves, and say whether that worked."""
    try:
        if await index_validity(conn, step.index) is False:
            await conn.exec_driver_sql(f"DROP INDEX CONCURRENTLY IF EXISTS {step.index}")
        return "its partial copy was dropped; run migrate again to build it"
    except DBAPIError:
        return "its partial copy could not be dropped now; the next migrate drops and rebuilds it"


def server_reason(exc: DBAPIError) -> str:
    """The server's one-line reason (never the DETAIL line, which can quote row values)."""
    diag = getattr(exc.orig, "diag", None)
    primary = getattr(diag, "message_primary", None)
    state = getattr(exc.orig, "sqlstate", None)
    reason = primary or type(exc.orig).__name__
    return f"{reason} [SQLSTATE {state}]" if state else reason

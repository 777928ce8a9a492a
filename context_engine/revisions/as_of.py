"""Checking an ``as_of`` revision before any read uses it.

Why here and not in the SQL: a revision above the current one would read as the current store and
pin nothing, and one before the kept history would answer from a store that lost rows, so both are
refused with a precise error before a leg runs.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.errors import InvalidRequest
from context_engine.revisions.errors import RevisionExpired

#: the ``ce_meta`` key holding the oldest revision whose reads are still complete
HORIZON_KEY = "revision_horizon"


async def bounds(db: AsyncEngine) -> tuple[int, int]:
    """``(current revision, oldest readable revision)``."""
    async with db.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT (SELECT revision FROM ce_store_revision WHERE id = 1), "
                    "(SELECT value FROM ce_meta WHERE key = :k)"
                ),
                {"k": HORIZON_KEY},
            )
        ).one()
    return int(row[0] or 0), int(row[1] or 0)


def check_type(as_of: Any) -> int | None:
    """The revision as an int, or a precise refusal of a string, float, bool or negative number."""
    if as_of is None:
        return None
    if isinstance(as_of, bool) or not isinstance(as_of, int):
        raise InvalidRequest(f"as_of must be a non-negative integer revision, not {type(as_of).__name__}")
    if as_of < 0:
        raise InvalidRequest(f"as_of must be a non-negative integer revision; got {as_of}")
    return as_of


async def resolve(db: AsyncEngine, as_of: Any) -> int | None:
    """The revision a trusted read runs at: ``None`` for the current one (also when ``as_of`` names
    it, so a read pinned to the revision it just recorded keeps the indexed fast path), else
    ``as_of``. A non-trusted caller's revisions are resolved by
    :func:`context_engine.revisions.view.resolve`, which tells it no store-wide number.
    """
    revision = check_type(as_of)
    if revision is None:
        return None
    current, horizon = await bounds(db)
    if revision > current:
        raise InvalidRequest(f"as_of {revision} is beyond the current revision {current}")
    if revision < horizon:
        raise RevisionExpired(
            f"as_of {revision} is before the kept history: revisions before {horizon} were vacuumed "
            f"(the oldest readable revision is {horizon})",
            details={"as_of": revision, "oldest": horizon},
        )
    return None if revision == current else revision

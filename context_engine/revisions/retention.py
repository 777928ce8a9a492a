"""Retention: history that no kept revision can see is removed, so it does not grow without bound."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.errors import InvalidRequest
from context_engine.revisions.as_of import HORIZON_KEY, check_type


async def vacuum(db: AsyncEngine, keep_after: Any) -> dict[str, int]:
    """Remove the versions and chunks closed at or before ``keep_after`` (invisible at every revision
    from ``keep_after`` on) and make ``keep_after`` the oldest readable revision.

    Current rows are never touched, so neither are the search statistics (which count current rows).
    The horizon only moves forward: a smaller ``keep_after`` than an earlier run's removes nothing.
    """
    keep = check_type(keep_after)
    if keep is None:
        raise InvalidRequest("keep_after must be a non-negative integer revision")
    async with db.begin() as conn:
        current = int(await conn.scalar(text("SELECT revision FROM ce_store_revision WHERE id = 1 FOR SHARE")) or 0)
        if keep > current:
            raise InvalidRequest(f"keep_after {keep} is beyond the current revision {current}")
        horizon = int(
            await conn.scalar(
                text(
                    "INSERT INTO ce_meta (key, value) VALUES (:k, CAST(:r AS text)) ON CONFLICT (key) DO UPDATE "
                    "SET value = CAST(greatest(CAST(ce_meta.value AS bigint), CAST(:r AS bigint)) AS text) "
                    "RETURNING value"
                ),
                {"k": HORIZON_KEY, "r": keep},
            )
        )
        values = {"h": horizon}
        chunks = (
            await conn.execute(text("DELETE FROM ce_chunks WHERE valid_to IS NOT NULL AND valid_to <= :h"), values)
        ).rowcount
        versions = (
            await conn.execute(
                text("DELETE FROM ce_document_versions WHERE valid_to IS NOT NULL AND valid_to <= :h"), values
            )
        ).rowcount
    return {"horizon": horizon, "chunks_removed": int(chunks or 0), "versions_removed": int(versions or 0)}

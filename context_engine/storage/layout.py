"""Which schema a database holds: the single-node one, or the distributed one of a Citus coordinator.

Nearly every statement is the same on both. The few that are not (a row lock over documents on
several shards, which Citus refuses) ask :func:`distributed` and take the form the layout accepts.
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncConnection

#: per pool: whether its database's schema is distributed (the Citus overlay of migrations/citus/ applied)
_known: WeakKeyDictionary[Engine, bool] = WeakKeyDictionary()


async def distributed(conn: AsyncConnection) -> bool:
    """True when the Citus overlay is applied in this connection's database (asked once per pool)."""
    engine = conn.sync_engine
    found = _known.get(engine)
    if found is None:
        found = bool(
            await conn.scalar(
                text(
                    "SELECT to_regclass('ce_schema_migrations') IS NOT NULL AND EXISTS "
                    "(SELECT 1 FROM ce_schema_migrations WHERE starts_with(id, 'citus/'))"
                )
            )
        )
        _known[engine] = found
    return found


async def lock_documents(conn: AsyncConnection, document_ids: list[str]) -> None:
    """Row-lock these documents until the transaction ends, one shard-routed statement each (in id
    order, the order every multi-row lock takes), for a distributed schema, where one statement may
    only lock rows of one shard."""
    for document_id in sorted(set(document_ids)):
        await conn.execute(
            text("SELECT 1 FROM ce_documents WHERE id = CAST(:d AS uuid) FOR UPDATE"), {"d": document_id}
        )

"""The names the graph knows, held in process so that a query naming none costs no SQL at all.

The graph leg asks :func:`known` which of a query's word runs are entity keys. The list is read
once per database pool and then again when it is older than ``TTL_SECONDS`` or a graph write in
this process dropped it (:func:`forget`), so a write from another process is seen within that
time. It is every entity's key, whoever may see it: it only decides whether the leg asks the
database, and the database answers under the caller's ACL.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.graph.normalize import query_keys
from context_engine.graph.schema import graph_enabled

TTL_SECONDS = 30.0


@dataclass
class NameIndex:
    """``enabled``: the graph tables exist; ``names``: entity key -> stored names with that key."""

    enabled: bool
    names: dict[str, set[str]] = field(default_factory=dict)
    loaded_at: float = field(default_factory=time.monotonic)

    def match(self, query: str) -> list[str]:
        """The stored names the query spells (as key), sorted; pure Python."""
        if not self.names:
            return []
        found: set[str] = set()
        for key in query_keys(query):
            found |= self.names.get(key, set())
        return sorted(found)


_INDEXES: weakref.WeakKeyDictionary[AsyncEngine, NameIndex] = weakref.WeakKeyDictionary()


async def known(db: AsyncEngine) -> NameIndex:
    """This pool's name index, read from the database when missing or stale."""
    index = _INDEXES.get(db)
    if index is None or time.monotonic() - index.loaded_at > TTL_SECONDS:
        index = _INDEXES[db] = await _load(db)
    return index


def forget(db: AsyncEngine) -> None:
    """Drop the pool's index after a graph write, so the next query reads the new names."""
    _INDEXES.pop(db, None)


async def _load(db: AsyncEngine) -> NameIndex:
    async with db.connect() as conn:
        if not await graph_enabled(conn):
            return NameIndex(enabled=False)
        rows = (await conn.execute(text("SELECT name_key, name FROM ce_graph_entities"))).all()
    names: dict[str, set[str]] = {}
    for key, name in rows:
        names.setdefault(key, set()).add(name)
    return NameIndex(enabled=True, names=names)

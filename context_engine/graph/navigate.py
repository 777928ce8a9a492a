"""The four navigation functions: ``get_neighbors``, ``traverse``, ``find_related``, ``community_summary``.

Each takes the pool and the caller's ``ReadScope`` and returns plain data (for the knowledge tool,
the engine's methods, or a host). Every answer is read through the chunk predicate: an entity
exists for a caller only through a current chunk they may see that mentions it, a relationship
only through the chunk it was read from, a community only while every chunk its summary was built
from is visible. An entity the caller cannot see answers exactly like an unknown one.

Entities are named by ``id`` beside ``name``: the id is random, carries no text and is not
redacted, so navigation can go on from an answer whose names an output policy masked.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from context_engine.errors import InvalidRequest
from context_engine.graph.entities import CATEGORIES
from context_engine.graph.errors import EntityNotFound, GraphNotEnabled
from context_engine.graph.normalize import name_key, normalise_name, normalise_type
from context_engine.graph.schema import graph_enabled
from context_engine.storage.predicates import ReadScope

MAX_DEPTH = 3
MAX_LIMIT = 500


def _visible(alias: str, scope: ReadScope, params: dict[str, Any]) -> str:
    return f"{alias}.valid_to IS NULL AND {scope.predicate(alias, params)}"


async def _ready(conn: AsyncConnection) -> None:
    if not await graph_enabled(conn):
        raise GraphNotEnabled()


def _check_limit(limit: Any) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be an integer between 1 and {MAX_LIMIT}")
    return limit


def _check_category(category: Any) -> str | None:
    if category is None:
        return None
    if not isinstance(category, str) or category.upper() not in CATEGORIES:
        raise InvalidRequest(f"category must be one of {', '.join(CATEGORIES)}", code="invalid_category")
    return category.upper()


async def resolve(conn: AsyncConnection, scope: ReadScope, entity: Any) -> dict[str, Any]:
    """The visible entity named by ``entity`` (an id, or a name in any spelling of its key)."""
    if not isinstance(entity, str) or not entity.strip():
        raise InvalidRequest("entity must be a non-empty string (a name or an entity id)")
    params: dict[str, Any] = {}
    try:
        params["eid"] = str(uuid.UUID(entity.strip()))
        match = "e.id = CAST(:eid AS uuid)"
    except ValueError:
        params["name"], params["key"] = normalise_name(entity), name_key(entity)
        match = "(e.name = :name OR e.name_key = :key)"
    order = "(e.name = :name) DESC, " if "name" in params else ""
    row = (
        await conn.execute(
            text(
                "SELECT e.id, e.name, mode() WITHIN GROUP (ORDER BY m.entity_type), count(DISTINCT m.chunk_id) "
                "FROM ce_graph_entities e JOIN ce_graph_mentions m ON m.entity_id = e.id "
                f"JOIN ce_chunks c ON c.id = m.chunk_id WHERE {match} AND {_visible('c', scope, params)} "
                f"GROUP BY e.id, e.name ORDER BY {order}count(DISTINCT m.chunk_id) DESC, e.id LIMIT 1"
            ),
            params,
        )
    ).first()
    if row is None:
        raise EntityNotFound(f"entity {entity.strip()[:200]!r} not found")
    return {"id": str(row[0]), "name": row[1], "type": row[2], "mentions": int(row[3])}


async def entity_info(conn: AsyncConnection, scope: ReadScope, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Name and visible type of each id the caller may see (others are left out)."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    params: dict[str, Any] = {"ids": wanted}
    rows = await conn.execute(
        text(
            "SELECT e.id, e.name, mode() WITHIN GROUP (ORDER BY m.entity_type) FROM ce_graph_entities e "
            "JOIN ce_graph_mentions m ON m.entity_id = e.id JOIN ce_chunks c ON c.id = m.chunk_id "
            f"WHERE e.id = ANY(CAST(:ids AS uuid[])) AND {_visible('c', scope, params)} GROUP BY e.id, e.name"
        ),
        params,
    )
    return {str(r[0]): {"id": str(r[0]), "name": r[1], "type": r[2]} for r in rows}


async def _edges(
    conn: AsyncConnection, scope: ReadScope, ids: list[str], category: str | None
) -> list[tuple[str, str, str, str, str]]:
    """Visible relationships touching ``ids`` as ``(source, target, category, label, evidence)``, once each."""
    params: dict[str, Any] = {"ids": ids}
    narrowed = ""
    if category is not None:
        params["cat"] = category
        narrowed = " AND r.category = :cat"
    rows = await conn.execute(
        text(
            "SELECT r.source_entity, r.target_entity, r.category, r.label, min(r.evidence) "
            "FROM ce_graph_relationships r JOIN ce_chunks c ON c.id = r.chunk_id "
            "WHERE (r.source_entity = ANY(CAST(:ids AS uuid[])) OR r.target_entity = ANY(CAST(:ids AS uuid[])))"
            f"{narrowed} AND {_visible('c', scope, params)} "
            "GROUP BY r.source_entity, r.target_entity, r.category, r.label ORDER BY r.category, r.label, 1, 2"
        ),
        params,
    )
    return [(str(r[0]), str(r[1]), r[2], r[3], r[4]) for r in rows]


async def get_neighbors(
    db: AsyncEngine, scope: ReadScope, entity: str, *, category: str | None = None, limit: int = 50
) -> dict[str, Any]:
    """What is one step from ``entity``, and which way each link points (``outgoing``: entity -> neighbour)."""
    limit, category = _check_limit(limit), _check_category(category)
    async with db.connect() as conn:
        await _ready(conn)
        start = await resolve(conn, scope, entity)
        edges = await _edges(conn, scope, [start["id"]], category)
        others = [target if source == start["id"] else source for source, target, *_ in edges]
        info = await entity_info(conn, scope, others)
    neighbors = []
    for source, target, kind, label, evidence in edges:
        outgoing = source == start["id"]
        other = info.get(target if outgoing else source)
        if other is None:
            continue
        neighbors.append(
            {
                **other,
                "category": kind,
                "label": label,
                "evidence": evidence,
                "direction": "outgoing" if outgoing else "incoming",
            }
        )
    return {"entity": _entity(start), "neighbors": neighbors[:limit], "count": len(neighbors)}


async def traverse(
    db: AsyncEngine,
    scope: ReadScope,
    entity: str,
    *,
    depth: int = 2,
    category: str | None = None,
    limit: int = 100,
) -> dict[str, Any]:
    """Everything within ``depth`` steps of ``entity`` (breadth first; each entity once, at its fewest hops)."""
    if not isinstance(depth, int) or isinstance(depth, bool) or not 1 <= depth <= MAX_DEPTH:
        raise InvalidRequest(f"depth must be an integer between 1 and {MAX_DEPTH}")
    limit, category = _check_limit(limit), _check_category(category)
    paths: list[dict[str, Any]] = []
    async with db.connect() as conn:
        await _ready(conn)
        start = await resolve(conn, scope, entity)
        seen = {start["id"]}
        frontier = [start["id"]]
        for hop in range(1, depth + 1):
            if not frontier or len(paths) >= limit:
                break
            current = set(frontier)
            reached: dict[str, tuple[str, str, str, str, str]] = {}
            for edge in await _edges(conn, scope, frontier, category):
                source, target = edge[0], edge[1]
                for here, there in ((source, target), (target, source)):
                    if here in current and there not in seen and there not in reached:
                        reached[there] = (here, *edge[2:], "outgoing" if here == source else "incoming")
            info = await entity_info(conn, scope, list(reached) + list(current))
            frontier = []
            for there, (via, kind, label, evidence, direction) in reached.items():
                if there not in info or len(paths) >= limit:
                    continue
                seen.add(there)
                frontier.append(there)
                reached_entity = info[there]
                paths.append(
                    {
                        "target_id": there,
                        "target": reached_entity["name"],
                        "target_type": reached_entity["type"],
                        "via_id": via,
                        "via": info[via]["name"] if via in info else None,
                        "category": kind,
                        "label": label,
                        "evidence": evidence,
                        "direction": direction,
                        "hops": hop,
                    }
                )
    return {"entity": _entity(start), "paths": paths, "count": len(paths)}


async def find_related(
    db: AsyncEngine,
    scope: ReadScope,
    *,
    category: str | None = None,
    entity_type: str | None = None,
    limit: int = 50,
) -> dict[str, Any]:
    """Relationships of a kind across the corpus, with no starting entity: the way in when names are masked."""
    limit, category = _check_limit(limit), _check_category(category)
    params: dict[str, Any] = {"limit": limit}
    where = [_visible("c", scope, params)]
    if category is not None:
        params["cat"] = category
        where.append("r.category = :cat")
    if entity_type is not None:
        if not isinstance(entity_type, str) or not entity_type.strip():
            raise InvalidRequest("entity_type must be a non-empty string")
        params["etype"] = normalise_type(entity_type)
        where.append(
            "EXISTS (SELECT 1 FROM ce_graph_mentions tm JOIN ce_chunks tc ON tc.id = tm.chunk_id "
            "WHERE tm.entity_id IN (r.source_entity, r.target_entity) AND tm.entity_type = :etype "
            f"AND {_visible('tc', scope, params)})"
        )
    async with db.connect() as conn:
        await _ready(conn)
        rows = (
            await conn.execute(
                text(
                    "SELECT r.source_entity, r.target_entity, r.category, r.label, min(r.evidence), count(*) OVER () "
                    "FROM ce_graph_relationships r JOIN ce_chunks c ON c.id = r.chunk_id "
                    f"WHERE {' AND '.join(where)} GROUP BY r.source_entity, r.target_entity, r.category, r.label "
                    "ORDER BY r.category, r.label, 1, 2 LIMIT :limit"
                ),
                params,
            )
        ).all()
        info = await entity_info(conn, scope, [str(r[0]) for r in rows] + [str(r[1]) for r in rows])
    relationships = []
    for source, target, kind, label, evidence, _ in rows:
        a, b = info.get(str(source)), info.get(str(target))
        if a is None or b is None:
            continue
        relationships.append(
            {
                "source_id": a["id"],
                "source": a["name"],
                "source_type": a["type"],
                "target_id": b["id"],
                "target": b["name"],
                "target_type": b["type"],
                "category": kind,
                "label": label,
                "evidence": evidence,
            }
        )
    total = int(rows[0][5]) if rows else 0
    return {"relationships": relationships, "count": total}


async def community_summary(
    db: AsyncEngine, scope: ReadScope, query: str | None = None, *, limit: int = 10
) -> dict[str, Any]:
    """The summarised communities the caller may see whole, ranked against ``query`` (largest first without one)."""
    limit = _check_limit(limit)
    if query is not None and (not isinstance(query, str) or not query.strip()):
        raise InvalidRequest("query must be a non-empty string when given")
    params: dict[str, Any] = {"limit": limit, "q": (query or "").strip()[:1000]}
    relevance = "word_similarity(:q, g.summary)" if query else "0.0"
    async with db.connect() as conn:
        await _ready(conn)
        rows = (
            await conn.execute(
                text(
                    f"SELECT g.id, g.summary, g.entity_count, g.relationship_count, g.level, {relevance} AS relevance "
                    "FROM ce_graph_communities g WHERE g.summary IS NOT NULL AND NOT EXISTS ("
                    "SELECT 1 FROM ce_graph_community_chunks b LEFT JOIN ce_chunks c ON c.id = b.chunk_id "
                    f"WHERE b.community_id = g.id AND (c.id IS NULL OR NOT ({_visible('c', scope, params)}))) "
                    "ORDER BY relevance DESC, g.entity_count DESC, g.id LIMIT :limit"
                ),
                params,
            )
        ).all()
        members: dict[str, list[str]] = {}
        if rows:
            for cid, eid in await conn.execute(
                text(
                    "SELECT community_id, entity_id FROM ce_graph_community_entities "
                    "WHERE community_id = ANY(CAST(:ids AS uuid[])) ORDER BY community_id, entity_id"
                ),
                {"ids": [str(r[0]) for r in rows]},
            ):
                members.setdefault(str(cid), []).append(str(eid))
        info = await entity_info(conn, scope, [e for ids in members.values() for e in ids])
    communities = [
        {
            "id": str(r[0]),
            "summary": r[1],
            "entity_count": r[2],
            "relationship_count": r[3],
            "hierarchy_level": r[4],
            "relevance": round(float(r[5]), 4),
            "entities": [info[e] for e in members.get(str(r[0]), []) if e in info],
        }
        for r in rows
    ]
    return {"communities": communities, "count": len(communities)}


def _entity(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": row["id"], "name": row["name"], "type": row["type"]}


ACTIONS: dict[str, Callable[..., Awaitable[dict[str, Any]]]] = {
    "get_neighbors": get_neighbors,
    "traverse": traverse,
    "find_related": find_related,
    "community_summary": community_summary,
}


async def run_action(db: AsyncEngine, scope: ReadScope, action: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One action by name, its arguments checked against its signature (a wrong one is a 400, not a crash)."""
    function = ACTIONS.get(action)
    if function is None:
        raise InvalidRequest(f"action must be one of {', '.join(ACTIONS)}")
    try:
        inspect.signature(function).bind(db, scope, **arguments)
    except TypeError as exc:  # a missing argument, or one the action does not take
        raise InvalidRequest(f"{action}: {exc}") from None
    return await function(db, scope, **arguments)

"""The graph's Postgres mirror: writing a document's facts and removing what no current chunk states.

Every write runs in one transaction under one advisory lock for the whole graph. Why a global
lock: entity rows are shared between documents, and an entity deleted as an orphan by one writer
while another attaches a new mention to it would lose that mention; graph writes are ingest-time
and short, so serialising them costs little. Frequency is the number of distinct CURRENT chunks
that mention an entity, recomputed for every entity a write touched; an entity no chunk mentions
any more is deleted, and its relationships and community memberships go with it (cascade).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from context_engine.graph.entities import ChunkFacts, ChunkText
from context_engine.graph.errors import GraphNotEnabled
from context_engine.graph.normalize import name_key
from context_engine.graph.schema import graph_enabled

_GRAPH_LOCK = 0x43455F47  # "CE_G"

#: a (source_id, acl) group of chunks: communities are detected and summarised per group
Group = tuple[str, tuple[str, ...]]


@dataclass
class WriteResult:
    entities: int = 0
    mentions: int = 0
    relationships: int = 0
    removed_entities: int = 0
    #: the groups whose facts changed, so their communities must be rebuilt
    groups: set[Group] = field(default_factory=set)


async def require_graph(db: AsyncEngine) -> None:
    async with db.connect() as conn:
        if not await graph_enabled(conn):
            raise GraphNotEnabled()


async def lock(conn: AsyncConnection) -> None:
    """The graph write lock, held until the caller's transaction ends."""
    await conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _GRAPH_LOCK})


async def document_chunks(db: AsyncEngine, document_id: str) -> tuple[str | None, list[ChunkText]]:
    """The document's mime (None when it does not exist) and its current chunks in order."""
    async with db.connect() as conn:
        mime = await conn.scalar(text("SELECT mime FROM ce_documents WHERE id = CAST(:d AS uuid)"), {"d": document_id})
        rows = (
            await conn.execute(
                text(
                    "SELECT id, text FROM ce_chunks WHERE document_id = CAST(:d AS uuid) AND valid_to IS NULL "
                    "ORDER BY position"
                ),
                {"d": document_id},
            )
        ).all()
    return mime, [ChunkText(int(r[0]), r[1]) for r in rows]


async def _groups(conn: AsyncConnection, where: str, params: Mapping[str, object]) -> set[Group]:
    statement = text(f"SELECT DISTINCT c.source_id, c.acl FROM ce_chunks c WHERE {where}")
    rows = (await conn.execute(statement, params)).all()
    return {(r[0], tuple(r[1])) for r in rows}


async def write_document(db: AsyncEngine, document_id: str, facts: Sequence[ChunkFacts]) -> WriteResult:
    """Replace every fact of the document with ``facts`` (read from its current chunks), in one transaction."""
    result = WriteResult()
    params: dict[str, object] = {"d": document_id}
    names = sorted({name for chunk in facts for name in chunk.entities})
    async with db.begin() as conn:
        await lock(conn)
        old = (
            (
                await conn.execute(
                    text("SELECT DISTINCT entity_id FROM ce_graph_mentions WHERE document_id = CAST(:d AS uuid)"),
                    params,
                )
            )
            .scalars()
            .all()
        )
        result.groups |= await _groups(
            conn,
            "c.id IN (SELECT chunk_id FROM ce_graph_mentions WHERE document_id = CAST(:d AS uuid))",
            params,
        )
        await conn.execute(text("DELETE FROM ce_graph_mentions WHERE document_id = CAST(:d AS uuid)"), params)
        await conn.execute(text("DELETE FROM ce_graph_relationships WHERE document_id = CAST(:d AS uuid)"), params)
        ids = await _upsert_entities(conn, names)
        mention_rows = [
            (str(ids[name]), chunk.chunk_id, kind) for chunk in facts for name, kind in chunk.entities.items()
        ]
        if mention_rows:
            await conn.execute(
                text(
                    "INSERT INTO ce_graph_mentions (entity_id, chunk_id, document_id, entity_type) "
                    "SELECT e, c, CAST(:d AS uuid), t FROM unnest(CAST(:e AS uuid[]), CAST(:c AS bigint[]), "
                    "CAST(:t AS text[])) AS m(e, c, t) ON CONFLICT DO NOTHING"
                ),
                {
                    "d": document_id,
                    "e": [r[0] for r in mention_rows],
                    "c": [r[1] for r in mention_rows],
                    "t": [r[2] for r in mention_rows],
                },
            )
        relations = [(chunk.chunk_id, rel) for chunk in facts for rel in chunk.relations]
        if relations:
            await conn.execute(
                text(
                    "INSERT INTO ce_graph_relationships (id, source_entity, target_entity, category, label, evidence, "
                    "chunk_id, document_id) SELECT i, s, t, k, l, ev, c, CAST(:d AS uuid) FROM unnest("
                    "CAST(:i AS uuid[]), CAST(:s AS uuid[]), CAST(:t AS uuid[]), CAST(:k AS text[]), "
                    "CAST(:l AS text[]), CAST(:ev AS text[]), CAST(:c AS bigint[])) AS r(i, s, t, k, l, ev, c)"
                ),
                {
                    "d": document_id,
                    "i": [str(uuid.uuid4()) for _ in relations],
                    "s": [str(ids[rel.source]) for _, rel in relations],
                    "t": [str(ids[rel.target]) for _, rel in relations],
                    "k": [rel.category for _, rel in relations],
                    "l": [rel.label for _, rel in relations],
                    "ev": [rel.evidence for _, rel in relations],
                    "c": [chunk_id for chunk_id, _ in relations],
                },
            )
        touched = sorted({str(e) for e in old} | {str(i) for i in ids.values()})
        result.removed_entities = await refresh(conn, touched)
        result.groups |= await _groups(conn, "c.document_id = CAST(:d AS uuid) AND c.valid_to IS NULL", params)
    result.entities, result.mentions, result.relationships = len(names), len(mention_rows), len(relations)
    return result


async def _upsert_entities(conn: AsyncConnection, names: list[str]) -> dict[str, uuid.UUID]:
    """Each name's entity id, minting a random id for a name seen for the first time."""
    if not names:
        return {}
    await conn.execute(
        text(
            "INSERT INTO ce_graph_entities (id, name, name_key) SELECT gen_random_uuid(), n, k "
            "FROM unnest(CAST(:n AS text[]), CAST(:k AS text[])) AS t(n, k) ON CONFLICT (name) DO NOTHING"
        ),
        {"n": names, "k": [name_key(n) for n in names]},
    )
    rows = await conn.execute(
        text("SELECT name, id FROM ce_graph_entities WHERE name = ANY(CAST(:n AS text[]))"), {"n": names}
    )
    return {r[0]: r[1] for r in rows}


async def refresh(conn: AsyncConnection, entity_ids: Sequence[str]) -> int:
    """Recount frequency over current chunks for these entities and delete those nothing mentions; the count deleted."""
    if not entity_ids:
        return 0
    params = {"ids": list(entity_ids)}
    await conn.execute(
        text(
            "UPDATE ce_graph_entities e SET frequency = (SELECT count(DISTINCT m.chunk_id) FROM ce_graph_mentions m "
            "JOIN ce_chunks c ON c.id = m.chunk_id WHERE m.entity_id = e.id AND c.valid_to IS NULL) "
            "WHERE e.id = ANY(CAST(:ids AS uuid[]))"
        ),
        params,
    )
    deleted = await conn.execute(
        text(
            "DELETE FROM ce_graph_entities e WHERE e.id = ANY(CAST(:ids AS uuid[])) "
            "AND NOT EXISTS (SELECT 1 FROM ce_graph_mentions m WHERE m.entity_id = e.id)"
        ),
        params,
    )
    return deleted.rowcount or 0


async def remove_stale(db: AsyncEngine, document_id: str) -> WriteResult:
    """Drop the document's facts whose chunk is no longer current (a delete, or the old version of a replace)."""
    result = WriteResult()
    params = {"d": document_id}
    stale = (
        "SELECT m.chunk_id FROM ce_graph_mentions m LEFT JOIN ce_chunks c ON c.id = m.chunk_id "
        "WHERE m.document_id = CAST(:d AS uuid) AND (c.id IS NULL OR c.valid_to IS NOT NULL) "
        "UNION SELECT r.chunk_id FROM ce_graph_relationships r LEFT JOIN ce_chunks c ON c.id = r.chunk_id "
        "WHERE r.document_id = CAST(:d AS uuid) AND (c.id IS NULL OR c.valid_to IS NOT NULL)"
    )
    async with db.begin() as conn:
        await lock(conn)
        chunk_ids = (await conn.execute(text(stale), params)).scalars().all()
        if not chunk_ids:
            return result
        ids = {"c": list(chunk_ids)}
        result.groups = await _groups(conn, "c.id = ANY(CAST(:c AS bigint[]))", ids)
        touched = (
            (
                await conn.execute(
                    text("SELECT DISTINCT entity_id FROM ce_graph_mentions WHERE chunk_id = ANY(CAST(:c AS bigint[]))"),
                    ids,
                )
            )
            .scalars()
            .all()
        )
        gone = await conn.execute(text("DELETE FROM ce_graph_mentions WHERE chunk_id = ANY(CAST(:c AS bigint[]))"), ids)
        rels = await conn.execute(
            text("DELETE FROM ce_graph_relationships WHERE chunk_id = ANY(CAST(:c AS bigint[]))"), ids
        )
        result.mentions, result.relationships = gone.rowcount or 0, rels.rowcount or 0
        result.removed_entities = await refresh(conn, [str(e) for e in touched])
    return result

"""Every SQL read and write of documents and chunks (search legs live in retrieval.legs)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from context_engine.errors import DocumentBusy, NameTaken
from context_engine.storage import bm25_stats, driver_reads, layout
from context_engine.storage.custom_plans import planned_per_call
from context_engine.storage.predicates import ReadScope, live, visibility
from context_engine.storage.session_locks import LOCK_ID_SQL
from context_engine.storage.vectors import register_vector_types, vector_array
from context_engine.write_access import WriteAccess, target_of

_DOC_COLUMNS = (
    "id, name, source_id, mime, acl, attributes, status, failure_reason, error, version, "
    "updated_revision, chunk_count, meta, created_at, updated_at"
)


@dataclass(slots=True)
class ChunkRow:
    position: int
    text: str
    text_hash: str
    section: str | None
    page: int | None
    kind: str
    meta: dict[str, Any]


async def next_revision(conn: AsyncConnection) -> int:
    """Advance the store's one counter (row-locked until this transaction ends)."""
    return int(
        await conn.scalar(text("UPDATE ce_store_revision SET revision = revision + 1 WHERE id = 1 RETURNING revision"))
    )


async def current_revision(db: AsyncEngine) -> int:
    async with db.connect() as conn:
        return int(await conn.scalar(text("SELECT revision FROM ce_store_revision WHERE id = 1")) or 0)


async def find_by_identity(
    conn: AsyncConnection, source_id: str, name: str, *, for_update: bool = False
) -> dict[str, Any] | None:
    """The document filed under this identity (who may write it is its session lock, not this row).

    ``for_update`` row-locks it until the caller's transaction ends (a writer re-reading it).
    """
    sql = "SELECT id, content_hash, status, version FROM ce_documents WHERE source_id = :s AND name = :n"
    params = {"s": source_id, "n": name}
    if for_update and await layout.distributed(conn):  # rows on several shards: locked one by one
        await layout.lock_documents(conn, [str(r[0]) for r in await conn.execute(text(sql), params)])
        for_update = False
    row = (await conn.execute(text(sql + (" FOR UPDATE" if for_update else "")), params)).mappings().first()
    return dict(row) if row else None


def identity_key(source_id: str, name: str) -> str:
    """The key a document identity's locks are taken on (session locks of its run, and the
    transaction locks of a bulk load, hashed alike)."""
    return f"{len(source_id)}:{source_id}/{name}"


#: a lease's end, from the start of the statement that takes or renews it: statement_timestamp() is stable
#: within the statement, which a distributed (Citus) UPDATE requires of every function it evaluates
_LEASE_UNTIL = "statement_timestamp() + make_interval(secs => CAST(:t AS double precision))"


async def find_identities(
    conn: AsyncConnection, identities: Sequence[tuple[str, str]], *, for_update: bool = False
) -> dict[tuple[str, str], dict[str, Any]]:
    """:func:`find_by_identity` for many ``(source_id, name)`` pairs in one statement."""
    if not identities:
        return {}
    sql = (
        "SELECT d.id, d.source_id, d.name, d.content_hash, d.status, d.version FROM ce_documents d "
        "JOIN unnest(CAST(:s AS text[]), CAST(:n AS text[])) AS x(s, n) ON d.source_id = x.s AND d.name = x.n "
        "ORDER BY d.id"
    )
    params = {"s": [i[0] for i in identities], "n": [i[1] for i in identities]}
    if for_update and await layout.distributed(conn):  # rows on several shards: locked one by one
        await layout.lock_documents(conn, [str(r[0]) for r in await conn.execute(text(sql), params)])
        for_update = False
    rows = await conn.execute(text(sql + (" FOR UPDATE OF d" if for_update else "")), params)
    return {(r["source_id"], r["name"]): dict(r) for r in rows.mappings()}


async def visible_documents(conn: AsyncConnection, document_ids: Sequence[str], scope: ReadScope) -> set[str]:
    """Which of these documents the caller may see now (all of them for a trusted caller)."""
    if not document_ids:
        return set()
    if scope.principals is None and scope.source_ids is None:
        return set(document_ids)
    params: dict[str, Any] = {"ids": list(document_ids)}
    rows = await conn.execute(
        text(
            "SELECT CAST(d.id AS text) FROM ce_documents d WHERE d.id = ANY(CAST(:ids AS uuid[])) "
            f"AND {_doc_scope(scope, params)}"
        ),
        params,
    )
    return {str(r[0]) for r in rows}


async def renew_leases(conn: AsyncConnection, document_ids: Sequence[str], holder: str, seconds: float) -> set[str]:
    """Extend the run's lease on each document; answers those still the run's (the others were taken over)."""
    rows = await conn.execute(
        text(
            f"UPDATE ce_documents SET lease_until = {_LEASE_UNTIL} WHERE id = ANY(CAST(:ids AS uuid[])) "
            "AND lease_holder = CAST(:h AS uuid) RETURNING CAST(id AS text)"
        ),
        {"ids": list(document_ids), "h": holder, "t": seconds},
    )
    return {str(r[0]) for r in rows}


async def set_progress_many(conn: AsyncConnection, progress: dict[str, dict[str, int]]) -> None:
    """:func:`set_embedding_progress` for many documents in one statement."""
    if not progress:
        return
    await conn.execute(
        text(
            "UPDATE ce_documents d SET meta = jsonb_set(d.meta, '{embedding_progress}', CAST(x.p AS jsonb)), "
            "updated_at = now() FROM unnest(CAST(:ids AS uuid[]), CAST(:ps AS text[])) AS x(id, p) WHERE d.id = x.id"
        ),
        {"ids": list(progress), "ps": [json.dumps(p) for p in progress.values()]},
    )


async def finish_many(conn: AsyncConnection, progress: dict[str, dict[str, int]], holder: str) -> set[str]:
    """The last vectors are stored: each document is complete, any earlier failure is cleared and the
    run's lease let go, in one statement. Answers those it finished (the others are no longer the run's)."""
    if not progress:
        return set()
    rows = await conn.execute(
        text(
            "UPDATE ce_documents d SET status = 'completed', failure_reason = NULL, error = NULL, "
            "lease_holder = NULL, lease_until = NULL, "
            "meta = jsonb_set(d.meta, '{embedding_progress}', CAST(x.p AS jsonb)), updated_at = now() "
            "FROM unnest(CAST(:ids AS uuid[]), CAST(:ps AS text[])) AS x(id, p) "
            "WHERE d.id = x.id AND d.lease_holder = CAST(:h AS uuid) RETURNING CAST(d.id AS text)"
        ),
        {"ids": list(progress), "ps": [json.dumps(p) for p in progress.values()], "h": holder},
    )
    return {str(r[0]) for r in rows}


async def fail_many(
    conn: AsyncConnection, progress: dict[str, dict[str, int]], *, holder: str, failure_reason: str, error: str
) -> None:
    """:func:`mark_embedding_failed` for many documents in one statement."""
    if not progress:
        return
    await conn.execute(
        text(
            "UPDATE ce_documents d SET failure_reason = :fr, error = :e, lease_holder = NULL, lease_until = NULL, "
            "meta = jsonb_set(d.meta, '{embedding_progress}', CAST(x.p AS jsonb)), updated_at = now() "
            "FROM unnest(CAST(:ids AS uuid[]), CAST(:ps AS text[])) AS x(id, p) "
            "WHERE d.id = x.id AND d.lease_holder = CAST(:h AS uuid)"
        ),
        {
            "ids": list(progress),
            "ps": [json.dumps(p) for p in progress.values()],
            "h": holder,
            "fr": failure_reason,
            "e": error,
        },
    )


async def claim_document(conn: AsyncConnection, document_id: str, holder: str, seconds: float) -> int | None:
    """Make ``holder`` the run of a document left in ``embedding`` (the caller owns its identity's
    session lock, so any earlier holder is dead or lost); returns its current version, or None when
    it is finished meanwhile."""
    found = await conn.scalar(
        text(
            f"UPDATE ce_documents SET lease_holder = CAST(:h AS uuid), lease_until = {_LEASE_UNTIL} "
            "WHERE id = CAST(:d AS uuid) AND status = 'embedding' RETURNING version"
        ),
        {"d": document_id, "h": holder, "t": seconds},
    )
    return int(found) if found is not None else None


async def let_go(conn: AsyncConnection, document_id: str, holder: str) -> None:
    """A run that stops early clears its token; the document stays as it is (resumable)."""
    await conn.execute(
        text(
            "UPDATE ce_documents SET lease_holder = NULL, lease_until = NULL "
            "WHERE id = CAST(:d AS uuid) AND lease_holder = CAST(:h AS uuid)"
        ),
        {"d": document_id, "h": holder},
    )


async def embedding_progress(conn: AsyncConnection, document_id: str) -> dict[str, Any]:
    """The document's recorded ``meta.embedding_progress`` (empty when there is none)."""
    found = await conn.scalar(
        text("SELECT meta -> 'embedding_progress' FROM ce_documents WHERE id = CAST(:d AS uuid)"),
        {"d": document_id},
    )
    return dict(found) if isinstance(found, dict) else {}


async def count_pending(conn: AsyncConnection, document_id: str) -> int:
    """Current chunks of the document still missing a vector."""
    return int(
        await conn.scalar(
            text(
                "SELECT count(*) FROM ce_chunks WHERE document_id = CAST(:d AS uuid) AND valid_to IS NULL "
                "AND embedding IS NULL"
            ),
            {"d": document_id},
        )
    )


async def pending_page(
    conn: AsyncConnection, document_id: str, *, after: int, limit: int, with_text: bool
) -> list[tuple[int, int, str | None]]:
    """``(id, position, text)`` of up to ``limit`` current chunks still missing a vector, past
    position ``after``, in document order (``text`` is None unless asked for: a first pass holds
    the texts already, and reading them back would keep a second copy in memory)."""
    column = "text" if with_text else "NULL"
    rows = await conn.execute(
        text(
            f"SELECT id, position, {column} FROM ce_chunks WHERE document_id = CAST(:d AS uuid) "
            "AND valid_to IS NULL AND embedding IS NULL AND position > :after ORDER BY position LIMIT :n"
        ),
        {"d": document_id, "after": after, "n": limit},
    )
    return [(int(r[0]), int(r[1]), r[2]) for r in rows]


async def store_vectors(
    conn: AsyncConnection, ids: Sequence[int], vectors: Sequence[Sequence[float]], embedding_key: str
) -> None:
    """One UPDATE for the whole batch, so the statement-level vector-count triggers run once per
    batch rather than once per chunk; the vectors travel in pgvector's binary form."""
    await register_vector_types(conn)
    await conn.execute(
        text(
            "UPDATE ce_chunks c SET embedding = v.e, embedding_key = :k "
            "FROM unnest(CAST(:ids AS bigint[]), CAST(:vs AS vector[])) AS v(id, e) WHERE c.id = v.id"
        ),
        {"ids": list(ids), "vs": vector_array(vectors), "k": embedding_key},
    )


async def set_embedding_progress(conn: AsyncConnection, document_id: str, progress: dict[str, int]) -> None:
    await conn.execute(
        text(
            "UPDATE ce_documents SET meta = jsonb_set(meta, '{embedding_progress}', CAST(:p AS jsonb)), "
            "updated_at = now() WHERE id = CAST(:d AS uuid)"
        ),
        {"p": json.dumps(progress), "d": document_id},
    )


async def mark_embedding_failed(
    conn: AsyncConnection,
    document_id: str,
    *,
    holder: str,
    failure_reason: str,
    error: str,
    progress: dict[str, int],
) -> None:
    """The run stops with vectors missing: record why and let go of its lease, so a resume may
    start at once (only while the document is still this run's)."""
    await conn.execute(
        text(
            "UPDATE ce_documents SET failure_reason = :fr, error = :e, lease_holder = NULL, lease_until = NULL, "
            "meta = jsonb_set(meta, '{embedding_progress}', CAST(:p AS jsonb)), updated_at = now() "
            "WHERE id = CAST(:d AS uuid) AND lease_holder = CAST(:h AS uuid)"
        ),
        {"fr": failure_reason, "e": error, "p": json.dumps(progress), "d": document_id, "h": holder},
    )


async def resumable_documents(conn: AsyncConnection, document_id: str | None) -> list[dict[str, Any]]:
    sql = "SELECT id, source_id, name, version FROM ce_documents WHERE status = 'embedding'"
    params: dict[str, Any] = {}
    if document_id is not None:
        sql += " AND id = CAST(:d AS uuid)"
        params["d"] = document_id
    return [dict(r) for r in (await conn.execute(text(sql + " ORDER BY updated_at"), params)).mappings()]


async def current_chunk_count(conn: AsyncConnection, document_id: str) -> int:
    return int(
        await conn.scalar(
            text("SELECT count(*) FROM ce_chunks WHERE document_id = CAST(:d AS uuid) AND valid_to IS NULL"),
            {"d": document_id},
        )
        or 0
    )


#: chunk rows per INSERT statement (and per slice a large document is extracted in)
INSERT_SLICE = 500


@dataclass(slots=True)
class VersionHead:
    """What a new version of one document is, apart from its chunks."""

    existing_id: str | None
    source_id: str
    name: str
    mime: str
    acl: Sequence[str]
    attributes: dict[str, Any]
    content_hash: str
    meta: dict[str, Any]
    chunk_count: int


@dataclass(slots=True)
class OpenedVersion:
    document_id: str
    version: int
    revision: int
    #: True when an earlier version existed (its chunks and statistics are replaced)
    replaces: bool


@dataclass(slots=True)
class StoredChunk:
    id: int
    document_id: str
    position: int
    #: no vector yet: the text was not in the previous version (nothing to copy)
    pending: bool


_OPEN_VERSIONS = text(
    "WITH r AS (UPDATE ce_store_revision SET revision = revision + :n WHERE id = 1 RETURNING revision - :n AS base), "
    "u AS (SELECT x.*, r.base + x.ord AS rev FROM unnest(CAST(:ids AS uuid[]), CAST(:new AS boolean[]), "
    "CAST(:s AS text[]), CAST(:nm AS text[]), CAST(:m AS text[]), CAST(:acl AS text[]), CAST(:attr AS text[]), "
    "CAST(:h AS text[]), CAST(:meta AS text[]), CAST(:cc AS integer[])) "
    "WITH ORDINALITY AS x(id, new, s, nm, m, acl, attr, h, meta, cc, ord) CROSS JOIN r), "
    "ins AS (INSERT INTO ce_documents AS d (id, source_id, name, mime, text, acl, attributes, status, content_hash, "
    "meta, version, chunk_count, created_revision, updated_revision, lease_holder, lease_until) "
    "SELECT u.id, u.s, u.nm, u.m, '', ARRAY(SELECT jsonb_array_elements_text(CAST(u.acl AS jsonb))), "
    "CAST(u.attr AS jsonb), 'embedding', u.h, CAST(u.meta AS jsonb), 1, u.cc, u.rev, u.rev, CAST(:lh AS uuid), "
    f"{_LEASE_UNTIL} FROM u WHERE u.new ORDER BY u.ord "
    "RETURNING d.id, d.version, d.source_id, d.name, d.content_hash, d.updated_revision, d.acl, d.attributes, "
    "d.mime, d.meta, d.chunk_count, false AS replaces), "
    "upd AS (UPDATE ce_documents d SET mime = u.m, text = '', "
    "acl = ARRAY(SELECT jsonb_array_elements_text(CAST(u.acl AS jsonb))), attributes = CAST(u.attr AS jsonb), "
    "status = 'embedding', failure_reason = NULL, error = NULL, content_hash = u.h, meta = CAST(u.meta AS jsonb), "
    "version = d.version + 1, chunk_count = u.cc, updated_revision = u.rev, updated_at = now(), "
    f"lease_holder = CAST(:lh AS uuid), lease_until = {_LEASE_UNTIL} FROM u WHERE NOT u.new AND d.id = u.id "
    "RETURNING d.id, d.version, d.source_id, d.name, d.content_hash, d.updated_revision, d.acl, d.attributes, "
    "d.mime, d.meta, d.chunk_count, true AS replaces), "
    "heads AS (SELECT * FROM ins UNION ALL SELECT * FROM upd), "
    "closed AS (UPDATE ce_document_versions v SET valid_to = h.updated_revision FROM heads h "
    "WHERE v.document_id = h.id AND v.valid_to IS NULL), "
    "opened AS (INSERT INTO ce_document_versions (document_id, version, source_id, name, content_hash, valid_from, "
    "acl, attributes, mime, meta, chunk_count) SELECT h.id, h.version, h.source_id, h.name, h.content_hash, "
    "h.updated_revision, h.acl, h.attributes, h.mime, h.meta, h.chunk_count FROM heads h) "
    "SELECT CAST(h.id AS text), h.version, h.updated_revision, h.replaces FROM heads h"
)


async def open_versions(
    conn: AsyncConnection, heads: Sequence[VersionHead], *, lease_holder: str, lease_seconds: float
) -> list[OpenedVersion]:
    """Open a new version of each document in one statement, in the caller's transaction: the document
    row (new or updated, in status ``embedding`` and leased to ``lease_holder``), the closing of its
    previous version row and its new version row. Each document gets its own revision, in input order.

    Answers in input order. The chunks follow with :func:`insert_chunks` and :func:`close_versions`.
    """
    ids = [h.existing_id or str(uuid.uuid4()) for h in heads]
    rows = await conn.execute(
        _OPEN_VERSIONS,
        {
            "n": len(heads),
            "ids": ids,
            "new": [h.existing_id is None for h in heads],
            "s": [h.source_id for h in heads],
            "nm": [h.name for h in heads],
            "m": [h.mime for h in heads],
            "acl": [json.dumps(list(h.acl)) for h in heads],
            "attr": [json.dumps(h.attributes) for h in heads],
            "h": [h.content_hash for h in heads],
            "meta": [json.dumps(h.meta) for h in heads],
            "cc": [h.chunk_count for h in heads],
            "lh": lease_holder,
            "t": lease_seconds,
        },
    )
    opened = {str(r[0]): OpenedVersion(str(r[0]), int(r[1]), int(r[2]), bool(r[3])) for r in rows}
    return [opened[i] for i in ids]


_INSERT_CHUNKS = (
    "INSERT INTO ce_chunks (document_id, version, position, source_id, acl, text, text_hash, section, page, kind, "
    "tsv, embedding, embedding_key, meta, valid_from) "
    "SELECT d.id, d.version, u.pos, d.source_id, d.acl, u.ct, u.th, u.sec, u.pg, u.kind, "
    "to_tsvector(CAST(:cfg AS regconfig), unaccent(concat_ws(' ', u.sec, u.ct))), "
    # a later version copies the stored vector of a chunk whose text it already had (version 1 has none)
    "CASE WHEN d.version > 1 THEN (SELECT o.embedding FROM ce_chunks o WHERE o.document_id = d.id "
    "AND o.valid_to IS NULL AND o.text_hash = u.th AND o.embedding_key = :ek AND o.embedding IS NOT NULL LIMIT 1) "
    "END, :ek, CAST(u.cmeta AS jsonb), d.updated_revision "
    "FROM unnest(CAST(:docs AS uuid[]), CAST(:pos AS integer[]), CAST(:ct AS text[]), CAST(:th AS text[]), "
    "CAST(:sec AS text[]), CAST(:pg AS integer[]), CAST(:kind AS text[]), CAST(:cmeta AS text[])) "
    "WITH ORDINALITY AS u(doc, pos, ct, th, sec, pg, kind, cmeta, ord) "
    "JOIN ce_documents d ON d.id = u.doc ORDER BY u.ord"
)


async def insert_chunks(
    conn: AsyncConnection,
    rows: Sequence[tuple[str, ChunkRow]],
    *,
    embedding_key: str,
    text_search_config: str,
    returning: bool = True,
) -> list[StoredChunk]:
    """Insert ``(document_id, row)`` pairs of versions :func:`open_versions` opened, as one statement
    (each row takes the version, source, ACL and revision of its document row). A row whose text the
    previous version had gets that vector copied inside the database; the others are pending.

    Answers ``StoredChunk`` for every row when ``returning`` (in no particular order).
    """
    if not rows:
        return []
    sql = _INSERT_CHUNKS + (
        " RETURNING id, CAST(document_id AS text), position, embedding IS NULL" if returning else ""
    )
    result = await conn.execute(
        text(sql),
        {
            "cfg": text_search_config,
            "ek": embedding_key,
            "docs": [d for d, _ in rows],
            "pos": [c.position for _, c in rows],
            "ct": [c.text for _, c in rows],
            "th": [c.text_hash for _, c in rows],
            "sec": [c.section for _, c in rows],
            "pg": [c.page for _, c in rows],
            "kind": [c.kind for _, c in rows],
            "cmeta": [json.dumps(c.meta) for _, c in rows],
        },
    )
    if not returning:
        return []
    return [StoredChunk(int(r[0]), str(r[1]), int(r[2]), bool(r[3])) for r in result]


async def close_versions(
    conn: AsyncConnection, opened: Sequence[OpenedVersion], *, max_text_chars: int | None = None
) -> dict[str, int]:
    """After every chunk of the opened versions is inserted: assemble each document's text from its
    chunk rows (cut at ``max_text_chars``, recorded as ``meta.text_truncated``; the chunks keep every
    word), record its pending count as ``meta.embedding_progress``, move the BM25 statistics to the
    new chunks and close the previous version's chunks. Answers the pending count per document."""
    ids = [o.document_id for o in opened]
    versions = [o.version for o in opened]
    result = await conn.execute(
        text(
            "UPDATE ce_documents d SET text = CASE WHEN CAST(:cap AS integer) IS NULL THEN t.txt "
            "ELSE left(t.txt, CAST(:cap AS integer)) END, meta = jsonb_set(CASE WHEN length(t.txt) > "
            "CAST(:cap AS integer) THEN d.meta || CAST('{\"text_truncated\": true}' AS jsonb) ELSE d.meta END, "
            # the progress is built in the subquery: a distributed (Citus) UPDATE evaluates no stable
            # function of a column itself. The document's own counts: chunks whose vector was copied
            # from the last version are done
            "'{embedding_progress}', t.progress) FROM (SELECT "
            "c.document_id, coalesce(string_agg(c.text, E'\\n\\n' ORDER BY c.position), '') AS txt, "
            "count(*) FILTER (WHERE c.embedding IS NULL) AS pending, jsonb_build_object('done', "
            "count(*) FILTER (WHERE c.embedding IS NOT NULL), 'total', count(*), 'tokens', 0) AS progress "
            "FROM ce_chunks c "
            "JOIN unnest(CAST(:ids AS uuid[]), CAST(:vs AS integer[])) AS x(id, v) "
            "ON c.document_id = x.id AND c.version = x.v GROUP BY 1) t "
            "WHERE d.id = t.document_id RETURNING CAST(d.id AS text), t.pending"
        ),
        {"ids": ids, "vs": versions, "cap": max_text_chars},
    )
    pending = {str(r[0]): int(r[1]) for r in result}
    await bm25_stats.replace_versions(conn, ids, versions, replacing=any(o.replaces for o in opened))
    # close the previous versions' chunks only now: the copies above read from them
    replaced = [o for o in opened if o.replaces]
    if replaced:
        await conn.execute(
            text(
                "UPDATE ce_chunks c SET valid_to = x.r FROM unnest(CAST(:ids AS uuid[]), CAST(:vs AS integer[]), "
                "CAST(:rs AS bigint[])) AS x(id, v, r) WHERE c.document_id = x.id AND c.valid_to IS NULL "
                "AND c.version < x.v"
            ),
            {
                "ids": [o.document_id for o in replaced],
                "vs": [o.version for o in replaced],
                "rs": [o.revision for o in replaced],
            },
        )
    return {i: pending.get(i, 0) for i in ids}


async def write_document(
    conn: AsyncConnection,
    head: VersionHead,
    chunks: AsyncIterable[Sequence[ChunkRow]],
    *,
    embedding_key: str,
    text_search_config: str,
    lease_holder: str,
    lease_seconds: float,
    max_text_chars: int | None = None,
) -> tuple[OpenedVersion, int]:
    """Write a new version of one document whose chunks arrive in slices (of ``INSERT_SLICE`` rows, as
    the caller makes them, so a document of 40,000 chunks never holds every row at once), in the
    caller's transaction, in status ``embedding`` and leased to ``lease_holder``.

    Returns the opened version and how many of its chunks still need a vector.
    """
    (opened,) = await open_versions(conn, [head], lease_holder=lease_holder, lease_seconds=lease_seconds)
    async for piece in chunks:
        await insert_chunks(
            conn,
            [(opened.document_id, c) for c in piece],
            embedding_key=embedding_key,
            text_search_config=text_search_config,
            returning=False,
        )
    pending = await close_versions(conn, [opened], max_text_chars=max_text_chars)
    return opened, pending[opened.document_id]


async def write_failed(
    conn: AsyncConnection,
    *,
    existing_id: str | None,
    source_id: str,
    name: str,
    mime: str,
    acl: Sequence[str],
    attributes: dict[str, Any],
    failure_reason: str,
    error: str,
) -> tuple[str, int]:
    """Record a document that could not be processed (its earlier good version, if any, stays)."""
    revision = await next_revision(conn)
    if existing_id is not None:
        await conn.execute(
            text(
                "UPDATE ce_documents SET status = 'failed', failure_reason = :fr, error = :e, "
                "updated_revision = :r, updated_at = now() WHERE id = CAST(:id AS uuid)"
            ),
            {"fr": failure_reason, "e": error, "r": revision, "id": existing_id},
        )
        return existing_id, revision
    doc_id = str(uuid.uuid4())
    await conn.execute(
        text(
            "INSERT INTO ce_documents (id, source_id, name, mime, acl, attributes, status, failure_reason, error, "
            "created_revision, updated_revision) VALUES (CAST(:id AS uuid), :s, :n, :m, CAST(:acl AS text[]), "
            "CAST(:attr AS jsonb), 'failed', :fr, :e, :r, :r)"
        ),
        {
            "id": doc_id,
            "s": source_id,
            "n": name,
            "m": mime,
            "acl": list(acl),
            "attr": json.dumps(attributes),
            "fr": failure_reason,
            "e": error,
            "r": revision,
        },
    )
    return doc_id, revision


def _doc_scope(scope: ReadScope, params: dict[str, Any]) -> str:
    return scope.document_predicate("d", params)


#: a document as one of its versions answers: the version row's own name, ACL and attributes, the live
#: document's status while the version is the current one (a closed version was complete when closed)
_VERSION_COLUMNS = (
    "v.document_id AS id, v.name, v.source_id, v.mime, v.acl, v.attributes, "
    "CASE WHEN d.version = v.version THEN d.status ELSE 'completed' END AS status, "
    "CASE WHEN d.version = v.version THEN d.failure_reason END AS failure_reason, "
    "CASE WHEN d.version = v.version THEN d.error END AS error, "
    "v.version, v.valid_from AS updated_revision, v.chunk_count, v.meta, "
    "(SELECT min(f.created_at) FROM ce_document_versions f WHERE f.document_id = v.document_id) AS created_at, "
    "v.created_at AS updated_at, v.valid_from, v.valid_to"
)
_VERSION_TEXT = (
    ", (SELECT coalesce(string_agg(c.text, E'\\n\\n' ORDER BY c.position), '') FROM ce_chunks c "
    "WHERE c.document_id = v.document_id AND c.version = v.version) AS text"
)
_VERSION_FROM = "FROM ce_document_versions v LEFT JOIN ce_documents d ON d.id = v.document_id"


def _live(column: str) -> str:
    return f"(SELECT d.{column} FROM ce_documents d WHERE d.id = v.document_id)"


#: the same columns for a distributed (Citus) schema, which refuses correlated subqueries beside columns
#: of an outer-joined table: the live document's columns are lookups on the document's key as well
_DISTRIBUTED_VERSION_COLUMNS = (
    _VERSION_COLUMNS.replace("CASE WHEN d.version = v.version", f"CASE WHEN {_live('version')} = v.version")
    .replace("THEN d.status", f"THEN {_live('status')}")
    .replace("THEN d.failure_reason", f"THEN {_live('failure_reason')}")
    .replace("THEN d.error", f"THEN {_live('error')}")
)


def _version_sql(distributed: bool) -> tuple[str, str]:
    """``(columns, FROM clause)`` of a document as one of its versions answers, for the layout."""
    if distributed:
        return _DISTRIBUTED_VERSION_COLUMNS, "FROM ce_document_versions v"
    return _VERSION_COLUMNS, _VERSION_FROM


async def get_document(
    db: AsyncEngine, document_id: str, scope: ReadScope, *, with_text: bool, version: int | None = None
) -> dict[str, Any] | None:
    """The document as the caller may see it: now, as of ``scope.as_of``, or one ``version`` of it.

    A version is answered under the ACL it carried (what a reader of then was allowed), never the
    document's current one.
    """
    params: dict[str, Any] = {"id": document_id}
    if version is None and not scope.historical:
        cols = _DOC_COLUMNS + (", text" if with_text else "")
        sql = f"SELECT {cols} FROM ce_documents d WHERE d.id = CAST(:id AS uuid) AND {_doc_scope(scope, params)}"
    else:
        if version is not None:
            params["ver"] = version
            where = "v.version = :ver AND " + visibility(
                "v", params, principals=scope.principals, source_ids=scope.source_ids
            )
            where += scope.today("v", params, history=True)
        else:
            where = scope.version_predicate("v", params)
        sql = f"WHERE v.document_id = CAST(:id AS uuid) AND {where}"
    async with db.connect() as conn:
        if version is not None or scope.historical:
            cols, source = _version_sql(await layout.distributed(conn))
            sql = f"SELECT {cols}{_VERSION_TEXT if with_text else ''} {source} {sql}"
        row = (await conn.execute(text(sql), params)).mappings().first()
    return dict(row) if row else None


async def document_versions(db: AsyncEngine, document_id: str, scope: ReadScope) -> list[dict[str, Any]]:
    """Every version of a document the caller may see (each under its own ACL), oldest first,
    with the revision range ``[valid_from, valid_to)`` it is visible in."""
    params: dict[str, Any] = {"id": document_id}
    where = visibility("v", params, principals=scope.principals, source_ids=scope.source_ids)
    where += scope.today("v", params, history=True)
    sql = (
        "SELECT v.version, v.name, v.source_id, v.content_hash, v.acl, v.attributes, v.chunk_count, "
        "v.valid_from, v.valid_to, v.created_at FROM ce_document_versions v "
        f"WHERE v.document_id = CAST(:id AS uuid) AND {where} ORDER BY v.version"
    )
    async with db.connect() as conn:
        return [dict(r) for r in (await conn.execute(text(sql), params)).mappings()]


async def document_source(db: AsyncEngine, document_id: str) -> str | None:
    """The source a document is (or was) in, deleted or not: the namespace of its idempotency keys."""
    async with db.connect() as conn:
        found = await conn.scalar(
            text(
                "SELECT source_id FROM ce_documents WHERE id = CAST(:id AS uuid) UNION ALL "
                "(SELECT source_id FROM ce_document_versions WHERE document_id = CAST(:id AS uuid) LIMIT 1) LIMIT 1"
            ),
            {"id": document_id},
        )
    return str(found) if found is not None else None


async def versions_at(db: AsyncEngine, document_ids: Sequence[str], as_of: int | None) -> dict[str, int]:
    """The version of each document visible at ``as_of`` (``None``: the current one)."""
    if not document_ids:
        return {}
    params: dict[str, Any] = {"ids": list(document_ids)}
    sql = (
        "SELECT CAST(v.document_id AS text), v.version FROM ce_document_versions v "
        f"WHERE v.document_id = ANY(CAST(:ids AS uuid[])) AND {live('v', params, as_of)}"
    )
    async with db.connect() as conn:
        return {str(r[0]): int(r[1]) for r in await conn.execute(text(sql), params)}


async def list_documents(
    db: AsyncEngine, scope: ReadScope, *, limit: int, after: tuple[str, str] | None
) -> list[dict[str, Any]]:
    params: dict[str, Any] = {"limit": limit}
    async with db.connect() as conn:
        distributed = await layout.distributed(conn)
    if scope.historical:
        versions = scope.version_predicate("v", params)
        cols, source = _version_sql(distributed)
        sql = f"SELECT * FROM (SELECT {cols} {source} WHERE {versions}) d"
        where = "TRUE"
    else:
        sql = f"SELECT {_DOC_COLUMNS} FROM ce_documents d"
        where = _doc_scope(scope, params)
    if after is not None:
        params["ac"], params["ai"] = after
        where += " AND (d.created_at, d.id) > (CAST(:ac AS timestamptz), CAST(:ai AS uuid))"
    sql += f" WHERE {where} ORDER BY d.created_at, d.id LIMIT :limit"
    async with db.connect() as conn:
        return [dict(r) for r in (await conn.execute(text(sql), params)).mappings()]


async def _lock_writable(
    conn: AsyncConnection, document_id: str, scope: ReadScope, access: WriteAccess
) -> dict[str, Any] | None:
    """Lock the caller's visible document for a change; ``None`` when it is not visible, and
    ``Forbidden`` (from ``access``) when it is visible but not the caller's to write."""
    params: dict[str, Any] = {"id": document_id}
    row = (
        (
            await conn.execute(
                text(
                    "SELECT d.id, d.source_id, d.name, d.version, d.acl FROM ce_documents d "
                    f"WHERE d.id = CAST(:id AS uuid) AND {_doc_scope(scope, params)} FOR UPDATE"
                ),
                params,
            )
        )
        .mappings()
        .first()
    )
    if row is None:
        return None
    found = dict(row)
    access.check(target_of(found), scope.principals)
    return found


async def update_document(
    db: AsyncEngine,
    document_id: str,
    scope: ReadScope,
    *,
    acl: Sequence[str] | None,
    attributes: dict[str, Any] | None,
    name: str | None,
    access: WriteAccess,
) -> int | None:
    """Apply metadata changes under the caller's visibility; ``None`` when not visible.

    A change is history, not a rewrite: the current version and its chunks are closed at the new
    revision and a new version (same text, same vectors, the new ACL, name and attributes) opens, so a
    read as of an earlier revision still applies the ACL of then.
    """
    async with db.begin() as conn:
        current = await _lock_writable(conn, document_id, scope, access)
        if current is None:
            return None
        if (name is not None or acl is not None) and await layout.distributed(conn):
            await _claim_identity(conn, dict(current), name=name, acl=acl)
        revision = await next_revision(conn)
        sets = ["updated_revision = :r", "updated_at = now()"]
        values: dict[str, Any] = {"id": document_id, "r": revision}
        if acl is not None:
            sets.append("acl = CAST(:acl AS text[])")
            values["acl"] = list(acl)
        if attributes is not None:
            sets.append("attributes = CAST(:attr AS jsonb)")
            values["attr"] = json.dumps(attributes)
        if name is not None:
            sets.append("name = :n")
            values["n"] = name
        has_version = await conn.scalar(
            text("SELECT 1 FROM ce_document_versions WHERE document_id = CAST(:id AS uuid) AND valid_to IS NULL"),
            values,
        )
        if not has_version:  # nothing admitted yet (a failed first ingest): no history to keep
            await conn.execute(text(f"UPDATE ce_documents SET {', '.join(sets)} WHERE id = CAST(:id AS uuid)"), values)
            return revision
        await bm25_stats.retract(conn, document_id)
        sets.append("version = version + 1")
        values["v"] = int(
            await conn.scalar(
                text(f"UPDATE ce_documents SET {', '.join(sets)} WHERE id = CAST(:id AS uuid) RETURNING version"),
                values,
            )
        )
        await _open_metadata_version(conn, values)
        await bm25_stats.admit(conn, document_id)
        return revision


async def _claim_identity(
    conn: AsyncConnection, current: dict[str, Any], *, name: str | None, acl: Sequence[str] | None
) -> None:
    """What the unique index on ``(source_id, name, acl)`` answers on one node, for a distributed schema,
    which cannot keep that index (it lacks the distribution key): the identity a rename or an ACL change
    moves the document to is locked as a writer of it locks it (``DocumentBusy`` while one holds it),
    then refused with ``NameTaken`` when another document holds it."""
    new_name = current["name"] if name is None else name
    new_acl = list(current["acl"]) if acl is None else list(acl)
    key = identity_key(current["source_id"], new_name)
    if not await conn.scalar(text(f"SELECT pg_try_advisory_xact_lock({LOCK_ID_SQL})"), {"k": key}):
        raise DocumentBusy()
    taken = await conn.scalar(
        text(
            "SELECT 1 FROM ce_documents WHERE source_id = :s AND name = :n AND acl = CAST(:acl AS text[]) "
            "AND id <> CAST(:id AS uuid) LIMIT 1"
        ),
        {"s": current["source_id"], "n": new_name, "acl": new_acl, "id": str(current["id"])},
    )
    if taken:
        raise NameTaken()


async def _open_metadata_version(conn: AsyncConnection, values: dict[str, Any]) -> None:
    """Version ``:v`` from the document row's new metadata, its chunks copied from the current ones
    (vectors and all, inside the database); then the previous version and chunks close at ``:r``."""
    await conn.execute(
        text(
            "INSERT INTO ce_document_versions (document_id, version, source_id, name, content_hash, valid_from, "
            "acl, attributes, mime, meta, chunk_count) SELECT d.id, :v, d.source_id, d.name, o.content_hash, :r, "
            "d.acl, d.attributes, d.mime, d.meta, d.chunk_count FROM ce_documents d JOIN ce_document_versions o "
            "ON o.document_id = d.id AND o.valid_to IS NULL WHERE d.id = CAST(:id AS uuid)"
        ),
        values,
    )
    await conn.execute(
        text(
            "INSERT INTO ce_chunks (document_id, version, position, source_id, acl, text, text_hash, section, page, "
            "kind, tsv, embedding, embedding_key, meta, valid_from) SELECT c.document_id, :v, c.position, "
            "c.source_id, d.acl, c.text, c.text_hash, c.section, c.page, c.kind, c.tsv, c.embedding, "
            "c.embedding_key, c.meta, :r FROM ce_chunks c JOIN ce_documents d ON d.id = c.document_id "
            "WHERE c.document_id = CAST(:id AS uuid) AND c.valid_to IS NULL ORDER BY c.position"
        ),
        values,
    )
    await _repoint_graph_facts(conn, values)
    for table in ("ce_document_versions", "ce_chunks"):
        await conn.execute(
            text(
                f"UPDATE {table} SET valid_to = :r WHERE document_id = CAST(:id AS uuid) AND valid_to IS NULL "
                "AND version < :v"
            ),
            values,
        )


#: graph tables whose rows name a chunk (graph mode; absent unless ``migrate --graph`` ran)
_GRAPH_CHUNK_TABLES = ("ce_graph_mentions", "ce_graph_relationships", "ce_graph_community_chunks")


async def _repoint_graph_facts(conn: AsyncConnection, values: dict[str, Any]) -> None:
    """The graph keeps describing the document after a metadata version: its facts move from the
    closing chunks to their copies (same position), so they stay visible under the new ACL."""
    if not await conn.scalar(text("SELECT to_regclass('ce_graph_mentions') IS NOT NULL")):
        return
    pairs = (
        "SELECT o.id AS old_id, n.id AS new_id FROM ce_chunks o JOIN ce_chunks n ON n.document_id = o.document_id "
        "AND n.position = o.position AND n.version = :v WHERE o.document_id = CAST(:id AS uuid) "
        "AND o.valid_to IS NULL AND o.version < :v"
    )
    for table in _GRAPH_CHUNK_TABLES:
        await conn.execute(
            text(f"UPDATE {table} t SET chunk_id = p.new_id FROM ({pairs}) p WHERE t.chunk_id = p.old_id"), values
        )


async def delete_document(db: AsyncEngine, document_id: str, scope: ReadScope, access: WriteAccess) -> int | None:
    """Remove from the next revision on; earlier revisions keep their versions and chunks.
    ``None`` when the caller may not see the document; ``Forbidden`` when it may see but not write it."""
    async with db.begin() as conn:
        if await _lock_writable(conn, document_id, scope, access) is None:
            return None
        revision = await next_revision(conn)
        values = {"id": document_id, "r": revision}
        await bm25_stats.retract(conn, document_id)
        await conn.execute(
            text("UPDATE ce_chunks SET valid_to = :r WHERE document_id = CAST(:id AS uuid) AND valid_to IS NULL"),
            values,
        )
        await conn.execute(
            text(
                "UPDATE ce_document_versions SET valid_to = :r WHERE document_id = CAST(:id AS uuid) "
                "AND valid_to IS NULL"
            ),
            values,
        )
        await conn.execute(text("DELETE FROM ce_documents WHERE id = CAST(:id AS uuid)"), values)
        return revision


#: a hit's document name (over a chunk ``c``): its version's, else the live document's
_HIT_NAME = (
    "SELECT coalesce((SELECT v.name FROM ce_document_versions v WHERE v.document_id = c.document_id "
    "AND v.version = c.version), (SELECT d.name FROM ce_documents d WHERE d.id = c.document_id)) AS name"
)


#: the same name as joins, for a distributed (Citus) schema, which refuses a lateral subquery without FROM
#: around correlated lookups; the joins are on the document, the distribution column, so stay on one shard
_HIT_NAME_JOINS = (
    "LEFT JOIN ce_document_versions hv ON hv.document_id = c.document_id AND hv.version = c.version "
    "LEFT JOIN ce_documents hd ON hd.id = c.document_id"
)


def _hit_name(distributed: bool) -> tuple[str, str]:
    """``(FROM clause addition over ce_chunks c, the name's expression)`` for the layout."""
    if distributed:
        return _HIT_NAME_JOINS, "coalesce(hv.name, hd.name)"
    return f"CROSS JOIN LATERAL ({_HIT_NAME}) n", "n.name"


def _id_array(ids: Sequence[int]) -> str:
    """``{1,2,...}`` for ``CAST(:p AS bigint[])``: a search sends hundreds of ids, which psycopg's
    list dumper quotes one by one at about five times the cost (still one bound parameter)."""
    return "{" + ",".join(str(int(i)) for i in ids) + "}"


async def fetch_hits(db: AsyncEngine, ids: Sequence[int], scope: ReadScope) -> dict[int, dict[str, Any]]:
    """Load the fused winners (the predicate is applied again: cheap, and never trusts ids). The
    document id comes as text, the form a hit carries, not as a UUID to build and print per row."""
    if not ids:
        return {}
    params: dict[str, Any] = {"ids": _id_array(ids)}
    # the name is the version's own: a hit as of a past revision carries the name of then (rows
    # written without a version row, as a bulk load may, fall back to the live document's name).
    # Looked up per row by primary key, the document only when the version has no name (coalesce
    # stops at its first non-null argument): a join let the planner hash the whole versions table.
    async with db.connect() as pooled, planned_per_call(pooled) as conn:  # the caller's ACL shapes the plan
        joins, name = _hit_name(await layout.distributed(conn))
        sql = (
            f"SELECT c.id, CAST(c.document_id AS text) AS document_id, {name} AS document_name, c.text, c.source_id, "
            f"c.position, c.section, c.page, c.kind, c.version FROM ce_chunks c {joins} "
            f"WHERE c.id = ANY(CAST(:ids AS bigint[])) AND {name} IS NOT NULL AND {scope.predicate('c', params)}"
        )
        keys, rows = await driver_reads.read(conn, sql, params)
    return {int(r[0]): dict(zip(keys, r, strict=True)) for r in rows}


async def group_hits(
    db: AsyncEngine, ids: Sequence[int], scope: ReadScope, *, documents: int, per_document: int
) -> tuple[dict[int, dict[str, Any]], int]:
    """Group ranked candidates by document in the server: ``(rows, documents found)``.

    ``ids`` are best first. The candidates the caller may see (with a name, as :func:`fetch_hits`
    requires) are grouped by document, the documents ranked by their best candidate, and for the
    first ``documents`` of them the first ``per_document`` candidates come back whole, as
    :func:`fetch_hits` rows; the second value counts the documents found, up to ``documents`` (so
    it reaches ``documents`` exactly when that many were found). One statement, and only the
    winners' text is read and sent (the candidates of a 100-document search number in the
    hundreds; its winners' passages a few per document)."""
    if not ids:
        return {}, 0
    params: dict[str, Any] = {"ids": _id_array(ids), "top_docs": documents, "per_doc": per_document}
    async with db.connect() as pooled, planned_per_call(pooled) as conn:  # as fetch_hits
        sql = _GROUP_DISTRIBUTED if await layout.distributed(conn) else _GROUP
        keys, found = await driver_reads.read(conn, sql.format(visible=scope.predicate("c", params)), params)
    keys = keys[:-1]
    if not found:
        return {}, 0
    return {int(r[0]): dict(zip(keys, r, strict=False)) for r in found}, min(int(found[0][-1]), documents)


#: The candidates the caller may see in rank order (``ord``), grouped by document; the documents kept
#: (``top``); their first passages whole. The name is looked up once per document, best first, until
#: ``top_docs`` have one, not once per candidate: a document's visible chunks are all of one version
#: (a new version writes new chunk rows and closes the old ones in one transaction), so its chunks'
#: names are one name, and only a document without one (neither its version's row nor a live row, as
#: a past read of a deleted bulk-loaded document may find) is passed over. ``OFFSET 0`` keeps the sort
#: below the lookups and the lookup evaluated once per row (inlined, the planner repeated it in the filter).
_GROUP = (
    "WITH f AS (SELECT f.id, f.ord FROM unnest(CAST(:ids AS bigint[])) WITH ORDINALITY AS f(id, ord)), "
    "v AS MATERIALIZED (SELECT f.id, f.ord, c.document_id, c.version FROM f JOIN ce_chunks c ON c.id = f.id "
    "WHERE {visible}), "
    "d AS MATERIALIZED (SELECT v.document_id, min(v.ord) AS first, min(v.version) AS version FROM v "
    "GROUP BY v.document_id), "
    "top AS MATERIALIZED (SELECT s.document_id, s.first, n.name FROM "
    "(SELECT d.document_id, d.first, d.version FROM d ORDER BY d.first OFFSET 0) s "
    "CROSS JOIN LATERAL (SELECT coalesce((SELECT v.name FROM ce_document_versions v "
    "WHERE v.document_id = s.document_id AND v.version = s.version), "
    "(SELECT d.name FROM ce_documents d WHERE d.id = s.document_id)) AS name OFFSET 0) n "
    "WHERE n.name IS NOT NULL LIMIT :top_docs), "
    "p AS (SELECT v.id, v.ord, top.name, top.first, "
    "row_number() OVER (PARTITION BY v.document_id ORDER BY v.ord) AS k "
    "FROM v JOIN top ON top.document_id = v.document_id) "
    "SELECT c.id, CAST(c.document_id AS text) AS document_id, p.name AS document_name, c.text, c.source_id, "
    "c.position, c.section, c.page, c.kind, c.version, (SELECT count(*) FROM top) AS documents "
    "FROM p JOIN ce_chunks c ON c.id = p.id WHERE p.k <= :per_doc ORDER BY p.first, p.ord"
)
#: The same for a distributed (Citus) schema, in the form it plans: the name joined per candidate
#: (``_HIT_NAME_JOINS``; a correlated lookup over a CTE is not planned there) and the documents
#: counted over all of them (:func:`group_hits` caps the count).
_JOINS, _NAME = _hit_name(distributed=True)
_GROUP_DISTRIBUTED = (
    "WITH f AS (SELECT f.id, f.ord FROM unnest(CAST(:ids AS bigint[])) WITH ORDINALITY AS f(id, ord)), "
    f"v AS MATERIALIZED (SELECT f.id, f.ord, c.document_id, {_NAME} AS name FROM f "
    f"JOIN ce_chunks c ON c.id = f.id {_JOINS} WHERE {_NAME} IS NOT NULL AND {{visible}}), "
    "d AS MATERIALIZED (SELECT v.document_id, min(v.ord) AS first FROM v GROUP BY v.document_id), "
    "top AS (SELECT d.document_id, d.first FROM d ORDER BY d.first LIMIT :top_docs), "
    "p AS (SELECT v.id, v.ord, v.name, top.first, "
    "row_number() OVER (PARTITION BY v.document_id ORDER BY v.ord) AS k "
    "FROM v JOIN top ON top.document_id = v.document_id) "
    "SELECT c.id, CAST(c.document_id AS text) AS document_id, p.name AS document_name, c.text, c.source_id, "
    "c.position, c.section, c.page, c.kind, c.version, (SELECT count(*) FROM d) AS documents "
    "FROM p JOIN ce_chunks c ON c.id = p.id WHERE p.k <= :per_doc ORDER BY p.first, p.ord"
)


async def stats(db: AsyncEngine, scope: ReadScope) -> dict[str, Any]:
    params: dict[str, Any] = {}
    async with db.connect() as conn:
        if scope.historical:
            cols, source = _version_sql(await layout.distributed(conn))
            rows = f"(SELECT {cols} {source} WHERE {scope.version_predicate('v', params)}) d"
            where = "TRUE"
        else:
            rows, where = "ce_documents d", _doc_scope(scope, params)
        by_status = {
            r[0]: int(r[1])
            for r in await conn.execute(text(f"SELECT d.status, count(*) FROM {rows} WHERE {where} GROUP BY 1"), params)
        }
        sources = {
            r[0]: int(r[1])
            for r in await conn.execute(
                text(f"SELECT d.source_id, count(*) FROM {rows} WHERE {where} GROUP BY 1 ORDER BY 1"), params
            )
        }
        chunk_params: dict[str, Any] = {}
        chunks = await conn.scalar(
            text(f"SELECT count(*) FROM ce_chunks c WHERE {scope.predicate('c', chunk_params)}"), chunk_params
        )
        if scope.principals is None and scope.source_ids is None:
            revision = (
                scope.as_of
                if scope.historical
                else await conn.scalar(text("SELECT revision FROM ce_store_revision WHERE id = 1"))
            )
        else:  # a scoped caller learns nothing about writes to documents it cannot see
            revision = await conn.scalar(text(f"SELECT max(d.updated_revision) FROM {rows} WHERE {where}"), params)
    return {
        "documents": sum(by_status.values()),
        "chunks": int(chunks or 0),
        "by_status": by_status,
        "sources": sources,
        "revision": int(revision or 0),
    }

"""The tool's own SQL reads: pages of documents, their structure, the census, chunk ranges, name lookups.

Every statement carries the shared visibility predicate (the caller's ACL and the narrowed scope,
in SQL) and binds every value as a parameter. Each function opens one pooled connection for one
statement and gives it back before returning.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.knowledge.tool.call import Narrowed
from context_engine.revisions import view as revision_view
from context_engine.storage.predicates import visibility

#: MIME types whose documents are spreadsheets (``kind``); everything else is text
SPREADSHEET_MIMES = (
    "text/csv",
    "text/tab-separated-values",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
)

_KIND = "CASE WHEN d.mime = ANY(CAST(:sheet_mimes AS text[])) THEN 'spreadsheet' ELSE 'text' END"
_DOC_TYPE = "NULLIF(d.meta->>'document_type', '')"


def kind_of(mime: str) -> str:
    return "spreadsheet" if mime in SPREADSHEET_MIMES else "text"


def _documents(params: dict[str, Any], principals: tuple[str, ...] | None, scope: Narrowed) -> str:
    params["sheet_mimes"] = list(SPREADSHEET_MIMES)
    return visibility(
        "d",
        params,
        principals=principals,
        source_ids=scope.source_ids,
        document_ids=scope.document_ids,
        document_column="id",
    )


def _chunks(params: dict[str, Any], principals: tuple[str, ...] | None, scope: Narrowed) -> str:
    return visibility("c", params, principals=principals, source_ids=scope.source_ids, document_ids=scope.document_ids)


async def _rows(db: AsyncEngine, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    async with db.connect() as conn:
        return [dict(r) for r in (await conn.execute(text(sql), params)).mappings()]


async def view_revision(db: AsyncEngine, principals: tuple[str, ...] | None, scope: Narrowed) -> int:
    """The revision of the caller's view: the store's for a trusted, unscoped caller; for a trusted,
    scoped one the last revision that changed a document in scope; for any other caller the handle
    of the last revision that changed what it may read in scope (as ``stats`` reports it), so writes
    it cannot see never move it and the number counts nobody's writes."""
    if principals is not None:
        revs = await revision_view.for_caller(db, principals)
        found = await revision_view.view_revision(
            db, principals, source_ids=scope.source_ids, document_ids=scope.document_ids
        )
        return revs.told(found)
    params: dict[str, Any] = {}
    where = _documents(params, principals, scope)
    if where == "TRUE":
        sql = "SELECT revision FROM ce_store_revision WHERE id = 1"
    else:
        sql = f"SELECT max(d.updated_revision) FROM ce_documents d WHERE {where}"
    async with db.connect() as conn:
        return int(await conn.scalar(text(sql), params) or 0)


async def document_page(
    db: AsyncEngine,
    principals: tuple[str, ...] | None,
    scope: Narrowed,
    *,
    limit: int,
    after: tuple[str, str] | None,
) -> list[dict[str, Any]]:
    """Up to ``limit`` documents after the keyset ``after`` (created_at, id), oldest first."""
    params: dict[str, Any] = {"limit": limit}
    where = _documents(params, principals, scope)
    if after is not None:
        params["after_at"], params["after_id"] = after
        where += " AND (d.created_at, d.id) > (CAST(:after_at AS timestamptz), CAST(:after_id AS uuid))"
    sql = (
        f"SELECT d.id, d.name, d.source_id, d.mime, d.status, d.failure_reason, d.chunk_count, d.meta, "
        f"d.created_at, {_DOC_TYPE} AS document_type, {_KIND} AS kind FROM ce_documents d "
        f"WHERE {where} ORDER BY d.created_at, d.id LIMIT :limit"
    )
    return await _rows(db, sql, params)


async def sections(
    db: AsyncEngine, principals: tuple[str, ...] | None, scope: Narrowed, document_ids: Sequence[str]
) -> dict[str, list[dict[str, Any]]]:
    """Per document: its headings in reading order, each with the first chunk position under it."""
    if not document_ids:
        return {}
    params: dict[str, Any] = {"page_ids": list(document_ids)}
    sql = (
        "SELECT c.document_id, c.section, min(c.position) AS start FROM ce_chunks c "
        "WHERE c.document_id = ANY(CAST(:page_ids AS uuid[])) AND c.valid_to IS NULL AND c.section IS NOT NULL "
        f"AND c.section <> '' AND {_chunks(params, principals, scope)} "
        "GROUP BY c.document_id, c.section ORDER BY c.document_id, start"
    )
    found: dict[str, list[dict[str, Any]]] = {}
    for row in await _rows(db, sql, params):
        found.setdefault(str(row["document_id"]), []).append({"name": row["section"], "start": int(row["start"])})
    return found


async def last_pages(
    db: AsyncEngine, principals: tuple[str, ...] | None, scope: Narrowed, document_ids: Sequence[str]
) -> dict[str, int]:
    """The highest page any current chunk of each document sits on (documents with pages only)."""
    if not document_ids:
        return {}
    params: dict[str, Any] = {"page_ids": list(document_ids)}
    sql = (
        "SELECT c.document_id, max(c.page) AS last_page FROM ce_chunks c "
        "WHERE c.document_id = ANY(CAST(:page_ids AS uuid[])) AND c.valid_to IS NULL AND c.page IS NOT NULL "
        f"AND {_chunks(params, principals, scope)} GROUP BY c.document_id"
    )
    return {str(r["document_id"]): int(r["last_page"]) for r in await _rows(db, sql, params)}


async def sheet_columns(
    db: AsyncEngine, principals: tuple[str, ...] | None, scope: Narrowed, document_ids: Sequence[str]
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Per spreadsheet and sheet: the typed columns its schema chunk recorded at ingest."""
    if not document_ids:
        return {}
    params: dict[str, Any] = {"page_ids": list(document_ids)}
    sql = (
        "SELECT c.document_id, c.section, c.meta->'columns' AS columns FROM ce_chunks c "
        "WHERE c.document_id = ANY(CAST(:page_ids AS uuid[])) AND c.valid_to IS NULL AND c.kind = 'schema' "
        f"AND {_chunks(params, principals, scope)} ORDER BY c.document_id, c.position"
    )
    found: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for row in await _rows(db, sql, params):
        columns = [c for c in row["columns"] or [] if isinstance(c, dict)]
        found.setdefault(str(row["document_id"]), {})[row["section"] or ""] = columns
    return found


async def census(db: AsyncEngine, principals: tuple[str, ...] | None, scope: Narrowed) -> list[dict[str, Any]]:
    """How many documents of each ``(kind, document_type)`` the scope holds."""
    params: dict[str, Any] = {}
    sql = (
        f"SELECT {_KIND} AS kind, {_DOC_TYPE} AS document_type, count(*) AS count FROM ce_documents d "
        f"WHERE {_documents(params, principals, scope)} GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2"
    )
    return await _rows(db, sql, params)


async def fields(db: AsyncEngine, principals: tuple[str, ...] | None, scope: Narrowed) -> list[dict[str, Any]]:
    """Each structured field (a document attribute) by ``(kind, document_type)``: its JSON type and count."""
    params: dict[str, Any] = {}
    sql = (
        f"SELECT {_KIND} AS kind, {_DOC_TYPE} AS document_type, f.key AS field, jsonb_typeof(f.value) AS type, "
        "count(*) AS count FROM ce_documents d CROSS JOIN LATERAL jsonb_each(d.attributes) f "
        f"WHERE {_documents(params, principals, scope)} GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 5 DESC, 3"
    )
    return await _rows(db, sql, params)


async def kinds_in_scope(db: AsyncEngine, principals: tuple[str, ...] | None, scope: Narrowed) -> dict[str, int]:
    """How many visible documents of each kind the scope holds (one grouped query)."""
    params: dict[str, Any] = {}
    where = _documents(params, principals, scope)
    sql = f"SELECT {_KIND} AS kind, count(*) AS n FROM ce_documents d WHERE {where} GROUP BY 1"
    return {r["kind"]: int(r["n"]) for r in await _rows(db, sql, params)}


async def newest_spreadsheets(
    db: AsyncEngine, principals: tuple[str, ...] | None, scope: Narrowed
) -> list[dict[str, Any]]:
    """Every visible stored spreadsheet in scope, newest first as compute orders them (name and sheets)."""
    params: dict[str, Any] = {}
    sql = (
        "SELECT d.id, d.name, d.created_at, d.meta->'sheets' AS sheets FROM ce_documents d "
        f"WHERE {_documents(params, principals, scope)} AND d.mime = ANY(CAST(:sheet_mimes AS text[])) "
        "AND d.status = 'completed' ORDER BY d.updated_at DESC, d.id"
    )
    return await _rows(db, sql, params)


async def visible_sizes(
    db: AsyncEngine, principals: tuple[str, ...] | None, scope: Narrowed, document_ids: Sequence[str]
) -> dict[str, int]:
    """The text length of each of ``document_ids`` the caller may read within the scope."""
    params: dict[str, Any] = {"wanted": list(document_ids)}
    sql = (
        "SELECT d.id, length(d.text) AS size FROM ce_documents d WHERE d.id = ANY(CAST(:wanted AS uuid[])) "
        f"AND {_documents(params, principals, scope)}"
    )
    return {str(r["id"]): int(r["size"]) for r in await _rows(db, sql, params)}


async def chunk_range(
    db: AsyncEngine,
    principals: tuple[str, ...] | None,
    scope: Narrowed,
    document: str,
    *,
    start: int,
    limit: int,
) -> tuple[int | None, list[dict[str, Any]]]:
    """``(total_chunks, chunks from start)``; ``total_chunks`` is None when the document is not visible."""
    params: dict[str, Any] = {"doc": document, "start": start, "limit": limit}
    doc_where = _documents(params, principals, scope)
    chunk_where = _chunks(params, principals, scope)
    sql = (
        "WITH doc AS (SELECT d.id FROM ce_documents d WHERE d.id = CAST(:doc AS uuid) AND "
        f"{doc_where}) SELECT (SELECT count(*) FROM ce_chunks c WHERE c.document_id = CAST(:doc AS uuid) "
        f"AND c.valid_to IS NULL AND {chunk_where}) AS total, (SELECT count(*) FROM doc) AS visible"
    )
    page_sql = (
        "SELECT c.position, c.text, c.section, c.page, left(c.meta->>'language', 64) AS language FROM ce_chunks c "
        "WHERE c.document_id = CAST(:doc AS uuid) "
        f"AND c.valid_to IS NULL AND c.position >= :start AND {chunk_where} ORDER BY c.position LIMIT :limit"
    )
    async with db.connect() as conn:
        head = (await conn.execute(text(sql), params)).mappings().one()
        if not head["visible"]:
            return None, []
        rows = [dict(r) for r in (await conn.execute(text(page_sql), params)).mappings()]
    return int(head["total"]), rows


async def by_file_name(
    db: AsyncEngine,
    principals: tuple[str, ...] | None,
    scope: Narrowed,
    name: str,
    *,
    limit: int,
    threshold: float,
) -> list[dict[str, Any]]:
    """Documents whose lower-cased name is trigram-similar to ``name``: exact first, then by similarity,
    the id as the final tiebreak; each with its first chunk (or none)."""
    params: dict[str, Any] = {"fname": name.lower(), "limit": limit, "threshold": threshold}
    chunk_params = _chunks(params, principals, scope)
    sql = (
        "SELECT d.id, d.name, d.source_id, first.position, first.text, "
        "similarity(lower(d.name), :fname) AS similarity FROM ce_documents d "
        "LEFT JOIN LATERAL (SELECT c.position, c.text FROM ce_chunks c WHERE c.document_id = d.id "
        f"AND c.valid_to IS NULL AND {chunk_params} ORDER BY c.position LIMIT 1) first ON TRUE "
        f"WHERE {_documents(params, principals, scope)} AND similarity(lower(d.name), :fname) >= :threshold "
        "ORDER BY (lower(d.name) = :fname) DESC, similarity(lower(d.name), :fname) DESC, d.id LIMIT :limit"
    )
    return await _rows(db, sql, params)


async def newest_targets(
    db: AsyncEngine, principals: tuple[str, ...] | None, scope: Narrowed, *, limit: int
) -> list[dict[str, Any]]:
    """The ``limit`` newest visible documents in scope with their kind: what one map_reduce run reads."""
    params: dict[str, Any] = {"limit": limit}
    sql = (
        f"SELECT d.id, {_KIND} AS kind FROM ce_documents d WHERE {_documents(params, principals, scope)} "
        "ORDER BY d.updated_at DESC, d.id LIMIT :limit"
    )
    return await _rows(db, sql, params)

"""Every SQL read and write of extracted fields (``ce_document_fields``), under the shared predicate."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import text as sql_text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.storage.predicates import ReadScope


async def save_fields(
    sql: AsyncEngine,
    document_id: str,
    version: int,
    *,
    document_type: str | None,
    fields: dict[str, Any],
    field_types: dict[str, str],
    mode: str,
    tokens: int,
) -> bool:
    """Store one document's fields; False (nothing written) when that version is no longer current."""
    async with sql.begin() as conn:
        stored = await conn.scalar(
            sql_text(
                "INSERT INTO ce_document_fields (document_id, version, document_type, fields, field_types, mode, "
                "tokens) SELECT d.id, d.version, :t, CAST(:f AS jsonb), CAST(:ft AS jsonb), :m, :tok "
                "FROM ce_documents d WHERE d.id = CAST(:id AS uuid) AND d.version = :v "
                "ON CONFLICT (document_id) DO UPDATE SET version = EXCLUDED.version, "
                "document_type = EXCLUDED.document_type, fields = EXCLUDED.fields, "
                "field_types = EXCLUDED.field_types, mode = EXCLUDED.mode, tokens = EXCLUDED.tokens, "
                "extracted_at = now() RETURNING document_id"
            ),
            {
                "id": document_id,
                "v": version,
                "t": document_type,
                "f": json.dumps(fields),
                "ft": json.dumps(field_types),
                "m": mode,
                "tok": tokens,
            },
        )
    return stored is not None


async def stored_chunks(sql: AsyncEngine, document_id: str) -> tuple[int, list[str]] | None:
    """The current version of a document and its chunk texts in order (None when it does not exist)."""
    async with sql.connect() as conn:
        version = await conn.scalar(
            sql_text("SELECT version FROM ce_documents WHERE id = CAST(:id AS uuid)"), {"id": document_id}
        )
        if version is None:
            return None
        texts = (
            await conn.execute(
                sql_text(
                    "SELECT text FROM ce_chunks WHERE document_id = CAST(:id AS uuid) AND version = :v "
                    "ORDER BY position"
                ),
                {"id": document_id, "v": version},
            )
        ).scalars()
        return int(version), list(texts)


async def field_catalogue(sql: AsyncEngine, scope: ReadScope) -> list[dict[str, Any]]:
    """Each extracted field name with its type and how many visible documents carry it."""
    params: dict[str, Any] = {}
    where = scope.document_predicate("d", params)
    query = (
        "SELECT e.key AS name, e.value AS type, count(*) AS documents FROM ce_document_fields f "
        "JOIN ce_documents d ON d.id = f.document_id AND d.version = f.version "
        f"CROSS JOIN LATERAL jsonb_each_text(f.field_types) e WHERE {where} "
        "GROUP BY e.key, e.value ORDER BY count(*) DESC, e.key"
    )
    async with sql.connect() as conn:
        return [dict(r) for r in (await conn.execute(sql_text(query), params)).mappings()]


async def documents_with_fields(
    sql: AsyncEngine, scope: ReadScope, names: list[str], limit: int
) -> list[dict[str, Any]]:
    """Visible documents carrying any of ``names``, newest first, with their stored fields."""
    params: dict[str, Any] = {"names": names, "limit": limit}
    where = scope.document_predicate("d", params)
    query = (
        "SELECT d.id, d.source_id, d.name, f.document_type, f.fields FROM ce_document_fields f "
        "JOIN ce_documents d ON d.id = f.document_id AND d.version = f.version "
        f"WHERE jsonb_exists_any(f.fields, CAST(:names AS text[])) AND {where} "
        "ORDER BY d.updated_at DESC, d.id LIMIT :limit"
    )
    async with sql.connect() as conn:
        return [dict(r) for r in (await conn.execute(sql_text(query), params)).mappings()]

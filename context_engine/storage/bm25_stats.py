"""Keeping the BM25 statistics current: the write side of :mod:`context_engine.retrieval.bm25`.

Per (source, ACL) group, ``ce_bm25_terms`` holds each lexeme's document frequency and
``ce_bm25_groups`` the chunk count and token total. They change inside the same transaction that
opens or closes chunks, so a ranking never sees statistics of another revision than its rows.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

_CURRENT = "c.document_id = CAST(:bm25_doc AS uuid) AND c.valid_to IS NULL"


async def _shift(conn: AsyncConnection, document_id: str, weight: str, params: dict[str, Any]) -> None:
    params = {**params, "bm25_doc": document_id}
    await conn.execute(
        text(
            "INSERT INTO ce_bm25_terms AS t (lexeme, source_id, acl, df) "
            f"SELECT u.lexeme, c.source_id, c.acl, sum({weight}) FROM ce_chunks c, unnest(c.tsv) u WHERE {_CURRENT} "
            f"GROUP BY 1, 2, 3 HAVING sum({weight}) <> 0 ORDER BY 1, 2, 3 "
            "ON CONFLICT (lexeme, source_id, acl) DO UPDATE SET df = t.df + EXCLUDED.df"
        ),
        params,
    )
    await conn.execute(
        text(
            "INSERT INTO ce_bm25_groups AS g (source_id, acl, chunks, tokens) "
            f"SELECT c.source_id, c.acl, sum({weight}), sum(({weight}) * c.tsv_tokens) FROM ce_chunks c "
            f"WHERE {_CURRENT} GROUP BY 1, 2 HAVING sum({weight}) <> 0 OR sum(({weight}) * c.tsv_tokens) <> 0 "
            "ORDER BY 1, 2 "
            "ON CONFLICT (source_id, acl) DO UPDATE SET chunks = g.chunks + EXCLUDED.chunks, "
            "tokens = g.tokens + EXCLUDED.tokens"
        ),
        params,
    )
    # rows that fell to zero are removed, so the tables stay the size of the live vocabulary
    await conn.execute(
        text(
            "DELETE FROM ce_bm25_terms t USING (SELECT DISTINCT u.lexeme, c.source_id, c.acl "
            f"FROM ce_chunks c, unnest(c.tsv) u WHERE {_CURRENT}) x "
            "WHERE t.lexeme = x.lexeme AND t.source_id = x.source_id AND t.acl = x.acl AND t.df <= 0"
        ),
        params,
    )
    await conn.execute(
        text(
            "DELETE FROM ce_bm25_groups g USING (SELECT DISTINCT c.source_id, c.acl FROM ce_chunks c "
            f"WHERE {_CURRENT}) x WHERE g.source_id = x.source_id AND g.acl = x.acl AND g.chunks <= 0"
        ),
        params,
    )


async def replace_version(conn: AsyncConnection, document_id: str, version: int) -> None:
    """Count the chunks of ``version`` in and the document's other current chunks out.

    Call after the new version's chunks are inserted and before the old ones are closed, in the
    same transaction (whose store-revision row lock also serialises every statistics update).
    """
    await _shift(conn, document_id, "CASE WHEN c.version = :bm25_v THEN 1 ELSE -1 END", {"bm25_v": version})


async def retract(conn: AsyncConnection, document_id: str) -> None:
    """Count the document's current chunks out (before a delete closes them, or an ACL moves them)."""
    await _shift(conn, document_id, "-1", {})


async def admit(conn: AsyncConnection, document_id: str) -> None:
    """Count the document's current chunks in (after an ACL change has moved them)."""
    await _shift(conn, document_id, "1", {})

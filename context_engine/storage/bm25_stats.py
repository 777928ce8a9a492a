"""Keeping the BM25 statistics current: the write side of :mod:`context_engine.retrieval.bm25`.

Per (source, ACL) group, ``ce_bm25_groups`` holds the chunk count and token total under a small
integer ``group_id``, and ``ce_bm25_terms`` each lexeme's document frequency per ``group_id`` with
its largest term frequency and shortest chunk there (the pruning bounds of migration 0019).
They change inside the same transaction that opens or closes chunks, so a ranking never sees
statistics of another revision than its rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from context_engine.storage import layout

#: a lexeme's term frequency in one chunk (``u`` a row of ``unnest(c.tsv)``), as BM25 scores it
_TF = "coalesce(array_length(u.positions, 1), 1)"
#: the per-lexeme bounds an upsert keeps (migration 0019): the new chunks widen them (so a lexeme
#: whose count a new version leaves unchanged is still upserted, by 0); an unknown
#: bound (NULL) stays unknown, and a count that falls leaves them (still bounds, only looser)
KEEP_BOUNDS = (
    "max_tf = CASE WHEN t.max_tf IS NOT NULL THEN greatest(t.max_tf, EXCLUDED.max_tf) END, "
    "min_len = CASE WHEN t.min_len IS NOT NULL THEN least(t.min_len, EXCLUDED.min_len) END"
)

#: one posting (migration 0020) of a lexeme ``u`` in a chunk ``c`` of group ``g``, and the upsert that
#: rewrites it (a chunk counted in twice writes the same row again)
POSTING = f"u.lexeme, c.id, g.group_id, {_TF}, c.tsv_tokens"
POSTING_UPDATE = "group_id = EXCLUDED.group_id, tf = EXCLUDED.tf, tokens = EXCLUDED.tokens"


def posting_insert(distributed: bool) -> str:
    """``INSERT INTO ce_bm25_postings (...) SELECT`` the :data:`POSTING` of ``u`` in ``c`` (a FROM clause
    follows). On a Citus coordinator each posting also carries its chunk's ``document_id``, the key it
    is co-located with the chunks by (``migrations/citus/0002_postings_oauth.sql``)."""
    if distributed:
        return (
            "INSERT INTO ce_bm25_postings AS p (lexeme, chunk_id, group_id, tf, tokens, document_id) "
            f"SELECT {POSTING}, c.document_id "
        )
    return f"INSERT INTO ce_bm25_postings AS p (lexeme, chunk_id, group_id, tf, tokens) SELECT {POSTING} "


def _posting_key(distributed: bool) -> tuple[str, str, str]:
    """``(conflict target, extra column of a chunk's lexeme rows, their extra match)`` of a posting's key."""
    if distributed:
        return "(lexeme, chunk_id, document_id)", ", c.document_id", " AND p.document_id = z.document_id"
    return "(lexeme, chunk_id)", "", ""


#: the current chunks of the documents listed in ``:bm25_docs`` (with the version each opens in ``:bm25_vs``)
_DOCS = "unnest(CAST(:bm25_docs AS uuid[]), CAST(:bm25_vs AS integer[])) AS x(id, v)"
_CURRENT = f"ce_chunks c JOIN {_DOCS} ON c.document_id = x.id WHERE c.valid_to IS NULL"
#: the same chunks, one row per lexeme, with the id of their group
_CURRENT_TERMS = (
    f"ce_chunks c JOIN {_DOCS} ON c.document_id = x.id "
    "JOIN ce_bm25_groups g ON g.source_id = c.source_id AND g.acl = c.acl, unnest(c.tsv) u WHERE c.valid_to IS NULL"
)


async def _shift(
    conn: AsyncConnection, documents: Sequence[str], versions: Sequence[int], weight: str, *, may_fall: bool
) -> None:
    """Add ``weight`` (an expression over ``c`` and ``x``) per current chunk of the documents to the
    statistics, and write (weight above 0) or remove (below) the chunks' postings: the three tables in
    one statement, then, when any count may have fallen (``may_fall``), the
    rows that fell to zero removed in a second, so the tables stay the size of the live vocabulary.

    Every group the documents' chunks fall in is upserted, even by zero, because its id (new or
    existing) keys the term rows written by the same statement."""
    params: dict[str, Any] = {"bm25_docs": list(documents), "bm25_vs": list(versions)}
    distributed = await layout.distributed(conn)
    target, column, match = _posting_key(distributed)
    await conn.execute(
        text(
            "WITH grp AS (INSERT INTO ce_bm25_groups AS g (source_id, acl, chunks, tokens) "
            f"SELECT c.source_id, c.acl, sum({weight}), sum(({weight}) * c.tsv_tokens) FROM {_CURRENT} "
            "GROUP BY 1, 2 ORDER BY 1, 2 "
            "ON CONFLICT (source_id, acl) DO UPDATE SET chunks = g.chunks + EXCLUDED.chunks, "
            "tokens = g.tokens + EXCLUDED.tokens RETURNING g.group_id, g.source_id, g.acl), "
            "terms AS (INSERT INTO ce_bm25_terms AS t (lexeme, group_id, df, max_tf, min_len) "
            f"SELECT u.lexeme, grp.group_id, sum({weight}), max({_TF}) FILTER (WHERE {weight} > 0), "
            f"min(c.tsv_tokens) FILTER (WHERE {weight} > 0) FROM ce_chunks c JOIN {_DOCS} ON c.document_id = x.id "
            "JOIN grp ON grp.source_id = c.source_id AND grp.acl = c.acl, unnest(c.tsv) u WHERE c.valid_to IS NULL "
            f"GROUP BY 1, 2 HAVING sum({weight}) <> 0 OR bool_or({weight} > 0) ORDER BY 1, 2 "
            f"ON CONFLICT (lexeme, group_id) DO UPDATE SET df = t.df + EXCLUDED.df, {KEEP_BOUNDS}), "
            # the postings (migration 0020) of the chunks counted out go, those counted in come
            f"gone AS (DELETE FROM ce_bm25_postings p USING (SELECT u.lexeme, c.id{column} FROM ce_chunks c "
            f"JOIN {_DOCS} ON c.document_id = x.id, unnest(c.tsv) u WHERE c.valid_to IS NULL AND {weight} < 0) z "
            f"WHERE p.lexeme = z.lexeme AND p.chunk_id = z.id{match}) "
            f"{posting_insert(distributed)}"
            f"FROM ce_chunks c JOIN {_DOCS} ON c.document_id = x.id JOIN grp g ON g.source_id = c.source_id "
            f"AND g.acl = c.acl, unnest(c.tsv) u WHERE c.valid_to IS NULL AND {weight} > 0 ORDER BY 1, 2 "
            f"ON CONFLICT {target} DO UPDATE SET {POSTING_UPDATE}"
        ),
        params,
    )
    if not may_fall:
        return
    await conn.execute(
        text(
            "WITH terms AS (DELETE FROM ce_bm25_terms t USING (SELECT DISTINCT u.lexeme, g.group_id "
            f"FROM {_CURRENT_TERMS}) z "
            "WHERE t.lexeme = z.lexeme AND t.group_id = z.group_id AND t.df <= 0) "
            f"DELETE FROM ce_bm25_groups g USING (SELECT DISTINCT c.source_id, c.acl FROM {_CURRENT}) z "
            "WHERE g.source_id = z.source_id AND g.acl = z.acl AND g.chunks <= 0"
        ),
        params,
    )


async def replace_versions(
    conn: AsyncConnection, documents: Sequence[str], versions: Sequence[int], *, replacing: bool
) -> None:
    """Count the chunks of each document's new version in and its other current chunks out.

    Call after the new versions' chunks are inserted and before the old ones are closed, in the
    same transaction (whose store-revision row lock also serialises every statistics update).
    ``replacing`` says some document had a previous version (only then can a count fall).
    """
    await _shift(conn, documents, versions, "CASE WHEN c.version = x.v THEN 1 ELSE -1 END", may_fall=replacing)


async def retract(conn: AsyncConnection, document_id: str) -> None:
    """Count the document's current chunks out (before a delete closes them, or an ACL moves them)."""
    await _shift(conn, [document_id], [0], "-1", may_fall=True)


async def admit(conn: AsyncConnection, document_id: str) -> None:
    """Count the document's current chunks in (after an ACL change has moved them)."""
    await _shift(conn, [document_id], [0], "1", may_fall=False)

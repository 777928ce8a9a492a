"""Okapi BM25 over the chunks' ``tsvector``, computed in SQL, with statistics the caller may see.

Why BM25 and not ``ts_rank``: ``ts_rank``/``ts_rank_cd`` weigh every query word alike, so a word
found in half the corpus counts as much as a rare one, and their length normalisation is a fixed
division. BM25 weighs each term by its inverse document frequency and saturates repeated terms
against the chunk's length relative to the average; on SciFact that is the difference between
ranking below and ranking level with a dedicated BM25 library (benchmarks/README.md).

Statistics are kept per (source, ACL) group in ``ce_bm25_terms`` (document frequency of each
lexeme) and ``ce_bm25_groups`` (chunk count and token total), updated inside the same transaction
that opens or closes chunks. At query time the groups are summed under the same visibility
predicate as the chunks, so the IDF and average length a caller's ranking uses are computed from
exactly the chunks that caller may see in the sources they searched: a document they may not see
changes neither their results nor their scores. (A ``document_ids`` pin narrows the candidates, not
the statistics, which stay those of the visible sources.)

A chunk's length (``tsv_tokens``) is its count of indexed tokens, stop words excluded, stored by
migration 0002 as a generated column so a query never recounts it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from context_engine.storage.predicates import visibility


def score_sql(
    *,
    tsquery: str,
    terms: str,
    chunk_predicate: str,
    stats_scope: dict[str, Any],
    params: dict[str, Any],
    k1: float,
    b: float,
) -> str:
    """The ranked BM25 query: ``(id, score)`` best first, limited to ``:limit``.

    ``tsquery`` selects the candidates (matching mode, phrases, -terms); ``terms`` is the
    ``text[]`` of positive lexemes that are scored. Term frequencies come from the chunk's own
    ``tsvector``: the query terms are marked with weight A and filtered out, so only those few
    entries are unnested per candidate, not the whole vector (a lexeme that already carried weight
    A is dropped again by the join with the query terms). The tsquery is MATERIALIZED so it is
    built once, not re-parsed (``unaccent`` is only stable) for every candidate row.
    """
    params["bm25_k1"] = float(k1)
    params["bm25_b"] = float(b)
    groups = visibility("g", params, **stats_scope)
    terms_pred = visibility("s", params, **stats_scope)
    return (
        f"WITH q AS MATERIALIZED (SELECT {tsquery} AS q), "
        f"qt AS (SELECT DISTINCT x AS lexeme FROM unnest({terms}) x), "
        "qa AS (SELECT coalesce(array_agg(lexeme), CAST(ARRAY[] AS text[])) AS lexemes FROM qt), "
        "tot AS (SELECT coalesce(sum(g.chunks), 0)::float8 AS n, "
        "greatest(coalesce(sum(g.tokens), 0)::float8 / greatest(coalesce(sum(g.chunks), 0), 1), 1) AS avgdl "
        f"FROM ce_bm25_groups g WHERE {groups}), "
        "w AS (SELECT qt.lexeme, ln(1 + (tot.n - d.df + 0.5) / (d.df + 0.5)) AS idf FROM qt CROSS JOIN tot "
        "CROSS JOIN LATERAL (SELECT coalesce(sum(s.df), 0)::float8 AS df FROM ce_bm25_terms s "
        f"WHERE s.lexeme = qt.lexeme AND {terms_pred}) d) "
        "SELECT c.id, sum(w.idf * u.tf * (:bm25_k1 + 1) / (u.tf + :bm25_k1 * "
        "(1 - :bm25_b + :bm25_b * c.tsv_tokens / tot.avgdl))) AS r "
        "FROM ce_chunks c CROSS JOIN q CROSS JOIN qa CROSS JOIN tot "
        "CROSS JOIN LATERAL (SELECT x.lexeme, coalesce(array_length(x.positions, 1), 1) AS tf "
        "FROM unnest(ts_filter(setweight(c.tsv, 'A', qa.lexemes), '{a}')) x) u "
        "JOIN w ON w.lexeme = u.lexeme "
        f"WHERE c.valid_to IS NULL AND c.tsv @@ q.q AND {chunk_predicate} "
        "GROUP BY c.id ORDER BY r DESC, c.id LIMIT :limit"
    )


# ------------------------------------------------------------------------------ keeping stats current

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

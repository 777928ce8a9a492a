"""The query a user would write by hand on the same PostgreSQL: the peer that says what the server costs.

One table in context-engine's own database (same server, same settings): a document per row, its
``tsvector`` generated and GIN-indexed, its vector (the same all-MiniLM-L6-v2 document vectors the
other peers use) under an HNSW index with pgvector's defaults. One statement per search: the
full-text top 100 by ``ts_rank_cd`` (the terms OR-ed, as a claim rarely holds every word), the HNSW
top 100 (``hnsw.ef_search`` raised to 100 so the index can return that many), fused by RRF (k 60)
in SQL. psycopg 3 in autocommit, one connection per searcher, the statement prepared by psycopg
after its fifth run, as a user of psycopg gets without asking.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg

TABLE = "peer_handwritten_docs"
DEPTH = 100
RRF_K = 60

SEARCH = f"""
WITH q AS (SELECT replace(plainto_tsquery('english', %(q)s)::text, ' & ', ' | ')::tsquery AS q),
fts AS (
    SELECT d.id, row_number() OVER (ORDER BY ts_rank_cd(d.tsv, q.q) DESC, d.id) AS rank
    FROM {TABLE} d, q WHERE d.tsv @@ q.q
    ORDER BY ts_rank_cd(d.tsv, q.q) DESC, d.id LIMIT {DEPTH}
),
vec AS (
    SELECT d.id, row_number() OVER (ORDER BY d.embedding <=> %(v)s::vector) AS rank
    FROM {TABLE} d ORDER BY d.embedding <=> %(v)s::vector LIMIT {DEPTH}
)
SELECT coalesce(f.id, v.id) AS id,
       coalesce(1.0 / ({RRF_K} + f.rank), 0) + coalesce(1.0 / ({RRF_K} + v.rank), 0) AS score
FROM fts f FULL JOIN vec v ON f.id = v.id
ORDER BY score DESC, id LIMIT {DEPTH}
"""


def literal(vector: np.ndarray) -> str:
    return "[" + ",".join(f"{float(x):.7g}" for x in vector) + "]"


def build(url: str, ids: Sequence[str], texts: Sequence[str], vectors: np.ndarray) -> None:
    """Create and fill the table and its two indexes, then ``VACUUM (ANALYZE)`` it, as a user would."""
    dim = int(vectors.shape[1])
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
        conn.execute(
            f"CREATE TABLE {TABLE} (id text PRIMARY KEY, body text NOT NULL, "
            "tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', body)) STORED, "
            f"embedding vector({dim}) NOT NULL)"
        )
        with conn.cursor().copy(f"COPY {TABLE} (id, body, embedding) FROM STDIN") as copy:
            for doc_id, body, vector in zip(ids, texts, vectors, strict=True):
                copy.write_row((doc_id, body, literal(vector)))
        conn.execute(f"CREATE INDEX ON {TABLE} USING gin (tsv)")
        conn.execute(f"CREATE INDEX ON {TABLE} USING hnsw (embedding vector_cosine_ops)")
        conn.execute(f"VACUUM (ANALYZE) {TABLE}")


def drop(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {TABLE}")


class Searcher:
    """One searcher's connection (psycopg async, autocommit) and the one statement."""

    def __init__(self, url: str):
        self.url = url
        self.conn: psycopg.AsyncConnection[Any] | None = None

    async def open(self) -> Searcher:
        self.conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        await self.conn.execute(f"SET hnsw.ef_search = {DEPTH}")
        return self

    async def search(self, query: str, vector: np.ndarray) -> list[str]:
        assert self.conn is not None
        cursor = await self.conn.execute(SEARCH, {"q": query, "v": literal(vector)})
        return [str(row[0]) for row in await cursor.fetchall()]

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()
            self.conn = None

"""Rows written straight to ``ce_chunks`` under the HNSW index's own definition, built once after them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg


@contextmanager
def hnsw_built_after(conn: psycopg.Connection) -> Iterator[None]:
    """Drop ``ce_chunks``' HNSW index, let the block write its rows, then create it again as it was.

    As a bulk load does: a thousand inserts into the index one by one took seconds, one build over
    them a fraction of that. The definition is the server's own (``pg_get_indexdef``), so the index
    the tests read is the one the migrations made (float4 or halfvec).
    """
    index = conn.execute(
        "SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid) FROM pg_index i "
        "JOIN pg_class x ON x.oid = i.indexrelid JOIN pg_am a ON a.oid = x.relam "
        "WHERE i.indrelid = 'ce_chunks'::regclass AND a.amname = 'hnsw'"
    ).fetchone()
    assert index is not None
    conn.execute(f"DROP INDEX {index[0]}")
    yield
    conn.execute(index[1])

"""The langchain-postgres peer: its ``PGVectorStore`` on the same embedded server as our engine.

What a LangChain user would pick instead of us: one row per document (title + text as the content,
the same one vector per document the other peers get), in a database of its own on our engine's
server, searched two ways:

* vector alone: ``asimilarity_search_by_vector`` (no index: an exact scan, as the library creates it);
* hybrid: ``asimilarity_search`` with a ``HybridSearchConfig`` (its stored tsvector column with a GIN
  index, ``ts_rank_cd``, fused with the vector leg by its ``reciprocal_rank_fusion``, k 60), which
  embeds the query itself through the ``Embeddings`` it was given (the same local model).

Its text leg is ``plainto_tsquery``, which requires every query word in a document, so on long
natural-language questions it matches few documents and the hybrid adds little over the vector leg.

langchain-postgres writes the query into the config object it was given (``fts_query``), so each
call gets a fresh copy; otherwise every search after the first would run the first query's text leg.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import psycopg
from langchain_core.embeddings import Embeddings
from langchain_postgres import PGEngine, PGVectorStore
from langchain_postgres.v2.hybrid_search_config import HybridSearchConfig, reciprocal_rank_fusion
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

DATABASE = "langchain_pg_peer"
TABLE = "scifact"


@dataclasses.dataclass
class PeerSearches:
    """What the run needs from this peer: labelled searches, build time, bytes on disk, a closer."""

    #: label -> (search(query, vector), whether it takes the query's vector)
    searches: dict[str, tuple[Callable[[str, Any], Awaitable[list[str]]], bool]]
    build_seconds: float
    disk_bytes: int
    close: Callable[[], Awaitable[None]]


class QueryEmbeddings(Embeddings):
    """LangChain ``Embeddings`` that only embeds queries (documents arrive with their vectors)."""

    def __init__(self, embed: Callable[[str], Awaitable[np.ndarray]]):
        self._embed = embed

    async def aembed_query(self, text: str) -> list[float]:
        return [float(x) for x in await self._embed(text)]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return [await self.aembed_query(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        raise NotImplementedError("the benchmark searches through the async API")

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise NotImplementedError("the benchmark adds precomputed vectors")


async def langchain_pg_searches(
    server_url: str, ids: list[str], texts: list[str], vectors: np.ndarray,
    embed: Callable[[str], Awaitable[np.ndarray]], depth: int,
) -> PeerSearches:
    """Load the store in a database of its own on ``server_url``'s server; returns its searches."""
    started = time.perf_counter()
    url = make_url(server_url)
    with psycopg.connect(url.set(drivername="postgresql").render_as_string(hide_password=False),
                         autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}"')
        conn.execute(f'CREATE DATABASE "{DATABASE}"')
    peer_url = url.set(drivername="postgresql+psycopg", database=DATABASE)
    with psycopg.connect(peer_url.set(drivername="postgresql").render_as_string(hide_password=False),
                         autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    pg = PGEngine.from_engine(create_async_engine(peer_url.render_as_string(hide_password=False)))

    hybrid = HybridSearchConfig(
        fusion_function=reciprocal_rank_fusion,
        fusion_function_parameters={"rrf_k": 60},
        primary_top_k=depth,
        secondary_top_k=depth,
    )
    await pg.ainit_vectorstore_table(TABLE, int(vectors.shape[1]), hybrid_search_config=hybrid)
    store = await PGVectorStore.create(pg, table_name=TABLE, embedding_service=QueryEmbeddings(embed),
                                       hybrid_search_config=hybrid)
    by_uuid: dict[str, str] = {}
    for start in range(0, len(ids), 500):
        part = slice(start, start + 500)
        keys = [str(uuid.uuid5(uuid.NAMESPACE_OID, doc_id)) for doc_id in ids[part]]
        by_uuid.update(zip(keys, ids[part], strict=True))
        await store.aadd_embeddings(texts[part], [v.tolist() for v in vectors[part]], ids=keys)
    await store.aapply_hybrid_search_index()
    build = time.perf_counter() - started
    with psycopg.connect(peer_url.set(drivername="postgresql").render_as_string(hide_password=False),
                         autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    disk = int(row[0]) if row else 0

    async def vector(query: str, q: Any) -> list[str]:
        found = await store.asimilarity_search_by_vector([float(x) for x in q], k=depth)
        return [by_uuid[str(d.id)] for d in found]

    async def hybrid_search(query: str, q: Any) -> list[str]:
        fresh = dataclasses.replace(hybrid, fts_query="", fusion_function_parameters={"rrf_k": 60})
        found = await store.asimilarity_search(query, k=depth, hybrid_search_config=fresh)
        return [by_uuid[str(d.id)] for d in found]

    async def close() -> None:
        await pg.close()

    searches = {
        "hybrid (tsvector GIN + exact vectors, RRF k 60)": (hybrid_search, False),
        "vector alone (exact)": (vector, True),
    }
    return PeerSearches(searches, build, disk, close)

"""The full-text leg's statements, and those loading the winners, are never prepared, so every run is
planned for its own parameters.

psycopg prepares a statement after ``prepare_threshold`` runs on one connection, and PostgreSQL may
then give it a generic plan; the search path reads in autocommit, so no rollback on the connection's
return to the pool clears psycopg's cache. On the search path's pool of one connection the leg runs
past that threshold, and the server's list of that session's prepared statements gains none of the
leg's, while the connection keeps preparing other statements after the leg. The winners' rows
(``fetch_hits``, ``group_hits``) likewise. The BM25 statement of nearly every search goes on the
driver connection unprepared (``storage.driver_reads``), so even outside the guard it is not prepared.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine import ContextEngine
from context_engine.retrieval import bm25, lexical
from context_engine.retrieval.legs.fts import fts_leg
from context_engine.storage import repository as repo
from context_engine.storage.predicates import ReadScope
from tests.conftest import make_config
from tests.test_bm25_pruning import WordEmbedder

RUNS = 8  # past psycopg's default prepare_threshold (5)
CONTROL = "SELECT count(*) FROM ce_chunks c WHERE c.tsv @@ plainto_tsquery('english', :q)"


async def _prepared(db: AsyncEngine) -> tuple[int, set[str]]:
    async with db.connect() as conn:
        pid = int(await conn.scalar(text("SELECT pg_backend_pid()")))
        return pid, {str(r[0]) for r in await conn.execute(text("SELECT statement FROM pg_prepared_statements"))}


async def _leg(db: AsyncEngine, rank: str, principals: tuple[str, ...] | None) -> list[tuple[int, float]]:
    return await fts_leg(
        db,
        "protein kinase signal",
        ReadScope(principals),
        limit=5,
        config="english",
        match="any",
        rank=rank,
        normalization=0,
    )


async def _rank_unguarded(db: AsyncEngine) -> list[tuple[int, float]]:
    """The BM25 statements as the leg sends them, outside the guard (on a connection that prepares)."""
    params: dict[str, Any] = {"lx_cfg": "english", "limit": 5}
    tsquery = lexical.tsquery_sql("protein kinase signal", match="any", params=params)
    assert tsquery is not None
    scope = ReadScope(None)
    async with db.connect() as conn:
        return await bm25.rank(
            conn,
            tsquery=tsquery,
            terms=lexical.terms_sql(params),
            chunk_predicate=scope.predicate("c", params),
            stats_scope={"principals": None, "source_ids": None},
            params=params,
            k1=1.2,
            b=0.75,
            limit=5,
        )


async def test_the_leg_and_hit_statements_are_not_prepared_past_the_threshold(database_url: str) -> None:
    storage = {"auto_migrate": True, "pool_size": 1, "max_overflow": 0}
    async with ContextEngine(make_config(database_url, storage=storage), embedder=WordEmbedder()) as engine:
        for i in range(12):
            body = "protein kinase signal pathway" if i % 2 else "cell gene expression signal"
            await engine.ingest(text=f"{body} {i}.", name=f"d{i}.md", acl=[] if i % 3 else ["g1"])
        db = await engine.services.reads()  # the search path's pool: autocommit, so nothing resets the cache
        pid, before = await _prepared(db)

        answers = {}
        for rank, principals in (("bm25", None), ("bm25", ("g1",)), ("ts_rank_cd", None)):
            for _ in range(RUNS):
                answers[rank, principals] = await _leg(db, rank, principals)
        assert all(answers.values())  # the leg found chunks each time
        ids = [cid for cid, _ in answers["bm25", None]]
        for principals in (None, ("g1",)):
            for _ in range(RUNS):
                assert await repo.fetch_hits(db, ids, ReadScope(principals))
                rows, found = await repo.group_hits(db, ids, ReadScope(principals), documents=3, per_document=1)
                assert rows and found
        same_pid, after_leg = await _prepared(db)
        assert same_pid == pid  # one connection throughout
        assert after_leg == before

        async with db.connect() as conn:  # the connection still prepares its other statements
            for _ in range(RUNS):
                await conn.execute(text(CONTROL), {"q": "signal"})
        for _ in range(RUNS):  # the leg's main statement, even outside the guard
            assert await _rank_unguarded(db) == answers["bm25", None]
        _, after = await _prepared(db)
    added = after - before
    assert any("plainto_tsquery" in s for s in added)  # the connection prepares past the threshold
    assert not any("ce_bm25_terms" in s for s in added)

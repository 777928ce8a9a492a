"""The half-precision HNSW index (``storage.hnsw_halfvec``, migration 0026), on a real PostgreSQL.

On by default: migrating with it on swaps the float4 graph for one over ``embedding::halfvec`` and
migrating with it off swaps it back. With it on, the vector leg's index scans order by the same
expression (so the half-precision graph serves them) while the similarities it returns are float4.
"""

from __future__ import annotations

import numpy as np
import psycopg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine import TRUSTED, ContextEngine, ContextEngineConfig
from context_engine.retrieval import planner
from context_engine.retrieval.legs import vector_leg
from context_engine.retrieval.legs.vector import index_order
from context_engine.retrieval.planner import VectorPlan
from context_engine.storage.migrate import migrate
from context_engine.storage.predicates import ReadScope
from context_engine.storage.vectors import vector_literal
from tests.conftest import make_config
from tests.fakes.word_embedder import WordEmbedder
from tests.test_acl_planner import CROWD, oracle
from tests.test_acl_planner import insert_clustered as insert_rows

DIM = 32
HALF, FULL = "ix_ce_chunks_embedding_half", "ix_ce_chunks_embedding"
REVISION = "0026_hnsw_halfvec"
#: the tolerance: over the queries below, the half-precision graph's top 10 shares at least this share
#: of its ids with the float4 graph's (both at ef_search 100 over 1,224 rows); every similarity it
#: returns is the float4 one of that row to 1e-6
MIN_SHARED = 0.97


def vector_indexes(url: str) -> dict[str, str]:
    """Each HNSW index on ``ce_chunks`` and its definition (only valid ones)."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = 'ce_chunks'::regclass AND i.indisvalid AND pg_get_indexdef(i.indexrelid) LIKE '%hnsw%'"
        ).fetchall()
    return {str(name): str(definition) for name, definition in rows}


def recorded(url: str) -> bool:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM ce_schema_migrations WHERE id = %s", (REVISION,)).fetchone() == (1,)


def test_the_setting_is_on_by_default() -> None:
    assert ContextEngineConfig().storage.hnsw_halfvec is True


async def test_a_plain_migration_builds_the_half_precision_index(own_pool: AsyncEngine, database_url: str) -> None:
    report = await migrate(own_pool, dim=DIM)
    assert REVISION in report.applied and recorded(database_url)
    assert set(vector_indexes(database_url)) == {HALF}


async def test_migrating_without_the_setting_keeps_the_float4_index(own_pool: AsyncEngine, database_url: str) -> None:
    report = await migrate(own_pool, dim=DIM, halfvec=False)
    assert REVISION not in report.applied and not recorded(database_url)
    assert set(vector_indexes(database_url)) == {FULL}


async def test_migrating_with_and_without_the_setting_swaps_the_index(
    own_pool: AsyncEngine, database_url: str
) -> None:
    await migrate(own_pool, dim=DIM, halfvec=False)
    insert_rows(database_url, np.ones(DIM).tolist(), crowd=200, far=10)  # rows for the builds to read

    up = await migrate(own_pool, dim=DIM, halfvec=True)
    found = vector_indexes(database_url)
    assert up.applied == [REVISION] and HALF in up.indexes_built and recorded(database_url)
    assert set(found) == {HALF}
    assert f"(embedding)::halfvec({DIM})" in found[HALF] and "halfvec_cosine_ops" in found[HALF]
    again = await migrate(own_pool, dim=DIM, halfvec=True)
    assert again.applied == [] and again.undone == [] and set(vector_indexes(database_url)) == {HALF}

    down = await migrate(own_pool, dim=DIM, halfvec=False)
    found = vector_indexes(database_url)
    assert down.undone == [REVISION] and down.applied == [] and not recorded(database_url)
    assert set(found) == {FULL}
    assert "vector_cosine_ops" in found[FULL] and "m='24'" in found[FULL] and "ef_construction='200'" in found[FULL]

    back_up = await migrate(own_pool, dim=DIM, halfvec=True)
    assert back_up.applied == [REVISION] and set(vector_indexes(database_url)) == {HALF}


async def test_the_engine_migrates_to_the_configured_index(database_url: str) -> None:
    config = make_config(database_url, storage={"auto_migrate": True})
    async with ContextEngine(config, embedder=WordEmbedder(16)) as eng:
        await eng.stats(principals=TRUSTED)
        assert set(vector_indexes(database_url)) == {HALF}
    off = make_config(database_url, storage={"auto_migrate": True, "hnsw_halfvec": False})
    async with ContextEngine(off, embedder=WordEmbedder(16)) as eng:
        await eng.stats(principals=TRUSTED)
        assert set(vector_indexes(database_url)) == {FULL}
    async with ContextEngine(config, embedder=WordEmbedder(16)) as eng:
        await eng.stats(principals=TRUSTED)
        assert set(vector_indexes(database_url)) == {HALF}
        await eng.ingest(text="halfvec graphs hold half the bytes", name="a.txt", source_id="s", acl=["public"])
        found = await eng.search("half the bytes", top_k=1, principals=TRUSTED)
        assert [h.document_name for h in found.hits] == ["a.txt"]


async def ann_answers(db: AsyncEngine, queries: list[list[float]], *, halfvec: bool) -> list[list[tuple[int, float]]]:
    plan = VectorPlan(planner.ANN, None, settings=planner.index_settings(100, "off"), allow_fallback=False)
    return [await vector_leg(db, q, ReadScope(None), limit=10, plan=plan, halfvec=halfvec) for q in queries]


def uses_index(url: str, query: list[float], *, halfvec: bool) -> str:
    """The plan of the leg's forced index scan, as text."""
    order = index_order(query, halfvec=halfvec).replace(":qv", "%(qv)s")
    with psycopg.connect(url) as conn:
        for name, value in planner.index_settings(100, "off").items():
            conn.execute("SELECT set_config(%s, %s, true)", (name, value))
        rows = conn.execute(
            f"EXPLAIN SELECT c.id FROM ce_chunks c WHERE c.valid_to IS NULL AND c.embedding IS NOT NULL "
            f"ORDER BY {order} LIMIT 10",
            {"qv": vector_literal(query)},
        ).fetchall()
    return "\n".join(str(r[0]) for r in rows)


async def test_the_half_precision_index_gives_the_float4_top_k_within_the_tolerance(
    own_pool: AsyncEngine, database_url: str
) -> None:
    await migrate(own_pool, dim=DIM, halfvec=False)
    rng = np.random.default_rng(5)
    centre = rng.standard_normal(DIM)
    insert_rows(database_url, centre.tolist())  # 1,200 rows around the centre, 24 around its antipode
    queries = []
    for _ in range(30):
        q = centre / np.linalg.norm(centre) + 0.6 * rng.standard_normal(DIM) / np.sqrt(DIM)
        queries.append((q / np.linalg.norm(q)).tolist())

    assert f"Index Scan using {FULL} " in uses_index(database_url, queries[0], halfvec=False)
    full = await ann_answers(own_pool, queries, halfvec=False)
    await migrate(own_pool, dim=DIM, halfvec=True)
    shown = uses_index(database_url, queries[0], halfvec=True)
    assert f"Index Scan using {HALF} " in shown and "Sort" not in shown
    half = await ann_answers(own_pool, queries, halfvec=True)

    shared = sum(len({i for i, _ in h} & {i for i, _ in f}) for h, f in zip(half, full, strict=True))
    assert all(len(h) == 10 for h in half)
    assert shared / (10 * len(queries)) >= MIN_SHARED
    for query, answer in zip(queries, half, strict=True):
        assert [s for _, s in answer] == sorted((s for _, s in answer), reverse=True)  # sorted in float4
        truth = dict(await float4_similarities(own_pool, query, [i for i, _ in answer]))
        assert all(abs(s - truth[i]) < 1e-6 for i, s in answer)
    # the exact scan (the ground truth) never takes the index: the caller's rows, scored in float4
    scope, exact = ReadScope((CROWD,)), VectorPlan(planner.EXACT, None)
    for query in queries[:5]:
        answer = await vector_leg(own_pool, query, scope, limit=10, plan=exact, halfvec=True)
        assert [i for i, _ in answer] == await oracle(own_pool, query, scope, 10)


async def float4_similarities(own_pool: AsyncEngine, query: list[float], ids: list[int]) -> list[tuple[int, float]]:
    async with own_pool.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT id, 1 - (embedding <=> CAST(:qv AS vector)) FROM ce_chunks "
                "WHERE id = ANY(CAST(:ids AS bigint[]))"
            ),
            {"qv": vector_literal(query), "ids": ids},
        )
        return [(int(r[0]), float(r[1])) for r in rows]

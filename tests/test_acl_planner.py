"""The vector leg's exact-or-approximate planner, on a real PostgreSQL.

The corpus these tests build is the failure the planner exists for, at small scale: most rows sit
around the query, and one caller's slice is a small cluster on the far side of the space. An HNSW
walk toward the query spends its whole ``ef_search`` budget on rows that caller may not see, so a
forced-index post-filter comes back short; the engine must still return exactly what an exact
search over that caller's rows returns.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np
import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from context_engine import TRUSTED, ContextEngine
from context_engine.retrieval import planner
from context_engine.retrieval.legs import vector_leg
from context_engine.retrieval.legs.vector import index_order
from context_engine.retrieval.planner import VectorPlan, plan_vector
from context_engine.revisions.handles import chunks_for_db
from context_engine.storage import layout
from context_engine.storage.migrate import _split, citus_files, migrations_dir
from context_engine.storage.predicates import ReadScope
from context_engine.storage.vectors import vector_literal
from tests.conftest import make_config
from tests.hnsw_rebuild import hnsw_built_after

QUERY = "quarterly revenue forecast for the northern region"
CROWD, FAR = "group:crowd", "group:far"
VECTOR_ONLY = {"weights": {"fts": 0, "trigram": 0, "vector": 1}}
MIGRATION = next(migrations_dir().glob("0004_*.sql"))
SUMS_MIGRATION = next(migrations_dir().glob("0007_*.sql"))
#: summed per key: a distributed (Citus) schema keeps one row per key and shard
_KEPT_SUMS = (
    "SELECT source_id, kind, principal, sum(embedding_sum)::text FROM ce_vector_counts "
    "GROUP BY 1, 2, 3 HAVING sum(chunks) <> 0"
)
_RECOUNTED_SUMS = (
    "SELECT c.source_id, k.kind, k.principal, sum(c.embedding)::text FROM ce_chunks c "
    "CROSS JOIN LATERAL ce_vector_count_keys(c.acl) k WHERE c.valid_to IS NULL AND c.embedding IS NOT NULL "
    "GROUP BY 1, 2, 3"
)


def _sums(rows: Sequence[Sequence[object]]) -> dict[tuple[str, str, str], np.ndarray]:
    return {(str(r[0]), str(r[1]), str(r[2])): np.array(json.loads(str(r[3]))) for r in rows}


def insert_clustered(url: str, centre: Sequence[float], *, crowd: int = 1200, far: int = 24, seed: int = 0) -> None:
    """``crowd`` rows around ``centre`` under ``group:crowd`` and ``far`` rows around its antipode
    under ``group:far``, as two documents of source ``test``, written straight to the tables (the HNSW
    index rebuilt over them, the same definition)."""
    rng = np.random.default_rng(seed)
    c = np.asarray(centre, dtype=np.float64)
    c /= np.linalg.norm(c)

    def around(point: np.ndarray, n: int) -> np.ndarray:
        noise = rng.standard_normal((n, len(point)))
        noise /= np.linalg.norm(noise, axis=1, keepdims=True)
        rows = point + 0.8 * noise
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    with psycopg.connect(url, autocommit=True) as conn:
        with hnsw_built_after(conn):  # 1,224 index inserts one by one took about 7 s
            for acl, vectors in ((CROWD, around(c, crowd)), (FAR, around(-c, far))):
                doc = str(uuid.uuid4())
                conn.execute(
                    "INSERT INTO ce_documents (id, source_id, name, mime, acl, status, chunk_count, version, "
                    "created_revision, updated_revision) "
                    "VALUES (%s, 'test', %s, 'text/plain', %s, 'completed', %s, 1, 1, 1)",
                    (doc, f"{acl}.txt", [acl], len(vectors)),
                )
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO ce_chunks (document_id, version, position, source_id, acl, text, text_hash, tsv, "
                        "embedding, valid_from) VALUES (%s, 1, %s, 'test', %s, %s, %s, ''::tsvector, %s::vector, 1)",
                        [
                            (doc, i, [acl], f"{acl} chunk {i}", f"h{i}", vector_literal(v.tolist()))
                            for i, v in enumerate(vectors)
                        ],
                    )
        conn.execute("ANALYZE ce_chunks")


async def oracle(db: AsyncEngine, vector: Sequence[float], scope: ReadScope, k: int) -> list[int]:
    """Exact top k over the caller's eligible rows, every row scored in Postgres."""
    params = {"qv": vector_literal(vector), "k": k}
    sql = (
        "SELECT c.id FROM ce_chunks c WHERE c.valid_to IS NULL AND c.embedding IS NOT NULL "
        f"AND {scope.predicate('c', params)} ORDER BY (c.embedding <=> CAST(:qv AS vector)) + 0, c.id LIMIT :k"
    )
    async with db.connect() as conn:
        return [int(r[0]) for r in (await conn.execute(text(sql), params)).all()]


async def direct_count(db: AsyncEngine, scope: ReadScope) -> int:
    params: dict[str, object] = {}
    sql = (
        "SELECT count(*) FROM ce_chunks c WHERE c.valid_to IS NULL AND c.embedding IS NOT NULL "
        f"AND {scope.predicate('c', params)}"
    )
    async with db.connect() as conn:
        return int(await conn.scalar(text(sql), params) or 0)


@pytest.fixture
async def clustered(database_url: str) -> AsyncIterator[tuple[ContextEngine, list[float]]]:
    """A vector-only engine over the clustered corpus, and the embedding of ``QUERY``."""
    async with ContextEngine(make_config(database_url, fusion=VECTOR_ONLY)) as eng:
        await eng.stats(principals=TRUSTED)  # migrates
        vector = (await eng.embedder.embed([QUERY], kind="query"))[0]
        insert_clustered(database_url, vector)
        yield eng, vector


async def far_rows_share_a_shard(db: AsyncEngine) -> bool:
    """Whether an index walk over the caller's rows also crosses the crowd's: always on one node; on a
    Citus coordinator (each shard holds its own HNSW index and answers its own top k) only when the
    two documents of :func:`insert_clustered` hash to the same shard."""
    async with db.connect() as conn:
        if not await layout.distributed(conn):
            return True
        shards = await conn.scalar(
            text(
                "SELECT count(DISTINCT get_shard_id_for_distribution_column('ce_chunks', d.id)) "
                "FROM ce_documents d WHERE d.source_id = 'test'"
            )
        )
    return shards == 1


async def stored_ids(eng: ContextEngine, hits: Sequence[Any]) -> list[int | None]:
    """The stored ids of a non-trusted caller's hits (it is told chunk ids as handles)."""
    keys = await chunks_for_db(await eng.database())
    return [keys.decode(h.chunk_id) for h in hits]


async def test_engine_returns_the_oracle_rows_where_a_post_filter_comes_back_short(
    clustered: tuple[ContextEngine, list[float]], own_pool: AsyncEngine
) -> None:
    eng, vector = clustered
    scope = ReadScope((FAR,))
    bare = VectorPlan(planner.ANN, None, settings=planner.index_settings(40, "off"), allow_fallback=False)
    post_filtered = await vector_leg(own_pool, vector, scope, limit=10, plan=bare)
    truth = await oracle(own_pool, vector, scope, 10)
    assert len(truth) == 10
    if await far_rows_share_a_shard(own_pool):
        assert len(post_filtered) < 10  # the failure: the index walk never reaches the caller's rows
    else:  # a shard holding only the caller's rows walks its own index over them: not short
        assert len(post_filtered) == 10 and {cid for cid, _ in post_filtered} <= set(
            await oracle(own_pool, vector, scope, 24)
        )
    result = await eng.search(QUERY, principals=[FAR], top_k=10, explain=True)
    assert await stored_ids(eng, result.hits) == truth
    assert all(h.document_name == f"{FAR}.txt" for h in result.hits)
    plan = result.usage["vector_plan"]
    assert plan["plan"] == "exact" and plan["eligible_rows"] == 24 and plan["estimate"] == "counts"
    assert plan["fallback"] is False and plan["threshold"] == eng.config.storage.ann_exact_threshold


async def test_above_the_threshold_the_forced_iterative_index_scan_still_returns_the_oracle_rows(
    database_url: str, clustered: tuple[ContextEngine, list[float]], own_pool: AsyncEngine
) -> None:
    _, vector = clustered
    storage = {"auto_migrate": True, "ann_exact_threshold": 5}
    # a 2% slice is too thin for a probe of 50 candidates: recall first scans it exactly
    async with ContextEngine(make_config(database_url, fusion=VECTOR_ONLY, storage=storage)) as eng:
        result = await eng.search(QUERY, principals=[FAR], top_k=10, explain=True)
    assert result.usage["vector_plan"]["plan"] == "exact"
    assert await stored_ids(eng, result.hits) == await oracle(own_pool, vector, ReadScope((FAR,)), 10)
    # latency first: the iterative index scan, its budget raised above pgvector's default of 20,000 tuples
    config = make_config(database_url, fusion=VECTOR_ONLY, storage=storage | {"ann_priority": "latency"})
    async with ContextEngine(config) as eng:
        result = await eng.search(QUERY, principals=[FAR], top_k=10, explain=True)
    plan = result.usage["vector_plan"]
    assert plan["plan"] == "ann" and plan["eligible_rows"] == 24
    assert plan["ef_search"] == planner.SPREAD_EF_SEARCH and plan["max_scan_tuples"] >= planner.DEFAULT_MAX_SCAN_TUPLES
    assert await stored_ids(eng, result.hits) == await oracle(own_pool, vector, ReadScope((FAR,)), 10)


async def test_a_short_index_answer_falls_back_to_the_exact_scan(
    clustered: tuple[ContextEngine, list[float]], own_pool: AsyncEngine
) -> None:
    _, vector = clustered
    scope = ReadScope((FAR,))
    # the index alone (no iterative scan) comes back short; the estimate says 24 rows exist
    plan = VectorPlan(planner.ANN, 24, settings=planner.index_settings(40, "off"))
    found = await vector_leg(own_pool, vector, scope, limit=10, plan=plan)
    # short only where the walk crosses the crowd's rows (see far_rows_share_a_shard): only then a fallback
    assert plan.fallback is await far_rows_share_a_shard(own_pool)
    assert [cid for cid, _ in found] == await oracle(own_pool, vector, scope, 10)


async def test_each_plan_is_forced_whatever_postgres_would_choose(
    clustered: tuple[ContextEngine, list[float]], own_pool: AsyncEngine
) -> None:
    _, vector = clustered
    params: dict[str, object] = {"qv": vector_literal(vector)}
    where = f"c.valid_to IS NULL AND c.embedding IS NOT NULL AND {ReadScope((FAR,)).predicate('c', params)}"
    distance = index_order(vector, halfvec=True)  # the default index's ordering
    ann = f"EXPLAIN SELECT c.id FROM ce_chunks c WHERE {where} ORDER BY {distance} LIMIT 10"
    exact = f"EXPLAIN SELECT c.id FROM ce_chunks c WHERE {where} ORDER BY ({distance}) + 0 LIMIT 10"
    async with own_pool.begin() as conn:
        distributed = await layout.distributed(conn)
        for name, value in planner.index_settings(40, "relaxed_order").items():
            if distributed:  # the shards plan the scan: only SET LOCAL reaches them, as the engine sends it
                quoted = "'" + value.replace("'", "''") + "'"
                await conn.exec_driver_sql(f"SET LOCAL {name} = {quoted}")
            else:
                await conn.execute(text("SELECT set_config(:n, :v, true)"), {"n": name, "v": value})
        shown = await _explain(conn, ann, params, distributed)
        assert "ix_ce_chunks_embedding" in shown  # a 2% slice, still the index: the choice is ours
        shown = await _explain(conn, exact, params, distributed)
        assert "ix_ce_chunks_embedding" not in shown  # no setting lets the index serve the exact ordering


async def _explain(conn: AsyncConnection, statement: str, params: dict[str, object], distributed: bool) -> str:
    """The plan's text. A Citus coordinator shows a shard's plan only for a statement without bound
    parameters, so there the values are bound on the client (psycopg's client-side cursor)."""
    if not distributed:
        return "\n".join(r[0] for r in (await conn.execute(text(statement), params)).all())
    compiled = text(statement).compile(dialect=conn.dialect)
    raw = (await conn.get_raw_connection()).driver_connection
    assert raw is not None
    async with psycopg.AsyncClientCursor(raw) as cur:
        await cur.execute(compiled.string, compiled.construct_params(params))
        return "\n".join(r[0] for r in await cur.fetchall())


async def test_counts_follow_every_write_and_bound_the_estimate(engine: ContextEngine, own_pool: AsyncEngine) -> None:
    words = " ".join(f"word{i} about budgets and planning" for i in range(300))
    a = (await engine.ingest(text=words, name="a.md", acl=["group:a"], source_id="s1")).documents[0]
    b = (await engine.ingest(text="beta notes", name="b.md", acl=["group:a", "group:b"], source_id="s2")).documents[0]
    await engine.ingest(text="gamma notes for everyone", name="c.md", source_id="s1")
    assert a.chunks > 1

    async def check() -> None:
        callers: list[tuple[str, ...] | None] = [(), ("group:a",), ("group:b",), ("group:a", "group:b"), None]
        for principals in callers:
            for sources in (None, ["s1"], ["s2"], ["s1", "s2"]):
                scope = ReadScope(principals, sources)
                async with own_pool.connect() as conn:
                    estimate, total, unfiltered = await planner.count_estimate(conn, scope)
                true = await direct_count(own_pool, scope)
                assert total == await direct_count(own_pool, ReadScope(None))
                # some rows carry an ACL, so only a trusted caller whose sources hold every row is unfiltered
                trusted_whole = principals is None and await direct_count(own_pool, ReadScope(None, sources)) == total
                assert unfiltered == trusted_whole
                if principals is None or len(principals) <= 1:
                    assert estimate == true, (principals, sources)
                else:  # a row carrying both principals is counted under each: an upper bound
                    assert true <= estimate <= await direct_count(own_pool, ReadScope(None, sources))
        # migration 0007's vector sums follow the same writes (to float rounding)
        async with own_pool.connect() as conn:
            kept = _sums((await conn.execute(text(_KEPT_SUMS))).all())
            recounted = _sums((await conn.execute(text(_RECOUNTED_SUMS))).all())
        assert kept.keys() == recounted.keys()
        for key, value in recounted.items():
            assert np.allclose(kept[key], value, atol=1e-4), key

    await check()
    await engine.update_document(a.document_id, acl=["group:b"], principals=TRUSTED)
    await check()
    await engine.ingest(text="a shorter second version", name="a.md", acl=["group:b"], source_id="s1")
    await check()
    await engine.delete_document(b.document_id, principals=TRUSTED)
    await check()

    # re-running migrations 0004 and 0007 recounts from the rows, and agrees with what the triggers kept
    # (on a Citus coordinator: the overlay's recount into each shard's counts, its last statement)
    counts = (
        "SELECT source_id, kind, principal, sum(chunks) FROM ce_vector_counts GROUP BY 1, 2, 3 "
        "HAVING sum(chunks) <> 0 ORDER BY 1, 2, 3"
    )
    async with own_pool.begin() as conn:
        before = (await conn.execute(text(counts))).all()
        before_sums = _sums((await conn.execute(text(_KEPT_SUMS))).all())
        if await layout.distributed(conn):
            await conn.execute(text("DELETE FROM ce_vector_counts"))
            overlay = citus_files()[0].read_text(encoding="utf-8").replace("{dim}", "384")
            recounts = [_split(overlay)[-1]]
        else:
            await conn.execute(text("UPDATE ce_vector_counts SET chunks = 0, embedding_sum = NULL"))
            recounts = [
                statement
                for path in (MIGRATION, SUMS_MIGRATION)
                for statement in _split(path.read_text(encoding="utf-8").replace("{dim}", "384"))
            ]
        for statement in recounts:
            await conn.exec_driver_sql(statement)
        after = (await conn.execute(text(counts))).all()
        after_sums = _sums((await conn.execute(text(_KEPT_SUMS))).all())
    assert after == before
    assert after_sums.keys() == before_sums.keys()
    assert all(np.allclose(after_sums[k], before_sums[k], atol=1e-4) for k in after_sums)
    await check()


async def test_small_corpora_and_pins(engine: ContextEngine, own_pool: AsyncEngine) -> None:
    doc = (await engine.ingest(text="planner notes " * 20, name="p.md", acl=["group:a"])).documents[0]
    result = await engine.search("planner notes", principals=TRUSTED)
    # a trusted caller over a corpus smaller than the threshold scans exactly as well
    assert result.usage["vector_plan"]["plan"] == "exact"
    assert result.usage["vector_plan"]["eligible_rows"] == await direct_count(own_pool, ReadScope(None))

    # a trusted caller filters nothing: from unfiltered_min_rows rows it uses the index
    trusted = await plan_vector(own_pool, ReadScope(None), threshold=10_000, unfiltered_min_rows=1)
    assert trusted.plan == "ann" and trusted.unfiltered and trusted.usage()["unfiltered"] is True
    few = await plan_vector(own_pool, ReadScope(None), threshold=10_000, unfiltered_min_rows=trusted.eligible + 1)
    assert few.plan == "exact" and few.unfiltered
    scoped = await plan_vector(own_pool, ReadScope(("group:a",)), threshold=10_000, unfiltered_min_rows=1)
    assert scoped.plan == "exact" and not scoped.unfiltered
    pinned = ReadScope(None, document_ids=[doc.document_id])
    pin = await plan_vector(own_pool, pinned, threshold=10_000, unfiltered_min_rows=1)
    assert pin.plan == "exact" and not pin.unfiltered

    everyone = await plan_vector(own_pool, ReadScope(("group:a",)), threshold=0)
    assert everyone.plan == "probe" and everyone.method == "counts"
    pinned = await plan_vector(own_pool, ReadScope(("group:a",), document_ids=[doc.document_id]), threshold=0)
    assert pinned.method == "capped_count" and pinned.eligible == 1  # counted: capped at threshold + 1
    nobody = await plan_vector(own_pool, ReadScope(("group:nobody",)), threshold=0)
    assert nobody.plan == "exact" and nobody.eligible == 0

    async with own_pool.begin() as conn:  # a schema from before migration 0004
        await conn.execute(text("DROP TABLE ce_vector_counts CASCADE"))
    older = await plan_vector(own_pool, ReadScope(("group:a",)), threshold=100)
    assert older.method == "capped_count" and older.plan == "exact"
    assert older.eligible == await direct_count(own_pool, ReadScope(("group:a",)))


def test_the_iterative_budget_grows_as_the_slice_shrinks() -> None:
    unfiltered = VectorPlan(planner.ANN, 1_000_000, total=1_000_000, unfiltered=True)
    planner.ann_settings(unfiltered, 10)
    assert unfiltered.ef_search == planner.UNFILTERED_EF_SEARCH  # the index's recall is the answer's
    assert unfiltered.max_scan_tuples == planner.DEFAULT_MAX_SCAN_TUPLES
    broad = VectorPlan(planner.ANN, 500_000, total=1_000_000)
    planner.ann_settings(broad, 10)
    assert (broad.ef_search, broad.max_scan_tuples) == (200, planner.DEFAULT_MAX_SCAN_TUPLES)
    narrow = VectorPlan(planner.ANN, 1_000, total=1_000_000)
    settings = planner.ann_settings(narrow, 50)
    assert narrow.ef_search == 200 and narrow.max_scan_tuples == planner.SCAN_HEADROOM * 200 * 1000
    assert settings["hnsw.iterative_scan"] == "relaxed_order" and settings["enable_seqscan"] == "off"
    tiny = VectorPlan(planner.ANN, 10, total=10_000_000)
    planner.ann_settings(tiny, 400)
    assert tiny.ef_search == 800 and tiny.max_scan_tuples == planner.MAX_SCAN_TUPLES_CAP


def test_an_unfiltered_search_list_grows_with_the_index() -> None:
    """Small indexes keep their recall at a short list; it lengthens geometrically up to a million rows."""
    sizes = [1_000, 12_921, 20_000, 50_000, 200_000, 999_999, 1_000_000, 50_000_000]
    lists = [planner.unfiltered_ef_search(n) for n in sizes]
    assert lists[:3] == [planner.UNFILTERED_SMALL_EF_SEARCH] * 3
    assert lists[-2:] == [planner.UNFILTERED_EF_SEARCH] * 2
    assert lists == sorted(lists) and planner.UNFILTERED_SMALL_EF_SEARCH < lists[4] < planner.UNFILTERED_EF_SEARCH
    assert planner.unfiltered_ef_search(None) == planner.UNFILTERED_EF_SEARCH  # unknown size: the large list
    small = VectorPlan(planner.ANN, 12_921, total=12_921, unfiltered=True)
    planner.ann_settings(small, 50)
    assert small.ef_search == planner.UNFILTERED_SMALL_EF_SEARCH
    planner.ann_settings(small, 200)  # never shorter than the rows asked for
    assert small.ef_search == 200


async def test_a_spread_slice_uses_the_index_and_a_regional_one_scans_exactly(
    database_url: str, own_pool: AsyncEngine
) -> None:
    """Two regions of 300 rows each; one caller sees every 6th row of both (spread like the corpus),
    another sees 100 rows of one region. Same size, same share: only the centroid tells them apart."""
    async with ContextEngine(make_config(database_url, fusion=VECTOR_ONLY)) as eng:
        await eng.stats(principals=TRUSTED)  # migrates
        rng = np.random.default_rng(3)
        a, b = np.eye(384)[0], np.eye(384)[1]
        rows = []
        for i in range(600):
            noise = rng.standard_normal(384)
            v = (a if i < 300 else b) + 0.8 * noise / np.linalg.norm(noise)
            acl = ["group:spread"] if i % 6 == 0 else ["group:region"] if i < 300 and i % 3 == 1 else ["group:none"]
            rows.append((acl, v / np.linalg.norm(v)))
        with psycopg.connect(database_url, autocommit=True) as conn:
            doc = str(uuid.uuid4())
            conn.execute(
                "INSERT INTO ce_documents (id, source_id, name, mime, acl, status, chunk_count, version, "
                "created_revision, updated_revision) VALUES (%s, 'test', 'r.txt', 'text/plain', %s, 'completed', "
                "600, 1, 1, 1)",
                (doc, []),
            )
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO ce_chunks (document_id, version, position, source_id, acl, text, text_hash, tsv, "
                    "embedding, valid_from) VALUES (%s, 1, %s, 'test', %s, 'x', %s, ''::tsvector, %s::vector, 1)",
                    [(doc, i, acl, f"h{i}", vector_literal(v.tolist())) for i, (acl, v) in enumerate(rows)],
                )
        band = {"threshold": 10_000, "spread_min_share": 0.05, "spread_min_rows": 50}
        spread = await plan_vector(own_pool, ReadScope(("group:spread",)), **band)
        region = await plan_vector(own_pool, ReadScope(("group:region",)), **band)
        assert spread.eligible == region.eligible == 100
        assert spread.concentration is not None and spread.concentration <= planner.SPREAD_MAX_CONCENTRATION
        assert region.concentration is not None and region.concentration > 1.3
        assert (spread.plan, region.plan) == ("probe", "exact")
        assert spread.usage()["concentration"] == round(spread.concentration, 3)
        # the index answers the spread caller with the exact oracle's rows
        query = (a + b) / np.linalg.norm(a + b)
        found = await vector_leg(own_pool, query.tolist(), ReadScope(("group:spread",)), limit=10, plan=spread)
        assert [cid for cid, _ in found] == await oracle(own_pool, query.tolist(), ReadScope(("group:spread",)), 10)
        # below the share, or with the band turned off, the threshold alone decides
        spread = ReadScope(("group:spread",))
        assert (await plan_vector(own_pool, spread, **{**band, "spread_min_share": 0.5})).plan == "exact"
        assert (await plan_vector(own_pool, spread, **{**band, "spread_min_share": None})).plan == "exact"
        assert (await plan_vector(own_pool, ReadScope(None), **band)).concentration is None

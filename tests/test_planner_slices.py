"""The vector planner on the slice shapes that fooled its earlier rules, at 20,000 rows.

Two shapes are pinned here, against an exact ground truth computed in numpy:

* a *clustered* quarter of the index (five of twenty topics), above the exact threshold: the earlier
  planner sent it to the iterative index scan, which answers queries outside those topics with the
  wrong rows (recall@10 0.49-0.60 at 100,000 rows);
* a *scattered* slice (many small regions spread over every topic): its centroid is the corpus's,
  so the earlier spread rule took it for a random slice and sent it to the index (recall 0.84).

Both must now go to the probe plan, whose answer is proven exact or replaced by the exact scan.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from context_engine.retrieval import planner
from context_engine.retrieval.legs import vector_leg
from context_engine.retrieval.legs.vector import plan_for
from context_engine.storage.database import to_driver_url
from context_engine.storage.migrate import migrate
from context_engine.storage.predicates import ReadScope
from tests.conftest import make_config
from tests.hnsw_rebuild import hnsw_built_after

ROWS, DIM, TOPICS, CLUSTERS, PIECES = 20_000, 128, 20, 200, 10
QUERIES, K = 24, 10
#: the threshold scaled to this corpus as 20,000 is to 100,000 rows: a quarter of the index is above it
THRESHOLD = 4_000

#: the corpus: vectors, each row's ACL, the queries
Slices = tuple[np.ndarray, list[list[str]], np.ndarray]


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def corpus(seed: int = 11) -> Slices:
    """Rows ``shared + topic + cluster + noise`` (the benchmark's recipe), their ACLs, and queries.

    ``clustered`` is the first five topics. ``scattered:<g>`` cuts every cluster into ``PIECES`` slabs
    along a random direction and deals the shuffled slabs into ten groups: each group is 10% of the
    rows, made of 200 small regions.
    """
    rng = np.random.default_rng(seed)
    shared = unit(rng.standard_normal((1, DIM)))
    topic_dir = unit(rng.standard_normal((TOPICS, DIM)))
    cluster_dir = unit(rng.standard_normal((CLUSTERS, DIM)))
    topic_of = np.repeat(np.arange(TOPICS), CLUSTERS // TOPICS)
    centre = 0.34 * shared + 0.5 * topic_dir[topic_of] + 0.42 * cluster_dir
    cluster = np.repeat(np.arange(CLUSTERS), ROWS // CLUSTERS)
    vectors = unit(centre[cluster] + 0.69 * unit(rng.standard_normal((ROWS, DIM))))
    queries = unit(centre[rng.integers(0, CLUSTERS, QUERIES)] + 0.69 * unit(rng.standard_normal((QUERIES, DIM))))
    along = np.einsum("ij,ij->i", vectors, rng.standard_normal((CLUSTERS, DIM))[cluster])
    slab = np.empty(ROWS, dtype=np.int64)
    for c in range(CLUSTERS):
        members = np.flatnonzero(cluster == c)
        slab[members] = np.argsort(np.argsort(along[members])) * PIECES // len(members)
    deal = rng.permutation(CLUSTERS * PIECES) % 10
    scattered = deal[cluster * PIECES + slab]
    acls = [([f"scattered:{scattered[i]}"] + (["clustered"] if topic_of[cluster[i]] < 5 else [])) for i in range(ROWS)]
    return vectors, acls, queries


def load(url: str, vectors: np.ndarray, acls: list[list[str]]) -> None:
    """Rows straight into ``ce_chunks`` with one COPY and one set-based INSERT (so the counting
    triggers run once), the HNSW index dropped first and built after, as a bulk load does."""
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector(conn)
        conn.execute(f"CREATE TEMP TABLE staged (id int4, acl text[], embedding vector({DIM}))")
        # binary: the float32 arrays go as they are, not formatted and parsed as text
        with conn.cursor().copy("COPY staged (id, acl, embedding) FROM STDIN WITH (FORMAT BINARY)") as copy:
            copy.set_types(["int4", "text[]", "vector"])
            for i, (vector, acl) in enumerate(zip(vectors, acls, strict=True)):
                copy.write_row((i + 1, acl, vector))
        with hnsw_built_after(conn):
            conn.execute(
                "INSERT INTO ce_chunks (id, document_id, version, position, source_id, acl, text, text_hash, tsv, "
                "embedding, valid_from) SELECT id, md5(id::text)::uuid, 1, 0, 'slices', acl, '', '', ''::tsvector, "
                "embedding, 1 FROM staged ORDER BY id"
            )
        conn.execute("ANALYZE ce_chunks")


def truth(vectors: np.ndarray, acls: list[list[str]], principal: str, query: np.ndarray) -> set[int]:
    """The exact top k of the caller's rows (ids are positions + 1), by cosine in numpy."""
    mine = np.array([principal in acl for acl in acls])
    sims = np.where(mine, vectors @ query, -np.inf)
    return {int(i) + 1 for i in np.argsort(-sims, kind="stable")[:K]}


@pytest.fixture(scope="module")
def slices() -> Slices:
    return corpus()


@pytest.fixture(scope="module")
def slices_url(pg_base_url: str, slices: Slices) -> Iterator[str]:
    """One database holding the corpus for every test here (loading and indexing it is the slow part)."""
    name = f"t_slices_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_base_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    head, _, query = pg_base_url.partition("?")
    url = f"{head.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")
    try:
        asyncio.run(create_schema(url))
        load(url, slices[0], slices[1])
        yield url
    finally:
        with psycopg.connect(pg_base_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def create_schema(url: str) -> None:
    db = create_async_engine(to_driver_url(url))
    try:
        await migrate(db, dim=DIM)
    finally:
        await db.dispose()


@pytest.fixture
async def sql(slices_url: str) -> AsyncIterator[AsyncEngine]:
    db = create_async_engine(to_driver_url(slices_url), pool_size=2)
    try:
        yield db
    finally:
        await db.dispose()


async def recall_under_planner(
    db: AsyncEngine, url: str, slices: Slices, principal: str, threshold: int
) -> tuple[set[str], float, int, int]:
    """``(plans chosen, mean recall@K, short answers, probes that fell back)`` over every query."""
    vectors, acls, queries = slices
    config = make_config(url, storage={"ann_exact_threshold": threshold})
    plans: set[str] = set()
    recalls: list[float] = []
    short = fallbacks = 0
    for query in queries:
        plan = await plan_for(db, ReadScope((principal,)), config, limit=K)
        plans.add(plan.plan)
        found = await vector_leg(db, query.tolist(), ReadScope((principal,)), limit=K, plan=plan)
        ids = {cid for cid, _ in found}
        recalls.append(len(ids & truth(vectors, acls, principal, query)) / K)
        short += len(found) < K
        fallbacks += plan.fallback
    return plans, float(np.mean(recalls)), short, fallbacks


async def test_a_clustered_quarter_above_the_threshold_is_probed_and_keeps_its_recall(
    sql: AsyncEngine, slices_url: str, slices: Slices
) -> None:
    async with sql.connect() as conn:
        eligible, total, _ = await planner.count_estimate(conn, ReadScope(("clustered",)))
    assert (eligible, total) == (ROWS // 4, ROWS) and eligible > THRESHOLD
    plans, recall, short, fallbacks = await recall_under_planner(sql, slices_url, slices, "clustered", THRESHOLD)
    assert plans == {planner.PROBE}  # not the iterative index scan the threshold used to pick
    assert recall >= 0.99 and short == 0
    # queries drawn from the other fifteen topics find none of the caller's rows near them: the probe
    # proves nothing there and the exact scan answers, which is what holds the recall
    assert 0 < fallbacks < QUERIES


async def test_a_scattered_slice_is_probed_and_keeps_its_recall(
    sql: AsyncEngine, slices_url: str, slices: Slices
) -> None:
    scope = ReadScope(("scattered:3",))
    config = make_config(slices_url)
    plan = await plan_for(sql, scope, config, limit=K)
    # its centroid is the corpus's: the earlier spread rule sent this slice to the iterative index scan
    assert plan.concentration is not None and plan.concentration <= planner.SPREAD_MAX_CONCENTRATION
    assert plan.eligible == ROWS // 10
    threshold = config.storage.ann_exact_threshold
    plans, recall, short, _ = await recall_under_planner(sql, slices_url, slices, "scattered:3", threshold)
    assert plans == {planner.PROBE}
    assert recall >= 0.99 and short == 0

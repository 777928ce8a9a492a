"""Checks of the distributed schema, run by ``make test-citus`` only (against a Citus coordinator).

The name does not match ``test_*.py`` on purpose: ``make test`` runs on one PostgreSQL, where none of
this exists; ``benchmarks/citus/suite.py`` names this file explicitly. Each check writes through the
engine (ingest, ACL change, new version, delete, concurrent writers) and compares what the cluster
keeps across shards with a recount from the chunk rows themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
from psycopg import sql as pgsql

from context_engine import TRUSTED, ContextEngine
from context_engine.retrieval import planner
from context_engine.retrieval.legs.vector import index_order
from context_engine.revisions.errors import IdempotencyKeyReused
from tests.conftest import make_config
from tests.test_acl_leak_property import WORDS, WordEmbedder
from tests.test_conformance import fresh_database

CO_LOCATED = (
    "ce_documents",
    "ce_document_versions",
    "ce_chunks",
    "ce_document_fields",
    "ce_embedding_batches",
    "ce_bm25_postings",
)
REFERENCE = (
    "ce_meta",
    "ce_store_revision",
    "ce_bm25_groups",
    "ce_bm25_terms",
    "ce_idempotency_keys",
    "ce_tools",
    "ce_mcp_oauth",
)
GROUPS = ((), ("g1",), ("g2",), ("g1", "g2"))


@pytest.fixture
async def cluster_engine(pg_base_url: str) -> AsyncIterator[tuple[ContextEngine, str]]:
    with fresh_database(pg_base_url) as url:
        async with ContextEngine(make_config(url), embedder=WordEmbedder()) as engine:
            yield engine, url


def _rows(url: str, sql: str) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql).fetchall()


async def _corpus(engine: ContextEngine, documents: int = 40) -> list[str]:
    """Documents over two sources and every ACL group, enough to land on every shard."""
    ids = []
    for n in range(documents):
        words = " ".join(WORDS[(n + k) % len(WORDS)] for k in range(1 + n % 4))
        report = await engine.ingest(
            text=f"zebra {words} item{n}",
            name=f"doc{n}.md",
            source_id=f"src{n % 2}",
            acl=list(GROUPS[n % len(GROUPS)]),
        )
        ids.append(str(report.documents[0].document_id))
    return ids


async def test_the_schema_is_distributed_by_document(cluster_engine: tuple[ContextEngine, str]) -> None:
    engine, url = cluster_engine
    await engine.stats(principals=TRUSTED)  # the engine migrated its database on first use
    tables = dict(_rows(url, "SELECT logicalrelid::text, partmethod FROM pg_dist_partition"))
    assert {t: tables.get(t) for t in CO_LOCATED} == dict.fromkeys(CO_LOCATED, "h")
    assert {t: tables.get(t) for t in REFERENCE} == dict.fromkeys(REFERENCE, "n")
    keys = dict(
        _rows(
            url,
            "SELECT logicalrelid::text, column_to_column_name(logicalrelid, partkey) FROM pg_dist_partition "
            "WHERE partmethod = 'h'",
        )
    )
    assert keys["ce_documents"] == "id"
    assert {keys[t] for t in CO_LOCATED[1:]} == {"document_id"}
    assert keys["ce_vector_counts"] == "shard_key"
    groups = _rows(
        url,
        "SELECT count(DISTINCT colocationid) FROM pg_dist_partition WHERE logicalrelid::text = ANY(ARRAY["
        + ", ".join(f"'{t}'" for t in (*CO_LOCATED, "ce_vector_counts"))
        + "])",
    )
    assert groups == [(1,)]
    workers = _rows(url, "SELECT count(DISTINCT nodeport) FROM citus_shards WHERE table_name = 'ce_chunks'::regclass")
    assert workers == [(2,)]


async def test_every_chunk_shard_holds_the_search_indexes(cluster_engine: tuple[ContextEngine, str]) -> None:
    engine, url = cluster_engine
    await engine.stats(principals=TRUSTED)
    per_shard = _rows(
        url,
        "SELECT result FROM run_command_on_shards('ce_chunks', $$SELECT concat_ws(',', "
        "count(*) FILTER (WHERE indexdef ~ 'USING hnsw .+halfvec_cosine_ops'), "  # the default index (0026)
        "count(*) FILTER (WHERE indexdef ~ 'USING gin .tsv.'), count(*) FILTER (WHERE indexdef ~ 'USING gin .acl.')) "
        "FROM pg_indexes WHERE tablename = '%s'$$)",
    )
    shards = _rows(url, "SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'ce_chunks'::regclass")[0][0]
    assert len(per_shard) == shards > 1
    assert {r[0] for r in per_shard} == {"1,1,1"}


def _counts_now(url: str) -> tuple[list[tuple], list[tuple]]:
    """(the vector counts as the planner reads them, summed over shards; the same recounted from chunks)"""
    kept = _rows(
        url,
        "SELECT kind, principal, source_id, sum(chunks)::bigint, vector_norm(sum(embedding_sum))::numeric(12, 4) "
        "FROM ce_vector_counts GROUP BY 1, 2, 3 HAVING sum(chunks) <> 0 ORDER BY 1, 2, 3",
    )
    recounted = _rows(
        url,
        "SELECT k.kind, k.principal, c.source_id, count(*), vector_norm(sum(c.embedding))::numeric(12, 4) "
        "FROM ce_chunks c CROSS JOIN LATERAL ce_vector_count_keys(c.acl) k "
        "WHERE c.valid_to IS NULL AND c.embedding IS NOT NULL GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
    )
    return kept, recounted


def _bm25_now(url: str) -> tuple[list[tuple], list[tuple]]:
    """(the BM25 statistics kept, per group and lexeme; the same recounted from the current chunks)"""
    kept = _rows(
        url,
        "SELECT g.source_id, g.acl, g.chunks, g.tokens, t.lexeme, t.df FROM ce_bm25_groups g "
        "JOIN ce_bm25_terms t ON t.group_id = g.group_id WHERE t.df > 0 ORDER BY 1, 2, 5",
    )
    recounted = _rows(
        url,
        "WITH g AS (SELECT source_id, acl, count(*) AS chunks, sum(tsv_tokens) AS tokens FROM ce_chunks "
        "WHERE valid_to IS NULL GROUP BY 1, 2), t AS (SELECT c.source_id, c.acl, u.lexeme, count(*) AS df "
        "FROM ce_chunks c, unnest(c.tsv) u WHERE c.valid_to IS NULL GROUP BY 1, 2, 3) "
        "SELECT g.source_id, g.acl, g.chunks, g.tokens, t.lexeme, t.df FROM g JOIN t USING (source_id, acl) "
        "ORDER BY 1, 2, 5",
    )
    return kept, recounted


async def test_counts_and_bm25_statistics_stay_exact_across_shards(cluster_engine: tuple[ContextEngine, str]) -> None:
    engine, url = cluster_engine
    ids = await _corpus(engine)
    spread = _rows(
        url,
        "SELECT count(DISTINCT get_shard_id_for_distribution_column('ce_chunks', document_id)) FROM ce_chunks",
    )[0][0]
    assert spread > 2  # the corpus is over several shards, so the sums below are over several
    for step in range(3):
        kept, recounted = _counts_now(url)
        assert kept == recounted and kept, step
        kept_bm25, recounted_bm25 = _bm25_now(url)
        assert kept_bm25 == recounted_bm25 and kept_bm25, step
        if step == 0:  # ACL moves: chunks change group, counts move between principals
            for doc in ids[:10]:
                await engine.update_document(doc, acl=["g2"], principals=TRUSTED)
        elif step == 1:  # new versions with new words, and deletes
            for n in range(10, 16):  # the same names, sources and ACLs as their first versions
                await engine.ingest(
                    text=f"quartz lantern changed{n}",
                    name=f"doc{n}.md",
                    source_id=f"src{n % 2}",
                    acl=list(GROUPS[n % len(GROUPS)]),
                )
            for doc in ids[20:30]:
                await engine.delete_document(doc, principals=TRUSTED)


async def test_revisions_and_idempotency_keys_hold_for_concurrent_writers(
    cluster_engine: tuple[ContextEngine, str],
) -> None:
    engine, url = cluster_engine
    before = (await engine.stats(principals=TRUSTED)).revision
    reports = await asyncio.gather(
        *(
            engine.ingest(text=f"zebra meadow {n}", name=f"c{n}.md", source_id=f"s{n % 3}", idempotency_key=f"k{n}")
            for n in range(12)
        )
    )
    revisions = sorted(int(r.documents[0].revision or 0) for r in reports)
    assert revisions == list(range(before + 1, before + 13))  # one each, none lost, none shared
    assert (await engine.stats(principals=TRUSTED)).revision == before + 12
    again = await engine.ingest(text="zebra meadow 3", name="c3.md", source_id="s0", idempotency_key="k3")
    assert again.documents[0].document_id == reports[3].documents[0].document_id
    assert (await engine.stats(principals=TRUSTED)).revision == before + 12  # a retry writes nothing
    with pytest.raises(IdempotencyKeyReused):
        await engine.ingest(text="other content", name="c3.md", source_id="s0", idempotency_key="k3")
    name = f"x{uuid.uuid4().hex[:6]}.md"
    both = await asyncio.gather(*(engine.ingest(text="zebra orbit", name=name, acl=["g1"]) for _ in range(2)))
    assert len({b.documents[0].document_id for b in both}) == 1  # one name per visibility, across shards
    assert _rows(url, f"SELECT count(*) FROM ce_documents WHERE name = '{name}'") == [(1,)]


async def test_the_index_plan_settings_reach_every_shard(cluster_engine: tuple[ContextEngine, str]) -> None:
    """The vector leg's forced index scan is planned on the shards: its SET LOCAL settings reach them
    (``citus.propagate_set_commands``), so a shard walks its own HNSW graph, and the exact plan's
    expression keeps every shard off the index."""
    engine, url = cluster_engine
    await _corpus(engine, documents=8)
    query = "[" + ",".join(["0.25"] * 16) + "]"
    order = index_order([0.25] * 16, halfvec=True).replace(":qv", f"'{query}'")  # the default index's ordering
    where = "c.valid_to IS NULL AND c.embedding IS NOT NULL"
    with psycopg.connect(url) as conn:
        for name, value in planner.index_settings(40, "relaxed_order").items():
            conn.execute(pgsql.SQL("SET LOCAL {} = {}").format(pgsql.SQL(name), pgsql.Literal(value)))
        ann = "\n".join(
            r[0] for r in conn.execute(f"EXPLAIN SELECT c.id FROM ce_chunks c WHERE {where} ORDER BY {order} LIMIT 10")
        )
        exact = "\n".join(
            r[0]
            for r in conn.execute(f"EXPLAIN SELECT c.id FROM ce_chunks c WHERE {where} ORDER BY ({order}) + 0 LIMIT 10")
        )
        conn.rollback()
    assert "Custom Scan (Citus Adaptive)" in ann and "Index Scan using ix_ce_chunks_embedding_" in ann
    assert "Custom Scan (Citus Adaptive)" in exact and "ix_ce_chunks_embedding" not in exact


def _nodes(pg_base_url: str) -> list[dict[str, object]]:
    """Connection settings of every node, the coordinator first (read from its node list)."""
    base = psycopg.conninfo.conninfo_to_dict(pg_base_url)
    with psycopg.connect(pg_base_url) as conn:
        rows = conn.execute("SELECT nodename, nodeport FROM pg_dist_node ORDER BY groupid, nodeid").fetchall()
    return [base | {"host": host, "port": port} for host, port in rows]


@contextlib.contextmanager
def _single_node_database(pg_base_url: str) -> Iterator[tuple[str, str, list[dict[str, object]]]]:
    """A database of one node's schema on the cluster: created on each node from template0 (not
    propagated, no citus in it); yields (its name, its coordinator URL, every node's settings)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    nodes = _nodes(pg_base_url)
    for node in nodes:
        with psycopg.connect(**node, autocommit=True) as conn:  # type: ignore[arg-type]
            conn.execute("SET citus.enable_create_database_propagation = off")
            conn.execute(pgsql.SQL("CREATE DATABASE {} TEMPLATE template0").format(pgsql.Identifier(name)))
    head, _, query = pg_base_url.partition("?")
    try:
        yield name, f"{head.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else ""), nodes
    finally:
        for node in reversed(nodes):
            with psycopg.connect(**node, autocommit=True) as conn:  # type: ignore[arg-type]
                conn.execute("SET citus.enable_create_database_propagation = off")
                conn.execute(pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(pgsql.Identifier(name)))


def _make_citus(name: str, url: str, nodes: list[dict[str, object]], worker_extensions: tuple[str, ...]) -> None:
    """What a user runs before ``migrate --citus``: the extensions, the coordinator and the workers."""
    for i, node in enumerate(nodes):
        with psycopg.connect(**node | {"dbname": name}, autocommit=True) as conn:  # type: ignore[arg-type]
            for extension in ("citus", "vector", "pg_trgm", "unaccent") if i == 0 else worker_extensions:
                conn.execute(pgsql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(pgsql.Identifier(extension)))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT citus_set_coordinator_host(%s, %s)", (nodes[0]["host"], nodes[0]["port"]))
        for worker in nodes[1:]:
            conn.execute("SELECT citus_add_node(%s, %s)", (worker["host"], worker["port"]))


async def _migrate_citus(url: str) -> int:
    from context_engine.cli import main as cli_main

    dim = str(WordEmbedder().dim)
    return await asyncio.to_thread(cli_main, ["migrate", "--citus", "--dim", dim, "--database-url", url])


async def test_a_database_moved_from_one_node_keeps_its_rows_counts_and_answers(pg_base_url: str) -> None:
    """The move docs/scaling.md describes: a database filled as a single node (no citus extension in it,
    so the single-node schema), then citus installed with the workers registered, then ``migrate
    --citus``. The overlay distributes the stored rows; nothing may be lost or counted twice."""
    with _single_node_database(pg_base_url) as (name, url, nodes):
        async with ContextEngine(make_config(url), embedder=WordEmbedder()) as engine:
            ids = await _corpus(engine)
            await engine.update_document(ids[0], acl=["g2"], principals=TRUSTED)  # a second version
            callers = (TRUSTED, ["g1"], ["g2"], [])
            before = [[h.chunk_id for h in (await engine.search("zebra", principals=p)).hits] for p in callers]
        assert not _rows(url, "SELECT 1 FROM pg_extension WHERE extname = 'citus'")
        stored = _rows(url, "SELECT count(*), count(DISTINCT document_id) FROM ce_chunks")
        kept_bm25 = _bm25_now(url)[0]
        _make_citus(name, url, nodes, ("citus", "vector", "pg_trgm", "unaccent"))

        assert await _migrate_citus(url) == 0

        distributed = {r[0] for r in _rows(url, "SELECT CAST(logicalrelid AS text) FROM pg_dist_partition")}
        assert set(CO_LOCATED) | set(REFERENCE) <= distributed
        assert _rows(url, "SELECT count(*), count(DISTINCT document_id) FROM ce_chunks") == stored
        spread = _rows(
            url, "SELECT count(DISTINCT get_shard_id_for_distribution_column('ce_chunks', document_id)) FROM ce_chunks"
        )[0][0]
        assert spread > 2
        kept, recounted = _counts_now(url)
        assert kept == recounted and kept
        assert _bm25_now(url) == (kept_bm25, kept_bm25)
        async with ContextEngine(make_config(url), embedder=WordEmbedder()) as engine:
            after = [[h.chunk_id for h in (await engine.search("zebra", principals=p)).hits] for p in callers]
            assert after == before and all(before[:2])
            await engine.ingest(text="zebra moved afterwards", name="late.md", source_id="src0", acl=["g1"])
        kept, recounted = _counts_now(url)
        assert kept == recounted
        assert _bm25_now(url)[0] == _bm25_now(url)[1]

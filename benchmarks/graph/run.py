"""Graph-mode benchmark: model calls per chunk batch at ingest, community detection at scale, and
what the graph leg costs a search whose query names no entity.

1. Ingest ``--docs`` generated documents in graph mode (embedded PostgreSQL, the local embedding
   model, the model played by a scripted server on 127.0.0.1) and count the extraction requests the
   server received against the chunk batches the reports list.
2. Community detection over ``--entities`` entities and ``--relationships`` relationships (planted
   clusters, 90% of links inside a cluster): networkx Louvain alone, then the whole rebuild of one
   group from Postgres (read, detect, write; no summaries).
3. Search p50 for ``--queries`` queries naming no entity, with the graph leg on (its default weight)
   and off (weight 0, plain hybrid), interleaved on the same database, plus the p50 of queries that
   do name an entity.

    .venv/bin/python benchmarks/graph/run.py [--docs 30] [--entities 10000] [--relationships 30000] [--queries 200]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from sqlalchemy import text

from context_engine import TRUSTED, ContextEngine, ContextEngineConfig
from context_engine.graph import communities
from tests.fakes import FakeHTTPServer
from tests.graph_fakes import serve_graph_model

COMPANIES = [f"{a} {b}" for a in ("Acme", "Globex", "Initech", "Umbrella", "Hooli", "Stark") for b in ("Corp", "Inc")]
PRODUCTS = [f"{a} {b}" for a in ("Widget", "Gadget", "Sprocket", "Gizmo", "Turbo") for b in ("Pro", "Max", "Mini")]
TEAMS = [f"Team {n}" for n in ("Atlas", "Borealis", "Comet", "Dune", "Echo")]
FILLER = (
    "the quarterly review covered delivery dates pricing terms and the renewal window for the next period "
    "while the audit notes listed open questions about invoices shipping and warranty claims"
).split()
PLAIN_QUERIES = ["renewal window pricing", "warranty claims audit", "shipping delays invoices", "quarterly review",
                 "delivery dates next period", "open questions about terms"]


def document(rng: random.Random, n: int) -> str:
    parts = [f"# Supply note {n}"]
    for _ in range(14):
        facts = []
        for _ in range(2):
            roll = rng.random()
            if roll < 0.4:
                facts.append(f"{rng.choice(COMPANIES)} supplies {rng.choice(PRODUCTS)}.")
            elif roll < 0.7:
                facts.append(f"{rng.choice(TEAMS)} owns {rng.choice(PRODUCTS)}.")
            else:
                facts.append(f"{rng.choice(COMPANIES)} partners with {rng.choice(COMPANIES)}.")
        filler = " ".join(rng.choice(FILLER) for _ in range(40)).capitalize() + "."
        parts.append(" ".join(facts) + " " + filler)
    return "\n\n".join(parts)


async def ingest_calls(engine: ContextEngine, model_calls: dict[str, int], docs: int) -> None:
    rng = random.Random(1)
    batches = chunks = 0
    started = time.perf_counter()
    for n in range(docs):
        report = await engine.ingest(text=document(rng, n), name=f"note-{n}")
        graph = await engine.extract_graph(report.documents[0].document_id)
        batches += graph.batches
        chunks += graph.chunks
    seconds = time.perf_counter() - started
    requests = model_calls.get("graph_facts", 0)
    print(f"ingest: {docs} documents, {chunks} chunks, {batches} chunk batches, {requests} extraction requests "
          f"({requests / batches:.2f} per batch, {chunks / requests:.1f} chunks per request), "
          f"{model_calls.get('community_summaries', 0)} summary requests, {seconds:.1f} s")


def planted(rng: random.Random, entities: int, relationships: int) -> list[tuple[int, int]]:
    size = 50
    edges: set[tuple[int, int]] = set()
    while len(edges) < relationships:
        a = rng.randrange(entities)
        if rng.random() < 0.9:
            base = a - a % size
            b = base + rng.randrange(min(size, entities - base))
        else:
            b = rng.randrange(entities)
        if a != b:
            edges.add((min(a, b), max(a, b)))
    return sorted(edges)


async def detection(engine: ContextEngine, entities: int, relationships: int) -> None:
    rng = random.Random(2)
    edges = planted(rng, entities, relationships)
    names = [f"entity {i}" for i in range(entities)]
    started = time.perf_counter()
    found = communities.detect(names, ((names[a], names[b], 1.0) for a, b in edges))
    louvain = time.perf_counter() - started
    print(f"louvain (networkx) over {entities} entities / {len(edges)} relationships: {louvain:.2f} s, "
          f"{len(found)} communities")

    db = await engine.services.db()
    doc, ids = str(uuid.uuid4()), [str(uuid.uuid4()) for _ in range(entities)]
    chunk_count = entities // 10
    async with db.begin() as conn:  # one synthetic document in its own group ("bench", public)
        chunk_ids = (
            await conn.execute(
                text(
                    "INSERT INTO ce_chunks (document_id, version, position, source_id, acl, text, text_hash, tsv, "
                    "valid_from) SELECT CAST(:d AS uuid), 1, p, 'bench', '{}', 'synthetic', md5(p::text), "
                    "to_tsvector('simple', 'synthetic'), 1 FROM generate_series(0, :n - 1) AS p RETURNING id"
                ),
                {"d": doc, "n": chunk_count},
            )
        ).scalars().all()
        await conn.execute(
            text(
                "INSERT INTO ce_graph_entities (id, name, name_key, frequency) SELECT i, n, n, 1 "
                "FROM unnest(CAST(:i AS uuid[]), CAST(:n AS text[])) AS t(i, n)"
            ),
            {"i": ids, "n": names},
        )
        await conn.execute(
            text(
                "INSERT INTO ce_graph_mentions (entity_id, chunk_id, document_id, entity_type) SELECT e, c, "
                "CAST(:d AS uuid), 'THING' FROM unnest(CAST(:e AS uuid[]), CAST(:c AS bigint[])) AS t(e, c)"
            ),
            {"d": doc, "e": ids, "c": [chunk_ids[i % chunk_count] for i in range(entities)]},
        )
        await conn.execute(
            text(
                "INSERT INTO ce_graph_relationships (id, source_entity, target_entity, category, label, evidence, "
                "chunk_id, document_id) SELECT gen_random_uuid(), s, t, 'ASSOCIATION', 'linked', '', c, "
                "CAST(:d AS uuid) FROM unnest(CAST(:s AS uuid[]), CAST(:t AS uuid[]), CAST(:c AS bigint[])) "
                "AS r(s, t, c)"
            ),
            {"d": doc, "s": [ids[a] for a, _ in edges], "t": [ids[b] for _, b in edges],
             "c": [chunk_ids[a % chunk_count] for a, _ in edges]},
        )
    started = time.perf_counter()
    report = await communities.rebuild(db, None, [("bench", ())])
    rebuild = time.perf_counter() - started
    print(f"rebuild of one group from Postgres (read + louvain + write, no summaries): {rebuild:.2f} s, "
          f"{report.communities} communities stored")
    async with db.begin() as conn:
        await conn.execute(text("DELETE FROM ce_graph_entities WHERE id = ANY(CAST(:i AS uuid[]))"), {"i": ids})
        await conn.execute(text("DELETE FROM ce_graph_communities WHERE source_id = 'bench'"))
        await conn.execute(text("DELETE FROM ce_chunks WHERE document_id = CAST(:d AS uuid)"), {"d": doc})


async def search_cost(with_graph: ContextEngine, hybrid: ContextEngine, queries: int) -> None:
    timings: dict[str, list[float]] = {"graph leg on": [], "hybrid (graph weight 0)": [], "names an entity": []}
    for engine in (with_graph, hybrid):  # warm both: pools, the name list, the embedder
        for q in PLAIN_QUERIES:
            await engine.search(q, principals=TRUSTED)
    rng = random.Random(3)
    for i in range(queries):
        query = f"{rng.choice(PLAIN_QUERIES)} {i % 7}"
        order = [("graph leg on", with_graph), ("hybrid (graph weight 0)", hybrid)]
        if i % 2:
            order.reverse()
        for label, engine in order:
            started = time.perf_counter()
            result = await engine.search(query, principals=TRUSTED)
            timings[label].append(time.perf_counter() - started)
            if label == "graph leg on":
                assert result.usage["graph"]["reason"] == "no_entities_in_query"
        started = time.perf_counter()
        named = await with_graph.search(f"who supplies {rng.choice(PRODUCTS)}", principals=TRUSTED)
        timings["names an entity"].append(time.perf_counter() - started)
        assert named.usage["graph"]["applied"]
    p50 = {label: statistics.median(values) * 1000 for label, values in timings.items()}
    for label, value in p50.items():
        print(f"search p50, {label}: {value:.2f} ms ({len(timings[label])} queries)")
    ratio = p50["graph leg on"] / p50["hybrid (graph weight 0)"]
    print(f"no-entity query, graph leg on vs hybrid: {100 * (ratio - 1):+.1f}% at p50")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=30)
    parser.add_argument("--entities", type=int, default=10_000)
    parser.add_argument("--relationships", type=int, default=30_000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="ce-bench-graph-"))
    try:
        with FakeHTTPServer() as server:
            model = serve_graph_model(server)
            llm = {"provider": "custom", "base_url": server.url("/v1"), "model": "scripted", "max_retries": 0}
            config = ContextEngineConfig(storage={"data_dir": data_dir}, llm=llm)
            async with ContextEngine(config) as engine:
                await engine.migrate_graph()
                await ingest_calls(engine, model.calls, args.docs)
                await detection(engine, args.entities, args.relationships)
                hybrid_config = config.model_copy(deep=True)
                hybrid_config.fusion.weights = {**config.fusion.weights, "graph": 0.0}
                async with ContextEngine(hybrid_config, embedder=engine.embedder) as hybrid:
                    await search_cost(engine, hybrid, args.queries)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())

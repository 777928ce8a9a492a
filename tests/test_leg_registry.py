"""A search leg is one module and one ``register`` call: a leg defined here, in a test module,
shows in ``POST /search`` and ``POST /knowledge/query`` (``matched_by``, ``usage``) with no other file
edited, reads under the caller's ACL like the built-in legs, and is weighted like them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text

from context_engine import TRUSTED, ContextEngine
from context_engine.config import ContextEngineConfig
from context_engine.embeddings.base import InputKind
from context_engine.errors import ConfigError
from context_engine.retrieval import registry
from context_engine.retrieval.retriever import Search
from tests.conftest import make_config
from tests.test_bm25_pruning import WordEmbedder


class DocumentNameLeg:
    """Finds the chunks of documents whose name contains a word of the query."""

    name = "doc_name"
    default_weight = 1.0

    def __init__(self) -> None:
        self.queries: list[str] = []

    def applies(self, query: str, config: ContextEngineConfig) -> bool:
        return True

    async def run(self, search: Search, index: int) -> list[tuple[int, float]]:
        query = search.queries[index]
        self.queries.append(query)
        words = [w.lower() for w in query.split() if len(w) > 3]
        params: dict[str, Any] = {"words": words, "limit": search.limit}
        statement = (
            "SELECT c.id, 1.0 FROM ce_chunks c JOIN ce_documents d ON d.id = c.document_id "
            "WHERE c.valid_to IS NULL AND lower(d.name) LIKE ANY (SELECT '%' || w || '%' FROM unnest("
            f"CAST(:words AS text[])) w) AND {search.scope.predicate('c', params)} ORDER BY c.id LIMIT :limit"
        )
        async with search.db.connect() as conn:
            rows = (await conn.execute(text(statement), params)).all()
        search.usage["doc_name"] = {"words": len(words), "rows": len(rows)}
        return [(int(r[0]), float(r[1])) for r in rows]


@pytest.fixture
def toy_leg() -> Iterator[DocumentNameLeg]:
    leg = DocumentNameLeg()
    registry.register(leg)
    try:
        yield leg
    finally:
        registry.unregister(leg.name)


@pytest.fixture
async def client(database_url: str, toy_leg: DocumentNameLeg) -> AsyncIterator[httpx.AsyncClient]:
    from adapters.fastapi import create_router

    async with ContextEngine(make_config(database_url)) as engine:
        await engine.ingest(text="Quarterly figures for the board.", name="penguins.md", acl=["team:a"])
        await engine.ingest(text="Penguin colonies nest on rocky shores.", name="birds.md", acl=["team:a"])
        await engine.ingest(text="Secret penguin plans.", name="penguins-secret.md", acl=["team:b"])
        app = FastAPI()
        app.include_router(
            create_router(
                engine,
                auth=lambda request: True,
                principals=lambda request: [request.headers.get("x-team", "nobody")],
            )
        )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            yield http


async def test_a_registered_leg_serves_search_and_knowledge_routes(
    client: httpx.AsyncClient, toy_leg: DocumentNameLeg
) -> None:
    found = await client.post("/search", json={"query": "penguins"}, headers={"x-team": "team:a"})
    assert found.status_code == 200, found.text
    body = found.json()
    assert "doc_name" in body["usage"]["legs"] and body["usage"]["leg_hits"]["doc_name"] == 1
    assert body["usage"]["doc_name"] == {"words": 1, "rows": 1}
    named = [hit for hit in body["hits"] if hit["document_name"] == "penguins.md"]
    # the board text has no penguin in it: the full-text leg missed it, the toy leg found it by name
    assert named and "doc_name" in named[0]["matched_by"] and "fts" not in named[0]["matched_by"]
    # the leg read under the caller's ACL: team:b's document was neither matched nor counted
    assert all(hit["document_name"] != "penguins-secret.md" for hit in body["hits"])

    answered = await client.post(
        "/knowledge/query",
        json={"query": "penguins", "expand": False, "rerank": False},
        headers={"x-team": "team:a"},
    )
    assert answered.status_code == 200, answered.text
    matches = answered.json()["matches"]
    by_name = {m["sourceName"]: m["matchedBy"] for m in matches}
    assert "doc_name" in by_name["penguins.md"] and "fts" not in by_name["penguins.md"]
    assert "penguins-secret.md" not in by_name
    assert toy_leg.queries == ["penguins", "penguins"]


async def test_a_leg_is_weighted_and_switched_off_like_the_others(database_url: str, toy_leg: DocumentNameLeg) -> None:
    config = make_config(database_url, fusion={"weights": {"doc_name": 0.0}})
    assert config.fusion.weights["doc_name"] == 0.0
    async with ContextEngine(config) as engine:
        await engine.ingest(text="Quarterly figures for the board.", name="penguins.md")
        result = await engine.search("penguins", principals=TRUSTED)
    assert "doc_name" not in result.usage["legs"] and toy_leg.queries == []


def test_unknown_leg_names_and_duplicate_registrations_are_refused(toy_leg: DocumentNameLeg) -> None:
    misspelt = ContextEngineConfig(fusion={"weights": {"vectr": 1.0}})  # type: ignore[arg-type]
    # the settings are read before a host registers its legs: the engine refuses the name when made
    with pytest.raises(ConfigError, match="no search leg is named 'vectr'") as refused:
        ContextEngine(misspelt)
    assert refused.value.code == "unknown_search_leg"
    with pytest.raises(ValueError, match="must be >= 0"):
        ContextEngineConfig(fusion={"weights": {"doc_name": -1.0}})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="already registered"):
        registry.register(DocumentNameLeg())
    assert registry.names()[:3] == ["fts", "trigram", "vector"] and "doc_name" in registry.names()


async def test_replacing_the_engines_config_changes_the_next_search(database_url: str) -> None:
    """The evaluation harness measures each leg alone by swapping ``engine.config``; the retriever
    must read the swapped settings, not a copy taken when the engine was built."""
    from context_engine.evaluation import leg_configurations, overridden

    async with ContextEngine(make_config(database_url)) as engine:
        await engine.ingest(text="Penguin colonies nest on rocky shores.", name="birds.md")
        seen = {}
        for name, overrides in leg_configurations(engine.config).items():
            with overridden(engine, overrides):
                seen[name] = (await engine.search("penguin colonies", principals=TRUSTED)).usage["legs"]
    assert seen["full-text leg alone"] == ["fts"] and seen["vector leg alone"] == ["vector"]
    assert set(seen["fused (configured)"]) >= {"fts", "vector"}


class CountingEmbedder(WordEmbedder):
    """Counts the query embeddings it was asked for, at the moment each call begins."""

    def __init__(self) -> None:
        self.query_calls = 0

    async def embed(self, texts: list[str], *, kind: InputKind = "document") -> list[list[float]]:
        if kind == "query":
            self.query_calls += 1
        return await super().embed(texts, kind=kind)


class WitnessLeg:
    """A leg that embeds nothing and notes whether the query embedding had begun when it ran."""

    name = "witness"
    default_weight = 1.0

    def __init__(self, embedder: CountingEmbedder) -> None:
        self.embedder = embedder
        self.saw: list[int] = []

    def applies(self, query: str, config: ContextEngineConfig) -> bool:
        return True

    async def run(self, search: Search, index: int) -> list[tuple[int, float]]:
        self.saw.append(self.embedder.query_calls)
        return []


class VectorsLeg:
    """A leg that awaits the query vectors, registered after the witness, so it runs after it."""

    name = "vectors_after"
    default_weight = 1.0
    embeds_queries = True

    def applies(self, query: str, config: ContextEngineConfig) -> bool:
        return True

    async def run(self, search: Search, index: int) -> list[tuple[int, float]]:
        await search.vectors()
        return []


async def test_the_query_embedding_begins_before_any_leg_runs(database_url: str) -> None:
    embedder = CountingEmbedder()
    witness, vectors = WitnessLeg(embedder), VectorsLeg()
    registry.register(witness)
    registry.register(vectors)
    try:
        # the built-in vector leg off: only the leg registered after the witness asks for vectors
        config = make_config(database_url, fusion={"weights": {"vector": 0.0}})
        async with ContextEngine(config, embedder=embedder) as engine:
            await engine.ingest(text="Penguin colonies nest on rocky shores.", name="birds.md", acl=[])
            result = await engine.search("penguin colonies", top_k=3, principals=TRUSTED)
            assert result.hits  # the full-text leg found it
            assert embedder.query_calls == 1  # embedded once, for the leg that asked
            assert witness.saw == [1]  # already begun when the first custom leg ran
        embedder.query_calls = 0
        # no active leg embeds: nothing is embedded
        quiet = make_config(database_url, fusion={"weights": {"vector": 0.0, "vectors_after": 0.0}})
        async with ContextEngine(quiet, embedder=embedder) as engine:
            await engine.search("penguin colonies", top_k=3, principals=TRUSTED)
            assert embedder.query_calls == 0
    finally:
        registry.unregister(witness.name)
        registry.unregister(vectors.name)

"""Graph mode chosen per search and per tool call, the mode reported, and the ``graph`` section.

The model and the embedder are the scripted server of the graph tests, over real HTTP.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from context_engine import GRAPH_REASONS, TRUSTED, UNSCOPED, ContextEngine, ContextEngineConfig
from context_engine.errors import InvalidRequest
from context_engine.graph.errors import GraphDisabled, GraphNotEnabled
from tests.conftest import make_config
from tests.fakes import FakeHTTPServer
from tests.graph_fakes import GraphModel, graph_config, serve_graph_model
from tests.test_graph_engine import SUPPLY, ingest

NAMED = "who supplies widget-pro parts?"
PLAIN = "when are holidays announced"


@pytest.fixture
def server() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer() as fake:
        yield fake


@pytest.fixture
def model(server: FakeHTTPServer) -> GraphModel:
    return serve_graph_model(server)


@pytest.fixture
async def graph_engine(database_url: str, server: FakeHTTPServer, model: GraphModel) -> AsyncIterator[ContextEngine]:
    async with ContextEngine(make_config(database_url, **graph_config(server))) as eng:
        await eng.migrate_graph()
        await ingest(eng, SUPPLY, "supply")
        await eng.ingest(text="Holidays are announced in spring and autumn.", name="other")
        yield eng


async def test_each_mode_reports_what_was_asked_what_ran_and_why(graph_engine: ContextEngine) -> None:
    auto = await graph_engine.search(NAMED, principals=TRUSTED)
    assert (auto.usage["mode"], auto.usage["mode_used"], auto.usage["graph"]["reason"]) == ("auto", "graph", "auto")
    asked = await graph_engine.search(NAMED, principals=TRUSTED, mode="graph")
    assert (asked.usage["mode_used"], asked.usage["graph"]["reason"]) == ("graph", "requested")
    assert asked.usage["graph"]["entities"] == ["widget pro"]
    hybrid = await graph_engine.search(NAMED, principals=TRUSTED, mode="hybrid")
    assert (hybrid.usage["mode"], hybrid.usage["mode_used"]) == ("hybrid", "hybrid")
    assert hybrid.usage["graph"]["reason"] == "not_requested"
    assert hybrid.usage["leg_hits"].get("graph", 0) == 0
    assert not any("graph" in h.matched_by for h in hybrid.hits)
    nothing = await graph_engine.search(PLAIN, principals=TRUSTED, mode="graph")
    assert (nothing.usage["mode_used"], nothing.usage["graph"]["reason"]) == ("hybrid", "no_entities_in_query")
    for result in (auto, asked, hybrid, nothing):
        assert result.usage["graph"]["reason"] in GRAPH_REASONS


async def test_an_entity_only_in_hidden_chunks_reads_like_an_unknown_one(graph_engine: ContextEngine) -> None:
    await ingest(graph_engine, "Initech Ltd supplies Stapler Max.", "hidden", acl=["group:exec"])
    seen = await graph_engine.search("who buys from initech ltd?", principals=[], mode="graph")
    assert seen.usage["graph"]["reason"] == "no_entities_in_query" and seen.usage["mode_used"] == "hybrid"


async def test_a_weight_of_zero_is_reported(database_url: str, server: FakeHTTPServer, model: GraphModel) -> None:
    config = make_config(database_url, **graph_config(server), fusion={"weights": {"graph": 0.0}})
    async with ContextEngine(config) as eng:
        await eng.migrate_graph()
        await ingest(eng, SUPPLY, "supply")
        result = await eng.search(NAMED, principals=TRUSTED)
    assert (result.usage["graph"]["reason"], result.usage["mode_used"]) == ("graph_weight_zero", "hybrid")


async def test_graph_disabled_is_answered_without_the_database_and_refuses_an_explicit_ask(
    database_url: str, server: FakeHTTPServer, model: GraphModel
) -> None:
    config = make_config(database_url, **graph_config(server), graph={"enabled": False})
    async with ContextEngine(config) as eng:
        await eng.migrate_graph()
        result = await eng.search(NAMED, principals=TRUSTED)
        assert result.usage["graph"]["reason"] == "graph_disabled"
        with pytest.raises(GraphDisabled) as refused:
            await eng.search(NAMED, principals=TRUSTED, mode="graph")
        assert (refused.value.status, refused.value.code) == (409, "graph_disabled")
        with pytest.raises(GraphDisabled):
            await eng.ingest(text=SUPPLY, name="supply", mode="graph")


async def test_an_explicit_graph_search_without_graph_tables_is_an_error(engine: ContextEngine) -> None:
    await engine.ingest(text="Acme Corp supplies Widget Pro.", name="plain")
    assert (await engine.search(NAMED, principals=TRUSTED)).usage["graph"]["reason"] == "graph_disabled"
    with pytest.raises(GraphNotEnabled):
        await engine.search(NAMED, principals=TRUSTED, mode="graph")
    with pytest.raises(InvalidRequest):
        await engine.search(NAMED, principals=TRUSTED, mode="fuzzy")


async def test_the_knowledge_tool_takes_the_mode(graph_engine: ContextEngine) -> None:
    graph = await graph_engine.search_knowledge_base(
        action="search", query=NAMED, mode="graph", principals=TRUSTED, scope=UNSCOPED
    )
    assert graph["success"] is True and graph["usage"]["mode_used"] == "graph"
    hybrid = await graph_engine.search_knowledge_base(
        action="search", query=NAMED, mode="hybrid", principals=TRUSTED, scope=UNSCOPED
    )
    assert hybrid["usage"]["graph"]["reason"] == "not_requested"


def test_the_graph_section_reads_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CE_GRAPH__ENABLED", "false")
    monkeypatch.setenv("CE_GRAPH__EXTRACTION_LLM__PROVIDER", "custom")
    monkeypatch.setenv("CE_GRAPH__EXTRACTION_LLM__BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("CE_GRAPH__EXTRACTION_LLM__MAX_RETRIES", "4")
    config = ContextEngineConfig.from_env()
    assert config.graph.enabled is False and config.graph.extraction_llm is not None
    assert config.graph.extraction_llm.max_retries == 4 and config.llm is None


async def test_graph_extraction_llm_is_the_model_that_extracts(
    database_url: str, server: FakeHTTPServer, model: GraphModel
) -> None:
    extraction = {"provider": "custom", "base_url": server.url("/v1"), "model": "graph-reader", "max_retries": 0}
    config = make_config(database_url, **graph_config(server, with_llm=False), graph={"extraction_llm": extraction})
    async with ContextEngine(config) as eng:
        await eng.migrate_graph()
        await ingest(eng, SUPPLY, "supply")
    models = {r.json()["model"] for r in server.requests if r.path.endswith("/chat/completions")}
    assert models == {"graph-reader"} and model.calls["graph_facts"] == 1

"""Graph mode through the engine, on the embedded PostgreSQL, with the model and the embedder played
by a scripted server over real HTTP: extraction, normalisation, frequencies, communities, the graph
leg's gate and its reasons, the four navigation actions, redaction, and repair on delete/replace."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from sqlalchemy import event, text

from context_engine import ContextEngine
from context_engine.errors import ContextEngineError
from context_engine.graph.errors import GraphNotEnabled
from context_engine.redaction import RedactionPolicy, RedactionRule
from tests.conftest import make_config
from tests.fakes import FakeHTTPServer
from tests.graph_fakes import GraphModel, graph_config, serve_graph_model
from tests.waiting import HANG_GUARD, finishes

# calls without principals= are the trusted caller on purpose here (ACL cases pass principals)
pytestmark = pytest.mark.filterwarnings("ignore:principals=None:DeprecationWarning")

SUPPLY = (
    "# Suppliers\n\nAcme Corp supplies Widget Pro. Acme Corp partners with Globex Inc.\n\n"
    "# Owners\n\nTeam Atlas owns Widget Pro. Team Atlas manages Team Borealis."
)
OTHER = "Globex Inc builds Hover Board. Globex Inc supplies Acme Corp."


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
        yield eng


async def ingest(engine: ContextEngine, body: str, name: str, **kwargs: Any) -> str:
    report = await engine.ingest(text=body, name=name, **kwargs)
    doc_id = report.documents[0].document_id
    assert doc_id is not None
    await engine.extract_graph(doc_id)
    return doc_id


async def rows(engine: ContextEngine, sql: str) -> list[tuple[Any, ...]]:
    db = await engine.services.db()
    async with db.connect() as conn:
        return [tuple(r) for r in (await conn.execute(text(sql))).all()]


async def test_extraction_stores_normalised_entities_with_chunk_frequency(
    graph_engine: ContextEngine, model: GraphModel
) -> None:
    doc = await graph_engine.ingest(text=SUPPLY, name="supply")
    report = await graph_engine.extract_graph(doc.documents[0].document_id)
    assert report.mode_used == "graph" and report.mode_reason is None
    assert report.chunks == 2 and report.batches == 1 and report.llm_calls == 1
    assert model.calls["graph_facts"] == 1  # one call for the one batch of two chunks
    found = dict(await rows(graph_engine, "SELECT name, frequency FROM ce_graph_entities"))
    assert found == {"acme corp": 1, "widget pro": 2, "globex inc": 1, "team atlas": 1, "team borealis": 1}
    assert report.entities == 5 and report.relationships == 4
    assert report.communities >= 1 and model.calls["community_summaries"] >= 1


async def test_tabular_documents_stay_hybrid_and_call_no_model(graph_engine: ContextEngine, model: GraphModel) -> None:
    doc = await graph_engine.ingest(file=b"supplier,part\nAcme Corp,Widget Pro\n", name="parts.csv")
    report = await graph_engine.extract_graph(doc.documents[0].document_id)
    assert (report.mode_used, report.mode_reason) == ("hybrid", "tabular documents stay hybrid")
    assert model.calls == {} and await rows(graph_engine, "SELECT id FROM ce_graph_entities") == []


async def test_without_a_model_graph_mode_is_off_with_a_clear_error(database_url: str, server: FakeHTTPServer) -> None:
    serve_graph_model(server)
    async with ContextEngine(make_config(database_url, **graph_config(server, with_llm=False))) as eng:
        doc = await eng.ingest(text=SUPPLY, name="supply")
        with pytest.raises(GraphNotEnabled) as off:
            await eng.extract_graph(doc.documents[0].document_id)
        assert off.value.status == 409 and "migrate --graph" in off.value.message
        await eng.migrate_graph()
        with pytest.raises(ContextEngineError) as no_llm:
            await eng.extract_graph(doc.documents[0].document_id)
        assert (no_llm.value.code, no_llm.value.status) == ("graph_llm_missing", 409)


async def test_an_invalid_extraction_reply_writes_nothing(graph_engine: ContextEngine, model: GraphModel) -> None:
    model.broken = True
    doc = await graph_engine.ingest(text=SUPPLY, name="supply")
    with pytest.raises(ContextEngineError) as failed:
        await graph_engine.extract_graph(doc.documents[0].document_id)
    assert (failed.value.code, failed.value.status) == ("graph_extraction_failed", 502)
    assert model.calls["graph_facts"] == 1  # asked once, never re-asked
    assert await rows(graph_engine, "SELECT count(*) FROM ce_graph_mentions") == [(0,)]


async def test_the_leg_runs_only_for_queries_naming_an_entity(graph_engine: ContextEngine) -> None:
    await ingest(graph_engine, SUPPLY, "supply")
    await graph_engine.ingest(text="Holidays are announced in spring and autumn.", name="other")
    named = await graph_engine.search("who supplies widget-pro parts?")
    assert named.usage["graph"]["applied"] is True and named.usage["graph"]["reason"] == "auto"
    assert named.usage["graph"]["entities"] == ["widget pro"]
    graph_hits = [h for h in named.hits if "graph" in h.matched_by]
    assert graph_hits and all("Widget Pro" in h.chunk_text for h in graph_hits)
    # names are matched by key: punctuation and case do not matter, multi-word names need all words
    spelled = await graph_engine.search("ACME, corp. contracts")
    assert spelled.usage["graph"]["entities"] == ["acme corp"]

    db = await graph_engine.services.db()
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    event.listen(db.sync_engine, "before_cursor_execute", record)
    try:
        plain = await graph_engine.search("when are holidays announced")
    finally:
        event.remove(db.sync_engine, "before_cursor_execute", record)
    assert plain.usage["graph"] == {
        "applied": False, "reason": "no_entities_in_query", "entities": [], "entity_ids": []}
    assert statements and not [s for s in statements if "ce_graph" in s]  # the gate cost no SQL


async def test_leg_reasons_before_the_graph_exists(database_url: str, server: FakeHTTPServer) -> None:
    serve_graph_model(server)
    async with ContextEngine(make_config(database_url, **graph_config(server))) as eng:
        await eng.ingest(text=SUPPLY, name="supply")
        assert (await eng.search("Acme Corp")).usage["graph"]["reason"] == "graph_disabled"
        await eng.migrate_graph()
        assert (await eng.search("Acme Corp")).usage["graph"]["reason"] == "no_graph_documents"


async def test_hidden_graph_documents_change_nothing_an_untrusted_caller_is_told(
    graph_engine: ContextEngine,
) -> None:
    """Another tenant's graph documents, whether there are none or several, leave an untrusted
    caller's ``usage["graph"]`` (reason, entities, ids, mode) and its hits exactly as they were."""
    await graph_engine.ingest(text="Plain notes about Acme Corp and Widget Pro.", name="own", acl=["tenant:a"])
    queries = ("Acme Corp supplies", "Widget Pro", "holiday plans")

    async def seen() -> list[Any]:
        out: list[Any] = []
        for query in queries:
            for mode in (None, "hybrid"):
                result = await graph_engine.search(query, principals=["tenant:a"], mode=mode)
                usage = {k: result.usage[k] for k in ("graph", "mode", "mode_used")}
                out.append((query, mode, usage, [(h.chunk_id, h.score) for h in result.hits]))
        return out

    before = await seen()
    assert before[0][2]["graph"] == {
        "applied": False, "reason": "no_entities_in_query", "entities": [], "entity_ids": []}
    await ingest(graph_engine, SUPPLY, "supply", acl=["tenant:b"])
    await ingest(graph_engine, OTHER, "other", acl=["tenant:b"])
    assert await rows(graph_engine, "SELECT count(*) FROM ce_graph_entities") != [(0,)]
    assert await seen() == before
    # the trusted caller is told how the store stands
    assert (await graph_engine.search("Acme Corp")).usage["graph"]["reason"] == "auto"


async def test_an_entity_only_in_hidden_documents_does_not_exist(graph_engine: ContextEngine) -> None:
    await ingest(graph_engine, SUPPLY, "supply", acl=["group:ops"])
    await ingest(graph_engine, OTHER, "other")
    outsider = await graph_engine.search("Widget Pro", principals=[])
    assert outsider.usage["graph"]["reason"] == "no_entities_in_query"
    with pytest.raises(ContextEngineError) as hidden:
        await graph_engine.graph_query("get_neighbors", entity="Widget Pro", principals=[])
    with pytest.raises(ContextEngineError) as unknown:
        await graph_engine.graph_query("get_neighbors", entity="Nothing Such", principals=[])
    assert (hidden.value.code, hidden.value.status, type(hidden.value)) == (
        unknown.value.code, unknown.value.status, type(unknown.value))
    assert hidden.value.code == "entity_not_found"
    # Acme Corp is visible through the public document only: its ops-only links are not
    seen = await graph_engine.graph_query("get_neighbors", entity="acme corp", principals=[])
    assert {(n["name"], n["label"], n["direction"]) for n in seen["neighbors"]} == {
        ("globex inc", "supplies", "incoming")}
    ops = await graph_engine.graph_query("get_neighbors", entity="acme corp", principals=["group:ops"])
    assert {n["name"] for n in ops["neighbors"]} == {"globex inc", "widget pro"}


async def test_the_four_actions(graph_engine: ContextEngine) -> None:
    await ingest(graph_engine, SUPPLY, "supply")
    await ingest(graph_engine, OTHER, "other")
    near = await graph_engine.graph_query("get_neighbors", entity="Acme Corp")
    assert near["entity"]["name"] == "acme corp" and near["entity"]["type"] == "ORG"
    assert {(n["name"], n["category"], n["direction"]) for n in near["neighbors"]} == {
        ("widget pro", "SUPPLY", "outgoing"),
        ("globex inc", "PARTNERSHIP", "outgoing"),
        ("globex inc", "SUPPLY", "incoming"),
    }
    assert near["count"] == 3

    far = await graph_engine.graph_query("traverse", entity="Team Borealis", depth=3)
    hops = {p["target"]: p["hops"] for p in far["paths"]}
    assert hops == {"team atlas": 1, "widget pro": 2, "acme corp": 3}
    supply_only = await graph_engine.graph_query("traverse", entity="Acme Corp", depth=2, category="supply")
    assert {p["target"] for p in supply_only["paths"]} == {"widget pro", "globex inc"}

    made = await graph_engine.graph_query("find_related", category="CREATION")
    assert [(r["source"], r["label"], r["target"]) for r in made["relationships"]] == [
        ("globex inc", "builds", "hover board")]
    teams = await graph_engine.graph_query("find_related", entity_type="team")
    assert {r["label"] for r in teams["relationships"]} == {"owns", "manages"}

    themes = await graph_engine.graph_query("community_summary", query="team atlas widget pro")
    assert themes["count"] >= 1
    best = themes["communities"][0]
    assert "team atlas" in best["summary"] and best["relevance"] > 0
    assert {e["name"] for e in best["entities"]} <= {"acme corp", "widget pro", "team atlas", "team borealis",
                                                       "globex inc"}

    # an id is a handle to navigate on, identical to the name
    by_id = await graph_engine.graph_query("get_neighbors", entity=near["entity"]["id"])
    assert by_id == near


@pytest.mark.parametrize(
    ("action", "arguments", "code"),
    [
        ("get_neighbors", {}, "invalid_request"),
        ("traverse", {"entity": "Acme Corp", "depth": 9}, "invalid_request"),
        ("find_related", {"category": "FRIENDSHIP"}, "invalid_category"),
        ("find_related", {"entity": "Acme Corp"}, "invalid_request"),
        ("community_summary", {"limit": 0}, "invalid_request"),
        ("delete_everything", {}, "invalid_request"),
    ],
)
async def test_bad_arguments_are_precise_errors(
    graph_engine: ContextEngine, action: str, arguments: dict[str, Any], code: str
) -> None:
    await ingest(graph_engine, SUPPLY, "supply")
    with pytest.raises(ContextEngineError) as refused:
        await graph_engine.graph_query(action, **arguments)
    assert refused.value.code == code and refused.value.status == 400


async def test_ids_survive_an_output_policy_that_masks_names(graph_engine: ContextEngine) -> None:
    await ingest(graph_engine, SUPPLY, "supply")
    mask = RedactionPolicy(rules=[RedactionRule(name="org", pattern=r"(?i)acme corp|widget pro", apply_at="output")])
    first = await graph_engine.graph_query("find_related", category="SUPPLY", redaction=mask)
    link = first["relationships"][0]
    assert link["source"] == "[ORG]" and link["target"] == "[ORG]" and "[ORG]" in link["evidence"]
    onward = await graph_engine.graph_query("get_neighbors", entity=link["target_id"], redaction=mask)
    assert {n["name"] for n in onward["neighbors"]} == {"[ORG]", "team atlas"}
    assert all(n["id"] and "acme" not in n["id"] for n in onward["neighbors"])


async def test_delete_repairs_frequencies_orphans_and_communities(
    graph_engine: ContextEngine, model: GraphModel
) -> None:
    await ingest(graph_engine, SUPPLY, "supply")
    other = await ingest(graph_engine, OTHER, "other")
    before = dict(await rows(graph_engine, "SELECT name, frequency FROM ce_graph_entities"))
    assert before["acme corp"] == 2 and before["hover board"] == 1
    themes = await graph_engine.graph_query("community_summary")
    assert any("hover board" in c["summary"] for c in themes["communities"])

    summaries_before = model.calls["community_summaries"]
    await graph_engine.delete_document(other)  # repairs the graph itself
    after = dict(await rows(graph_engine, "SELECT name, frequency FROM ce_graph_entities"))
    assert after["acme corp"] == 1 and after["globex inc"] == 1
    assert "hover board" not in after  # nothing mentions it any more
    assert await rows(
        graph_engine, "SELECT count(*) FROM ce_graph_relationships WHERE label = 'builds'"
    ) == [(0,)]
    themes = await graph_engine.graph_query("community_summary")
    assert themes["communities"] and not any("hover board" in c["summary"] for c in themes["communities"])
    assert model.calls["community_summaries"] > summaries_before  # the touched community was summarised again
    again = await graph_engine.repair_graph(other)
    assert (again.mentions_removed, again.entities_removed) == (0, 0)


async def test_replacing_a_document_replaces_its_facts(graph_engine: ContextEngine) -> None:
    doc = await ingest(graph_engine, OTHER, "other")
    replaced = await graph_engine.ingest(text="Globex Inc builds Jet Pack.", name="other")
    assert replaced.documents[0].document_id == doc and replaced.documents[0].version == 2
    await graph_engine.extract_graph(doc)
    names = {r[0] for r in await rows(graph_engine, "SELECT name FROM ce_graph_entities")}
    assert names == {"globex inc", "jet pack"}
    assert (await graph_engine.search("Hover Board")).usage["graph"]["reason"] == "no_entities_in_query"
    assert (await graph_engine.search("Jet Pack")).usage["graph"]["entities"] == ["jet pack"]


async def test_knowledge_query_fuses_the_graph_leg_under_the_acl(graph_engine: ContextEngine) -> None:
    await ingest(graph_engine, SUPPLY, "supply", acl=["group:ops"])
    await ingest(graph_engine, OTHER, "other")
    ops = await graph_engine.knowledge_query("what does Team Atlas own?", expand=False, rerank=False,
                                             principals=["group:ops"])
    assert any("graph" in m.matched_by and "Team Atlas" in m.content for m in ops.matches)
    outsider = await graph_engine.knowledge_query("what does Team Atlas own?", expand=False, rerank=False,
                                                  principals=[])
    assert all("graph" not in m.matched_by for m in outsider.matches)
    assert all(m.source_name == "other" for m in outsider.matches)


async def test_no_connection_is_held_while_the_model_extracts(database_url: str, server: FakeHTTPServer) -> None:
    """With a pool of one connection, a search completes while a slow extraction waits for the model."""
    model = serve_graph_model(server)
    asked, release = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    def slow(body: Any, headers: dict[str, str], target: Any) -> Any:
        loop.call_soon_threadsafe(asked.set)
        asyncio.run_coroutine_threadsafe(release.wait(), loop).result(timeout=HANG_GUARD)
        return model(body, headers, target)

    server.route("POST", "/v1/chat/completions", slow)
    async with ContextEngine(make_config(database_url, **graph_config(server))) as setup:
        await setup.migrate_graph()
        doc = await setup.ingest(text=SUPPLY, name="supply")
    config = make_config(database_url, storage={"auto_migrate": True, "pool_size": 1, "max_overflow": 0,
                                                "pool_timeout": 5}, **graph_config(server))
    async with ContextEngine(config) as eng:
        extraction = asyncio.create_task(eng.extract_graph(doc.documents[0].document_id))
        await finishes(asked.wait(), "the extraction calling the model")  # the model is working on it
        # held until released, so a search that needed the extraction's connection could never finish
        found = await finishes(eng.search("annual suppliers", principals=[]), "a search during the extraction")
        # an anonymous caller is not told whether anyone's document is in the graph yet
        assert found.usage["graph"]["reason"] == "no_entities_in_query" and not extraction.done()
        release.set()
        report = await extraction
    assert report.entities == 5

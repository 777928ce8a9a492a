"""Graph mode through the front doors: ``ingest(mode="graph")`` extracts once the document is stored
(a spreadsheet stays hybrid, saying why), the knowledge tool's four graph actions answer from it
under the ceiling, ``delete_document`` repairs it, and without graph tables graph mode is refused
before anything is stored while the tool's graph actions answer their OFF sentence."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from context_engine import TRUSTED, UNSCOPED, ContextEngine, Scope, call_knowledge_tool
from context_engine.graph.errors import GraphNotEnabled
from context_engine.hooks import Hooks, UsageEvent
from tests.conftest import make_config
from tests.fakes import FakeHTTPServer
from tests.graph_fakes import graph_config, serve_graph_model


@pytest.fixture
def server() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer() as fake:
        serve_graph_model(fake)
        yield fake


async def test_graph_mode_from_ingest_to_the_tool_and_back(database_url: str, server: FakeHTTPServer) -> None:
    async with ContextEngine(make_config(database_url, **graph_config(server))) as engine:
        await engine.migrate_graph()
        report = await engine.ingest(
            text="Acme Corp supplies Widget Pro. Team Atlas manages Widget Pro.", name="supply.md", mode="graph"
        )
        sheet = await engine.ingest(file=b"a,b\n1,2\n", name="numbers.csv", mode="graph")
        doc = report.documents[0]
        assert (doc.mode_used, doc.mode_reason) == ("graph", None)
        assert sheet.documents[0].mode_used == "hybrid" and sheet.documents[0].mode_reason
        near = await call_knowledge_tool(
            engine, action="get_neighbors", entity="Widget Pro", principals=TRUSTED, scope=UNSCOPED
        )
        assert near["success"] is True and "acme corp" in str(near).lower()
        walled = await call_knowledge_tool(
            engine,
            action="get_neighbors",
            entity="Widget Pro",
            principals=TRUSTED,
            scope=Scope(document_ids=(sheet.documents[0].document_id,)),
        )
        assert walled["success"] is False  # outside the ceiling the entity does not exist
        await engine.update_document(doc.document_id, acl=["group:ops"], principals=TRUSTED)  # a new version
        moved = await call_knowledge_tool(
            engine, action="get_neighbors", entity="Widget Pro", principals=["group:ops"], scope=UNSCOPED
        )
        hidden = await call_knowledge_tool(
            engine, action="get_neighbors", entity="Widget Pro", principals=["group:hr"], scope=UNSCOPED
        )
        assert moved["success"] is True and "acme corp" in str(moved).lower()
        assert hidden["success"] is False  # the new ACL holds for the graph too
        await engine.delete_document(doc.document_id, principals=TRUSTED)
        gone = await call_knowledge_tool(
            engine, action="get_neighbors", entity="Widget Pro", principals=TRUSTED, scope=UNSCOPED
        )
        assert gone["success"] is False


async def test_without_graph_tables_graph_mode_is_refused_and_the_actions_are_off(
    database_url: str, server: FakeHTTPServer
) -> None:
    async with ContextEngine(make_config(database_url, **graph_config(server))) as engine:
        with pytest.raises(GraphNotEnabled):
            await engine.ingest(text="Acme Corp supplies Widget Pro.", name="x.md", mode="graph")
        assert (await engine.stats(principals=TRUSTED)).documents == 0
        answer = await call_knowledge_tool(
            engine, action="find_related", principals=TRUSTED, scope=UNSCOPED
        )
    assert answer["success"] is False and answer["error"].startswith("find_related is off")


async def test_the_four_graph_actions_over_mcp(database_url: str, server: FakeHTTPServer) -> None:
    from context_engine.mcp import create_mcp_app
    from tests.test_knowledge_tool_doors import ServerThread
    from tests.test_mcp_app import call

    async with ContextEngine(make_config(database_url, **graph_config(server))) as engine:
        await engine.migrate_graph()
        text = "Acme Corp supplies Widget Pro. Team Atlas manages Widget Pro."
        await engine.ingest(text=text, name="s.md", mode="graph")
        app = create_mcp_app(engine, principals=TRUSTED, scope=UNSCOPED)
        with ServerThread(app) as base:
            url = base + "/mcp"
            answers = {
                "get_neighbors": await call(url, {"action": "get_neighbors", "entity": "Widget Pro"}),
                "traverse": await call(url, {"action": "traverse", "entity": "Acme Corp", "depth": 2}),
                "find_related": await call(url, {"action": "find_related"}),
                "community_summary": await call(url, {"action": "community_summary"}),
            }
        await app.aclose()
    for action, answer in answers.items():
        assert answer["success"] is True, (action, answer)
    assert "team atlas" in str(answers["get_neighbors"]).lower()
    assert "widget pro" in str(answers["traverse"]).lower()


async def test_a_graph_ingest_meters_the_mode_it_ran_in(database_url: str, server: FakeHTTPServer) -> None:
    usage: list[UsageEvent] = []
    hooks = Hooks(on_usage=usage.append)
    async with ContextEngine(make_config(database_url, **graph_config(server)), hooks=hooks) as engine:
        await engine.migrate_graph()
        text = await engine.ingest(text="Acme Corp supplies Widget Pro.", name="supply.md", mode="graph")
        sheet = await engine.ingest(file=b"a,b\n1,2\n", name="numbers.csv", mode="graph")
        plain = await engine.ingest(text="Nothing to extract here.", name="plain.md")
    ingests = [u for u in usage if u.kind == "ingest"]
    assert [u.document_id for u in ingests] == [
        r.documents[0].document_id for r in (text, sheet, plain)
    ]  # one event each, sent once the mode is known
    graph_doc, sheet_doc = text.documents[0], sheet.documents[0]
    assert (ingests[0].detail["mode"], ingests[0].detail["mode_reason"]) == ("graph", None)
    assert ingests[1].detail["mode"] == "hybrid"
    assert ingests[1].detail["mode_reason"] == sheet_doc.mode_reason and sheet_doc.mode_reason
    assert graph_doc.mode_used == "graph"
    assert (ingests[2].detail["mode"], ingests[2].detail["mode_reason"]) == ("hybrid", None)

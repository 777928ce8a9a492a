"""The four navigation actions carried over MCP by the official SDK's own server and client.

Until the knowledge tool serves these actions, a minimal ``MCPServer`` here exposes
``engine.graph_query`` as one tool, with the caller's principals fixed by the host per server (as
a host binds them per session). What travels is the engine's plain answer: JSON-safe, names
redacted, ids intact, and a hidden entity answering exactly like an unknown one.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer

from context_engine import ContextEngine
from context_engine.errors import ContextEngineError
from context_engine.redaction import RedactionPolicy, RedactionRule
from tests.conftest import make_config
from tests.fakes import FakeHTTPServer
from tests.graph_fakes import graph_config, serve_graph_model

DOCS = {
    "ops": ("Acme Corp supplies Widget Pro. Team Atlas owns Widget Pro.", ["group:ops"]),
    "public": ("Globex Inc supplies Acme Corp. Globex Inc builds Hover Board.", []),
}
MASK = RedactionPolicy(rules=[RedactionRule(name="org", pattern=r"(?i)acme corp", apply_at="output")])


@pytest.fixture
def server() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer() as fake:
        serve_graph_model(fake)
        yield fake


@pytest.fixture
async def engine(database_url: str, server: FakeHTTPServer) -> AsyncIterator[ContextEngine]:
    async with ContextEngine(make_config(database_url, **graph_config(server))) as eng:
        await eng.migrate_graph()
        for name, (body, acl) in DOCS.items():
            report = await eng.ingest(text=body, name=name, acl=acl)
            await eng.extract_graph(report.documents[0].document_id)
        yield eng


def graph_server(engine: ContextEngine, principals: list[str]) -> MCPServer:
    served = MCPServer("graph-navigation")

    @served.tool()
    async def graph(action: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Navigate the knowledge graph: get_neighbors, traverse, find_related, community_summary."""
        try:
            answer = await engine.graph_query(action, principals=principals, redaction=MASK, **arguments)
        except ContextEngineError as exc:
            return {"success": False, "error": {"code": exc.code, "message": exc.message}}
        return {"success": True, **answer}

    return served


async def call(client: Client, action: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool("graph", {"action": action, "arguments": arguments})
    assert not result.is_error
    return json.loads(result.content[0].text)  # type: ignore[union-attr]


async def test_the_four_actions_over_mcp(engine: ContextEngine) -> None:
    async with Client(graph_server(engine, ["group:ops"]), mode="legacy") as client:
        near = await call(client, "get_neighbors", entity="Widget Pro")
        assert near["success"] and near["entity"]["name"] == "widget pro"
        assert {(n["name"], n["direction"]) for n in near["neighbors"]} == {("[ORG]", "incoming"),
                                                                            ("team atlas", "incoming")}
        masked = next(n for n in near["neighbors"] if n["name"] == "[ORG]")
        onward = await call(client, "traverse", entity=masked["id"], depth=2)  # the id goes on where the name cannot
        assert {p["target"] for p in onward["paths"]} >= {"globex inc", "widget pro", "hover board"}
        related = await call(client, "find_related", category="CREATION")
        assert [(r["source"], r["target"]) for r in related["relationships"]] == [("globex inc", "hover board")]
        themes = await call(client, "community_summary", query="widget pro")
        assert themes["success"] and themes["count"] >= 1

    async with Client(graph_server(engine, []), mode="legacy") as outsider:
        hidden = await call(outsider, "get_neighbors", entity="Widget Pro")
        unknown = await call(outsider, "get_neighbors", entity="Nothing Such")
        assert hidden["error"]["code"] == unknown["error"]["code"] == "entity_not_found"
        bad = await call(outsider, "traverse", entity="Globex Inc", depth=7)
        assert bad == {"success": False, "error": {"code": "invalid_request",
                                                   "message": "depth must be an integer between 1 and 3"}}
        seen = await call(outsider, "get_neighbors", entity="Globex Inc")
        assert {n["name"] for n in seen["neighbors"]} == {"[ORG]", "hover board"}

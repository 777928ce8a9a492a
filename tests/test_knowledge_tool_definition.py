"""The knowledge tool says only what is true of the deployment it serves.

Two deployments: every action on (a model configured, code execution on, the graph tables made) and
every action that can be off, off (no model, no graph). The definition for each engine, the MCP
listing through the official SDK client and ``discover``'s ``available_actions`` mark OFF exactly
the actions that refuse, and each action marked on does not answer its OFF sentence when called.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from context_engine import TRUSTED, UNSCOPED, ContextEngine, knowledge_tool_definition
from context_engine.knowledge.tool.actions import actions, get
from context_engine.knowledge.tool.definition import deployment_definition
from context_engine.mcp import create_mcp_app
from tests.conftest import make_config
from tests.fakes import FakeHTTPServer
from tests.test_knowledge_tool_doors import ServerThread

SWITCHABLE = {a.name for a in actions() if a.available is not None}
OFF_SENTENCES = {a.name: a.off_sentence for a in actions() if a.available is not None}


def arguments(action: str) -> dict[str, Any]:
    """Each action's required arguments, filled (from the tool's own argument table)."""
    record = get(action)
    assert record is not None
    return {name: "leave" for name in record.required}


@pytest.fixture
def model() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer() as server:  # configured, never needed: no action below reaches the model
        yield server


@pytest.fixture
async def all_on(database_url: str, model: FakeHTTPServer) -> AsyncIterator[ContextEngine]:
    llm = {"provider": "custom", "base_url": model.url("/v1"), "model": "m", "max_retries": 0, "timeout": 5}
    config = make_config(database_url, llm=llm, compute={"enable_code_execution": True})
    async with ContextEngine(config) as engine:
        await engine.migrate_graph()
        yield engine


@pytest.fixture
async def all_off(database_url: str) -> AsyncIterator[ContextEngine]:
    async with ContextEngine(make_config(database_url)) as engine:
        yield engine


def off_in(description: str) -> set[str]:
    """The actions a description marks OFF."""
    marked = set()
    for line in description.splitlines():
        if line.startswith("- ") and "(OFF: " in line:
            marked.add(line[2:].split(":", 1)[0])
    return marked


@contextlib.contextmanager
def mcp_served(engine: ContextEngine) -> Iterator[str]:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    mounted = create_mcp_app(engine, principals=TRUSTED, scope=UNSCOPED)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        async with mounted.lifespan():
            yield

    with ServerThread(Starlette(routes=[Mount("/mcp", mounted)], lifespan=lifespan)) as base:
        yield base + "/mcp"


async def listed_description(url: str) -> str:
    async with httpx2.AsyncClient(timeout=60) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            listed = await client.list_tools()
    return next(t.description for t in listed.tools if t.name == "search_knowledge_base")


async def available(engine: ContextEngine) -> dict[str, str]:
    answer = await engine.search_knowledge_base(action="discover", principals=TRUSTED, scope=UNSCOPED)
    assert answer["success"] is True
    return answer["available_actions"]


async def test_a_deployment_with_every_action_on_marks_none_off(all_on: ContextEngine) -> None:
    assert off_in((await deployment_definition(all_on))["description"]) == set()
    assert off_in(knowledge_tool_definition(all_on, graph=True)["description"]) == set()
    with mcp_served(all_on) as url:
        assert off_in(await listed_description(url)) == set()
    assert not any("(OFF:" in purpose for purpose in (await available(all_on)).values())
    for action in ("get_neighbors", "traverse", "find_related", "community_summary"):
        answer = await all_on.search_knowledge_base(
            action=action, principals=TRUSTED, scope=UNSCOPED, **arguments(action)
        )
        assert answer.get("error") != OFF_SENTENCES[action]


async def test_a_deployment_with_no_model_and_no_graph_marks_exactly_those_off(all_off: ContextEngine) -> None:
    assert off_in((await deployment_definition(all_off))["description"]) == SWITCHABLE
    with mcp_served(all_off) as url:
        description = await listed_description(url)
    assert off_in(description) == SWITCHABLE
    for action in SWITCHABLE:
        assert f"(OFF: {OFF_SENTENCES[action]})" in description
    marked = {a for a, purpose in (await available(all_off)).items() if "(OFF:" in purpose}
    assert marked == SWITCHABLE
    for action in SWITCHABLE:
        answer = await all_off.search_knowledge_base(
            action=action, principals=TRUSTED, scope=UNSCOPED, **arguments(action)
        )
        assert answer == {"success": False, "error": OFF_SENTENCES[action]}


async def test_host_runners_turn_their_actions_on_in_the_definition(all_off: ContextEngine) -> None:
    async def runner(*_args: Any, **_kwargs: Any) -> dict[str, Any]:
        return {}

    described = await deployment_definition(all_off, compute=runner, map_reduce=runner)
    assert off_in(described["description"]) == SWITCHABLE - {"compute", "map_reduce"}

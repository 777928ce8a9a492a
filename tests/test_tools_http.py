"""http tools against a scripted server on 127.0.0.1: how arguments travel, schema checks before any
request, timeouts, the host's client, TSV from config, and no config secret in any response, log
record, hook event or audit row even when the remote service echoes it back."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import httpx
import pytest

from context_engine import ContextEngine
from context_engine.hooks import Hooks
from context_engine.tools import ToolArgumentsInvalid, ToolConfig, ToolExecutionFailed
from context_engine.tools.errors import ToolTimeout
from tests import tools_support
from tests.conftest import make_config
from tests.fakes import FakeHTTPServer, Target, json_reply
from tests.tools_support import SECRET_KEY, HookLog, table_rows

# the tests' databases start migrated (a copy of the session's template; see tests/conftest.py)
pytestmark = pytest.mark.migrated()

hook_log = tools_support.hook_log  # a shared fixture
tools_engine = tools_support.tools_engine  # a shared fixture

TOKEN = "tok-http-5f1c2a9e77d3"
API_KEY = "key-http-8842bd01c6"
SCHEMA = {"properties": {"city": {"type": "string", "minLength": 2}, "days": {"type": "integer"}}, "required": ["city"]}


def tool(server: FakeHTTPServer, path: str, name: str = "weather", **config: Any) -> ToolConfig:
    return ToolConfig(
        name=name,
        kind="http",
        description="weather",
        config={
            "url": server.url(path),
            "headers": {"Authorization": f"Bearer {TOKEN}"},
            "query": {"api_key": API_KEY},
            "parameters": SCHEMA,
            "allowed_hosts": ["127.0.0.1"],
            **config,
        },
    )


def echo(body: Any, headers: dict[str, str], target: Target) -> tuple[int, dict[str, str], Any]:
    """Answers with everything it received, credentials included, as a careless API might."""
    return 200, {}, {"headers": headers, "query": target.query, "body": body}


async def test_get_sends_arguments_as_query_and_post_as_json(tools_engine: ContextEngine) -> None:
    with FakeHTTPServer() as server:
        server.route("GET", "/w", json_reply(200, {"temp": 21}))
        server.route("POST", "/w", json_reply(201, {"created": True}))
        await tools_engine.register_tool(tool(server, "/w"))
        await tools_engine.register_tool(tool(server, "/w", name="post_weather", method="POST"))
        out = await tools_engine.execute_tool("http_weather", {"city": "Lahore", "days": 3}, principals=[])
        assert out["result"] == {"status_code": 200, "data": {"temp": 21}}
        posted = await tools_engine.execute_tool("http_post_weather", {"city": "Oslo"}, principals=[])
        assert posted["result"]["status_code"] == 201
        get, post = server.requests
        assert get.query == {"api_key": API_KEY, "city": "Lahore", "days": "3"}
        assert get.header("authorization") == f"Bearer {TOKEN}"
        assert post.json() == {"city": "Oslo"} and post.query == {"api_key": API_KEY}


@pytest.mark.parametrize("arguments", [{}, {"city": "x"}, {"city": 5}, {"city": "Oslo", "days": "three"}, []])
async def test_arguments_violating_the_schema_never_reach_the_server(
    tools_engine: ContextEngine, database_url: str, arguments: Any
) -> None:
    with FakeHTTPServer() as server:
        server.route("GET", "/w", json_reply(200, {}))
        await tools_engine.register_tool(tool(server, "/w"))
        with pytest.raises(ToolArgumentsInvalid) as caught:
            await tools_engine.execute_tool("http_weather", arguments, principals=[])
        assert caught.value.status == 400 and caught.value.code == "invalid_arguments"
        assert server.requests == []
    rows = table_rows(database_url, "SELECT outcome, error_code FROM ce_tool_calls")
    assert rows == [{"outcome": "invalid_arguments", "error_code": "invalid_arguments"}]


async def test_no_config_secret_leaves_in_results_errors_logs_hooks_or_audit(
    tools_engine: ContextEngine, database_url: str, hook_log: HookLog, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    seen: list[str] = []
    with FakeHTTPServer() as server:
        server.route("GET", "/echo", echo)
        server.route("GET", "/fail", json_reply(500, {"error": f"bad credentials Bearer {TOKEN} key={API_KEY}"}))
        await tools_engine.register_tool(tool(server, "/echo", name="echo"))
        await tools_engine.register_tool(tool(server, "/fail", name="fail", response_mode="tsv"))
        await tools_engine.register_tool(tool(server, "/never", name="slow", url=server.url("/echo"), timeout=0.0001))
        out = await tools_engine.execute_tool("http_echo", {"city": "Oslo"}, principals=[])
        seen.append(json.dumps(out))
        assert server.requests[0].header("authorization") == f"Bearer {TOKEN}"  # it was sent...
        assert out["result"]["data"]["headers"]["authorization"] == "[secret]"  # ...and never returned
        seen.append(json.dumps(await tools_engine.execute_tool("http_fail", {"city": "Oslo"}, principals=[])))
        try:
            await tools_engine.execute_tool("http_slow", {"city": "Oslo"}, principals=[])
        except ToolExecutionFailed as exc:
            seen.append(exc.message)
    seen.append(json.dumps(table_rows(database_url, "SELECT * FROM ce_tool_calls"), default=str))
    seen.append(json.dumps(table_rows(database_url, "SELECT * FROM ce_tools"), default=str))
    seen.extend(json.dumps(e.__dict__, default=str) for e in hook_log.events)
    seen.extend(r.getMessage() + str(r.args) for r in caplog.records)
    seen.append(json.dumps(await tools_engine.tool_calls(), default=str))
    assert len(hook_log.events) == 3
    for text in seen:
        assert TOKEN not in text and API_KEY not in text


async def test_a_slow_server_times_out(tools_engine: ContextEngine, database_url: str) -> None:
    def slow(body: Any, headers: dict[str, str], target: Target) -> tuple[int, dict[str, str], Any]:
        time.sleep(1.5)
        return 200, {}, {}

    with FakeHTTPServer() as server:
        server.route("GET", "/slow", slow)
        await tools_engine.register_tool(tool(server, "/slow", timeout=0.3))
        started = time.perf_counter()
        with pytest.raises(ToolTimeout) as caught:
            await tools_engine.execute_tool("http_weather", {"city": "Oslo"}, principals=[])
        assert time.perf_counter() - started < 1.4
    assert caught.value.status == 504 and caught.value.code == "tool_timeout"
    assert table_rows(database_url, "SELECT outcome, error_code FROM ce_tool_calls") == [
        {"outcome": "error", "error_code": "tool_timeout"}
    ]


async def test_response_mode_from_config_and_the_caller_overrides_it(tools_engine: ContextEngine) -> None:
    items = [{"id": i, "name": f"n{i}"} for i in range(150)]
    with FakeHTTPServer() as server:
        server.route("GET", "/items", json_reply(200, {"items": items}))
        await tools_engine.register_tool(tool(server, "/items", response_mode="tsv"))
        out = await tools_engine.execute_tool("http_weather", {"city": "Oslo"}, principals=[])
        tsv = out["result"]["data"]["items"]
        assert tsv.split("\n")[:2] == ["id\tname", "0\tn0"] and len(tsv.split("\n")) == 101
        assert out["result"]["_result_shaping"] == {"data.items": {"rows_returned": 100, "rows_omitted": 50}}
        as_json = await tools_engine.execute_tool(
            "http_weather",
            {"city": "Oslo"},
            principals=[],
            response_mode="json",
            result_max_rows=None,
            result_max_chars=None,
        )
        assert as_json["result"]["data"]["items"] == items


async def test_the_hosts_client_is_used_and_never_closed(database_url: str) -> None:
    with FakeHTTPServer() as server:
        server.route("GET", "/w", echo)
        host_client = httpx.AsyncClient(headers={"X-Host-Client": "yes"})
        purposes: list[str] = []

        def factory(purpose: str) -> httpx.AsyncClient:
            purposes.append(purpose)
            return host_client

        config = make_config(database_url, secret_key=SECRET_KEY)
        async with ContextEngine(config, http_client_factory=factory, hooks=Hooks()) as eng:
            await eng.register_tool(tool(server, "/w"))
            await eng.execute_tool("http_weather", {"city": "Oslo"}, principals=[])
            await eng.execute_tool("http_weather", {"city": "Rome"}, principals=[])
        assert "tool_http" in purposes
        assert [r.header("x-host-client") for r in server.requests] == ["yes", "yes"]
        assert not host_client.is_closed
        await host_client.aclose()


async def test_a_non_json_body_comes_back_as_text(tools_engine: ContextEngine) -> None:
    with FakeHTTPServer() as server:
        server.route("GET", "/t", json_reply(200, "plain words", {"Content-Type": "text/plain"}))
        await tools_engine.register_tool(tool(server, "/t"))
        out = await tools_engine.execute_tool("http_weather", {"city": "Oslo"}, principals=[])
        assert out["result"] == {"status_code": 200, "data": "plain words"}


async def test_an_oversized_response_is_refused(tools_engine: ContextEngine, database_url: str) -> None:
    with FakeHTTPServer() as server:
        server.route("GET", "/big", json_reply(200, {"blob": "z" * 5000}))
        await tools_engine.register_tool(tool(server, "/big", max_response_bytes=1000))
        with pytest.raises(ToolExecutionFailed) as caught:
            await tools_engine.execute_tool("http_weather", {"city": "Oslo"}, principals=[])
    assert caught.value.code == "response_too_large"
    assert table_rows(database_url, "SELECT result FROM ce_tool_calls") == [{"result": None}]


async def test_the_audit_keeps_the_unshaped_result_under_its_own_cap(
    tools_engine: ContextEngine, database_url: str
) -> None:
    rows = [{"id": i, "text": "w" * 100} for i in range(1000)]  # about 120 KB of JSON
    with FakeHTTPServer() as server:
        server.route("GET", "/rows", json_reply(200, {"rows": rows}))
        server.route("GET", "/missing", json_reply(404, {"error": "no such city"}))
        await tools_engine.register_tool(tool(server, "/rows"))
        await tools_engine.register_tool(tool(server, "/missing", name="missing"))
        out = await tools_engine.execute_tool("http_weather", {"city": "Oslo"}, principals=[], result_max_rows=5)
        assert len(out["result"]["data"]["rows"]) == 5
        missing = await tools_engine.execute_tool("http_missing", {"city": "Oslo"}, principals=[])
        assert missing["result"] == {"status_code": 404, "data": {"error": "no such city"}}
    audit = table_rows(database_url, "SELECT outcome, result FROM ce_tool_calls ORDER BY started_at")
    assert [a["outcome"] for a in audit] == ["success", "http_error"]
    kept = audit[0]["result"]
    assert len(kept) == 50 * 1024 and kept.endswith("[cut at 50 KB]")
    assert kept.count('"id"') > 5  # the audit saw more than the five rows the caller asked for


async def test_llm_query_parameters_go_in_the_query_string_for_every_method(tools_engine: ContextEngine) -> None:
    query_schema = {"properties": {"page": {"type": "integer"}}, "required": ["page"]}
    with FakeHTTPServer() as server:
        server.route("GET", "/q", echo)
        server.route("POST", "/q", echo)
        server.route("QUERY", "/q", echo)
        await tools_engine.register_tool(
            tool(
                server,
                "/q",
                name="only_query",
                parameters=None,
                llmQueryParameters={"properties": {"city": {"type": "string"}}},
            )
        )
        await tools_engine.register_tool(
            tool(server, "/q", name="post_both", method="POST", llmQueryParameters=query_schema)
        )
        await tools_engine.register_tool(
            tool(server, "/q", name="query_only", method="QUERY", parameters=None, llmQueryParameters=query_schema)
        )
        await tools_engine.execute_tool("http_only_query", {"city": "Lahore"}, principals=[])
        await tools_engine.execute_tool("http_post_both", {"city": "Oslo", "page": 2}, principals=[])
        await tools_engine.execute_tool("http_query_only", {"page": 3}, principals=[])
        with pytest.raises(ToolArgumentsInvalid):  # the query schema's required name is enforced too
            await tools_engine.execute_tool("http_post_both", {"city": "Oslo"}, principals=[])
        get, post, query = server.requests
    assert get.query == {"api_key": API_KEY, "city": "Lahore"}
    assert post.query == {"api_key": API_KEY, "page": "2"} and post.json() == {"city": "Oslo"}
    assert query.query == {"api_key": API_KEY, "page": "3"} and query.body in (b"", None)
    listed = {t["name"]: t for t in await tools_engine.list_tools(principals=[])}
    shown = listed["http_post_both"]["parameters"]
    assert set(shown["properties"]) == {"city", "days", "page"} and sorted(shown["required"]) == ["city", "page"]


@pytest.mark.parametrize(
    ("query_schema", "phrase"),
    [
        ({"properties": {"city": {"type": "string"}}}, "in both"),
        ({"properties": {"api_key": {"type": "string"}}}, "the config fixes"),
        ({"type": "array"}, "must describe an object"),
        ("city", "JSON Schema object"),
    ],
)
async def test_a_bad_llm_query_parameters_schema_is_refused_at_registration(
    tools_engine: ContextEngine, query_schema: Any, phrase: str
) -> None:
    from context_engine.tools.errors import ToolConfigInvalid

    with FakeHTTPServer() as server:
        with pytest.raises(ToolConfigInvalid) as caught:
            await tools_engine.register_tool(tool(server, "/q", llmQueryParameters=query_schema))
    assert phrase in caught.value.message

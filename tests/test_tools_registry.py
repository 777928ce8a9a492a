"""Registering, listing, searching and deleting tools; the config is only ciphertext in the table;
name clashes, ACL visibility and the identical 404 for missing and invisible tools."""

from __future__ import annotations

import json
from typing import Any

import pytest

from context_engine import TRUSTED, ContextEngine
from context_engine.errors import ConfigError
from context_engine.tools import (
    AmbiguousToolError,
    InvalidCursor,
    SecretKeyRequired,
    ToolConfig,
    ToolConfigInvalid,
    ToolNotFound,
)
from tests import tools_support
from tests.conftest import make_config
from tests.fakes import FakeHTTPServer, json_reply
from tests.tools_support import SECRET_KEY, table_rows

# the tests' databases start migrated (a copy of the session's template; see tests/conftest.py)
pytestmark = pytest.mark.migrated()

hook_log = tools_support.hook_log  # a shared fixture
tools_engine = tools_support.tools_engine  # a shared fixture
reader_url = tools_support.reader_url  # a shared fixture: a least-privilege role db tools may use

TOKEN = "Bearer tok-registry-0b5e9c1d7a"


def weather(url: str, **extra: Any) -> ToolConfig:
    return ToolConfig(
        name="get_weather",
        kind="http",
        description="Fetch the current weather for a city",
        config={
            "method": "GET",
            "url": url,
            "headers": {"Authorization": TOKEN},
            "parameters": {"properties": {"city": {"type": "string"}}, "required": ["city"]},
            "allowed_hosts": ["127.0.0.1"],
        },
        **extra,
    )


async def test_register_stores_only_ciphertext(tools_engine: ContextEngine, database_url: str) -> None:
    entry = await tools_engine.register_tool(weather("http://127.0.0.1:9/weather"))
    assert entry["name"] == "http_get_weather" and entry["tool_id"]
    rows = table_rows(database_url, "SELECT * FROM ce_tools")
    assert len(rows) == 1
    dumped = json.dumps({k: (v.hex() if isinstance(v, bytes | memoryview) else str(v)) for k, v in rows[0].items()})
    raw = bytes(rows[0]["config"])
    for secret in ("tok-registry-0b5e9c1d7a", "127.0.0.1:9", "allowed_hosts"):
        assert secret not in dumped
        assert secret.encode() not in raw
    assert raw[:1] == b"\x01" and len(raw) > 28  # version, nonce, ciphertext and tag
    # the public listing carries the schema, never the config
    listed = await tools_engine.list_tools(principals=TRUSTED)
    assert "config" not in listed[0] and listed[0]["parameters"]["required"] == ["city"]
    assert "tok-registry" not in json.dumps(listed)


async def test_same_config_encrypts_differently_and_key_matters(database_url: str) -> None:
    async with ContextEngine(make_config(database_url, secret_key=SECRET_KEY)) as eng:
        await eng.register_tool(weather("http://127.0.0.1:9/a"))
        await eng.register_tool(weather("http://127.0.0.1:9/a"))
    blobs = [bytes(r["config"]) for r in table_rows(database_url, "SELECT config FROM ce_tools")]
    assert blobs[0] != blobs[1]  # a fresh nonce per encryption
    async with ContextEngine(make_config(database_url, secret_key="another-key-entirely")) as other:
        tools = await other.list_tools(principals=TRUSTED)
        with pytest.raises(ConfigError) as caught:
            await other.execute_tool("http_get_weather", {"city": "x"}, principals=TRUSTED, tool_id=tools[0]["tool_id"])
        assert caught.value.code == "tool_config_undecryptable"


async def test_missing_secret_key_refuses_registration(database_url: str) -> None:
    async with ContextEngine(make_config(database_url)) as eng:
        with pytest.raises(SecretKeyRequired) as caught:
            await eng.register_tool(weather("http://127.0.0.1:9/x"))
        assert caught.value.code == "secret_key_required"
    assert table_rows(database_url, "SELECT count(*) AS n FROM ce_tools")[0]["n"] == 0


@pytest.mark.parametrize(
    "bad",
    [
        {"kind": "http", "config": {"url": "ftp://example.com/x"}},
        {"kind": "http", "config": {"url": "https://example.com", "method": "TRACE"}},
        {"kind": "http", "config": {"url": "https://example.com", "parameters": {"type": "nonsense"}}},
        {"kind": "http", "config": {"url": "https://example.com", "surprise": 1}},
        {"kind": "db", "config": {"database_url": "mysql://x"}},
        {"kind": "db", "config": {"database_url": "postgresql://x/y", "max_rows": 0}},
        {"kind": "mcp", "config": {"url": "https://example.com/mcp"}},
    ],
)
async def test_invalid_configs_are_refused_and_nothing_is_stored(
    tools_engine: ContextEngine, database_url: str, bad: dict[str, Any]
) -> None:
    with pytest.raises(ToolConfigInvalid) as caught:
        await tools_engine.register_tool(ToolConfig(name="t", **bad))
    assert caught.value.status == 400 and caught.value.code == "invalid_tool_config"
    assert table_rows(database_url, "SELECT count(*) AS n FROM ce_tools")[0]["n"] == 0


async def test_two_tools_with_one_name_need_a_tool_id(tools_engine: ContextEngine) -> None:
    with FakeHTTPServer() as server:
        server.route("GET", "/a", json_reply(200, {"which": "a"}))
        server.route("GET", "/b", json_reply(200, {"which": "b"}))
        a = await tools_engine.register_tool(weather(server.url("/a")))
        b = await tools_engine.register_tool(weather(server.url("/b")))
        with pytest.raises(AmbiguousToolError) as caught:
            await tools_engine.execute_tool("http_get_weather", {"city": "x"}, principals=["u"])
        assert caught.value.status == 409 and caught.value.code == "ambiguous_tool"
        assert sorted(caught.value.details["tool_ids"]) == sorted([a["tool_id"], b["tool_id"]])
        out = await tools_engine.execute_tool("http_get_weather", {"city": "x"}, principals=["u"], tool_id=b["tool_id"])
        assert out["result"]["data"] == {"which": "b"} and out["tool_id"] == b["tool_id"]
        assert len(server.requests) == 1


async def test_invisible_and_missing_tools_read_the_same(tools_engine: ContextEngine) -> None:
    secret = await tools_engine.register_tool(weather("http://127.0.0.1:9/w", acl=["group:ops"]))
    answers = []
    for kwargs in ({}, {"tool_id": secret["tool_id"]}):
        with pytest.raises(ToolNotFound) as hidden:
            await tools_engine.execute_tool("http_get_weather", {"city": "x"}, principals=["user:a"], **kwargs)
        answers.append(hidden.value)
    with pytest.raises(ToolNotFound) as missing:
        await tools_engine.execute_tool(
            "http_get_weather", {"city": "x"}, principals=["user:a"], tool_id="00000000-0000-0000-0000-000000000000"
        )
    answers.append(missing.value)
    with pytest.raises(ToolNotFound) as bad_id:
        await tools_engine.execute_tool("http_get_weather", {"city": "x"}, principals=["user:a"], tool_id="nope")
    answers.append(bad_id.value)
    shapes = {(e.status, e.code, e.message, json.dumps(e.details)) for e in answers}
    assert shapes == {(404, "tool_not_found", "tool 'http_get_weather' not found", "{}")}
    assert await tools_engine.list_tools(principals=["user:a"]) == []
    assert len(await tools_engine.list_tools(principals=["group:ops"])) == 1


async def test_search_filters_and_with_query_ranks_and_excludes(tools_engine: ContextEngine, reader_url: str) -> None:
    await tools_engine.register_tool(weather("https://example.com/w"))
    await tools_engine.register_tool(
        ToolConfig(name="sales", kind="db", description="Orders and revenue", config={"database_url": reader_url})
    )
    await tools_engine.register_tool(
        ToolConfig(
            name="stock",
            kind="db",
            description="Warehouse stock levels",
            config={"database_url": reader_url},
            requires_approval=True,
        )
    )

    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    tools_engine.register_function_tool(add)
    caller = ["user:a"]
    names = lambda page: [t["name"] for t in page]  # noqa: E731
    assert names(await tools_engine.search_tools("", principals=caller, kind="db")) == ["db_sales", "db_stock"]
    assert names(await tools_engine.search_tools("", principals=caller, kind="db", requires_approval=False)) == [
        "db_sales"
    ]
    assert names(await tools_engine.search_tools("weather", principals=caller)) == ["http_get_weather"]
    assert names(await tools_engine.search_tools("nonsense", principals=caller, kind="db")) == []
    assert names(await tools_engine.search_tools("", principals=caller, kind="spaceship")) == []
    assert names(await tools_engine.search_tools("", principals=caller, kind=["function", "http"])) == [
        "fn_add",
        "http_get_weather",
    ]
    assert names(await tools_engine.search_tools("", principals=caller, name_contains="STO")) == ["db_stock"]
    # the query ranks within the filters: a name hit outranks a description hit
    ranked = await tools_engine.search_tools("stock orders", principals=caller)
    assert names(ranked) == ["db_stock", "db_sales"]
    assert len(await tools_engine.list_tools(principals=caller)) == 4


async def test_paging_with_a_cursor_bound_to_query_and_filters(tools_engine: ContextEngine, reader_url: str) -> None:
    for i in range(5):
        await tools_engine.register_tool(
            ToolConfig(name=f"report{i}", kind="db", description="report", config={"database_url": reader_url})
        )
    first = await tools_engine.search_tools("", principals=[], kind="db", limit=2)
    assert len(first) == 2 and first.next_cursor
    second = await tools_engine.search_tools("", principals=[], kind="db", limit=2, cursor=first.next_cursor)
    third = await tools_engine.search_tools("", principals=[], kind="db", limit=2, cursor=second.next_cursor)
    assert third.next_cursor is None
    assert [t["name"] for t in [*first, *second, *third]] == [f"db_report{i}" for i in range(5)]
    with pytest.raises(InvalidCursor) as other_filters:
        await tools_engine.search_tools("", principals=[], kind="http", limit=2, cursor=first.next_cursor)
    with pytest.raises(InvalidCursor):
        await tools_engine.search_tools("report", principals=[], kind="db", limit=2, cursor=first.next_cursor)
    with pytest.raises(InvalidCursor):
        await tools_engine.search_tools("", principals=[], kind="db", cursor="not-a-cursor")
    assert other_filters.value.status == 400


async def test_delete_tool(tools_engine: ContextEngine, database_url: str) -> None:
    entry = await tools_engine.register_tool(weather("https://example.com/w", acl=["group:ops"]))
    with pytest.raises(ToolNotFound):
        await tools_engine.delete_tool(entry["tool_id"], principals=["user:a"])  # cannot see it
    await tools_engine.delete_tool(entry["tool_id"], principals=["group:ops"])
    assert table_rows(database_url, "SELECT count(*) AS n FROM ce_tools")[0]["n"] == 0
    with pytest.raises(ToolNotFound):
        await tools_engine.delete_tool(entry["tool_id"], principals=TRUSTED)


async def test_function_tools_validate_arguments_and_respect_acl(tools_engine: ContextEngine) -> None:
    from context_engine.tools import ToolArgumentsInvalid

    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    entry = tools_engine.register_function_tool(add, acl=["group:math"])
    assert entry["name"] == "fn_add" and entry["tool_id"] is None
    assert entry["parameters"]["required"] == ["a", "b"] and entry["description"] == "Add two integers."
    out = await tools_engine.execute_tool("fn_add", {"a": 2, "b": 3}, principals=["group:math"])
    assert out["result"] == 5 and out["usage"] == {"kind": "tool", "units": 1}
    with pytest.raises(ToolArgumentsInvalid) as bad:
        await tools_engine.execute_tool("fn_add", {"a": "two", "b": 3}, principals=["group:math"])
    assert bad.value.status == 400 and bad.value.code == "invalid_arguments" and "a" in bad.value.details["path"]
    with pytest.raises(ToolArgumentsInvalid):
        await tools_engine.execute_tool("fn_add", {"a": 1, "b": 2, "c": 3}, principals=["group:math"])
    with pytest.raises(ToolNotFound):
        await tools_engine.execute_tool("fn_add", {"a": 2, "b": 3}, principals=["user:a"])


async def test_a_function_tool_needs_a_usable_name_and_named_parameters(tools_engine: ContextEngine) -> None:
    with pytest.raises(ToolConfigInvalid):
        tools_engine.register_function_tool(lambda a: a)  # "<lambda>" is not a tool name
    with pytest.raises(ToolConfigInvalid):
        tools_engine.register_function_tool(lambda *values: sum(values), name="total")
    entry = tools_engine.register_function_tool(lambda a: a * 2, name="double")
    assert entry["name"] == "fn_double"


async def test_a_tool_may_be_given_as_a_dict_and_bad_fields_are_named(
    tools_engine: ContextEngine, reader_url: str
) -> None:
    entry = await tools_engine.register_tool(
        {"name": "sales", "kind": "db", "config": {"database_url": reader_url}, "acl": ["g"]}
    )
    assert entry["name"] == "db_sales" and entry["acl"] == ["g"]
    for bad, field in (
        ({"name": "9lives", "kind": "db", "config": {}}, "name"),
        ({"name": "x", "kind": "ftp", "config": {}}, "kind"),
        ({"name": "x", "kind": "http", "config": {}, "owner": "me"}, "owner"),
    ):
        with pytest.raises(ToolConfigInvalid) as caught:
            await tools_engine.register_tool(bad)
        assert caught.value.message.startswith(f"invalid tool: {field}")
    with pytest.raises(ToolConfigInvalid):
        await tools_engine.register_tool("http_x")

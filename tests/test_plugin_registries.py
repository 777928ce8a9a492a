"""A tool kind and a knowledge-tool action are each one record and one ``register`` call: the kind
and the action defined here, in a test module, show at every door with no other file edited.

The ``echo`` kind is checked at registration, stored (the database no longer fixes the kinds),
listed and run through the CLI, the routes of all three adapters, MCP over the SDK's own client and
the OpenAPI document, under the same ACL, approval-free gate, secret scrubbing and audit as the
built-in kinds. The ``count_word`` action is in the exported definition, the MCP listing, ``discover``'s
``available_actions`` and ``off_actions``, and answers through the engine method,
``call_knowledge_tool`` and MCP, reading under the caller's principals and the host's ceiling.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from context_engine import TRUSTED, UNSCOPED, ContextEngine, call_knowledge_tool, knowledge_tool_definition
from context_engine.cli.tools import add_parser, run
from context_engine.errors import NotFound
from context_engine.knowledge.tool import actions
from context_engine.knowledge.tool.actions import KNOWLEDGE_ACTIONS, Action
from context_engine.knowledge.tool.call import Refusal, ToolCall, document_id
from context_engine.knowledge.tool.capabilities import Capabilities, Deployment
from context_engine.knowledge.tool.definition import deployment_definition
from context_engine.mcp import create_mcp_app, current_request
from context_engine.tools import ToolConfig, ToolConfigInvalid, ToolExecutionFailed, kinds
from context_engine.tools.kinds import KindContext, ToolKindSpec
from context_engine.tools.models import tool_config
from context_engine.tools.schema import checked_schema
from routing_core.openapi import build_openapi
from tests.conftest import make_config
from tests.test_conformance import CLIENTS, Caller, HostLog, host_callables
from tests.test_knowledge_tool_doors import ServerThread
from tests.tools_support import SECRET_KEY, table_rows

API_KEY = "echo-api-key-5f4e3d2c1b"
MISSING = "6b1c1c1e-0000-4000-8000-00000000beef"

# ------------------------------------------------------------------------------------- the kind


def _check_echo(config: dict[str, Any]) -> dict[str, Any]:
    unknown = set(config) - {"greeting", "api_key", "parameters"}
    if unknown:
        raise ToolConfigInvalid(f"echo tool config has unknown keys: {sorted(unknown)}")
    if not isinstance(config.get("greeting"), str) or not config["greeting"]:
        raise ToolConfigInvalid("echo tool config needs a greeting")
    return checked_schema(config.get("parameters"))


async def _call_echo(config: dict[str, Any], arguments: dict[str, Any], context: KindContext) -> dict[str, Any]:
    # careless on purpose: it sends its credential back, and the governed path must scrub it
    return {"greeting": config["greeting"], "echo": arguments, "leaked": config.get("api_key")}


ECHO = ToolKindSpec(
    name="echo",
    call_prefix="echo_",
    summary="answers with its greeting and the arguments it was given",
    check_config=_check_echo,
    call=_call_echo,
)

WHO_SCHEMA = {"type": "object", "properties": {"who": {"type": "string"}}, "required": ["who"]}


@pytest.fixture
def echo_kind() -> Iterator[ToolKindSpec]:
    kinds.register(ECHO)
    try:
        yield ECHO
    finally:
        kinds.unregister(ECHO.name)


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="context-engine")
    add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(list(argv))


def _register_with_the_cli(database_url: str, tmp_path: Path, name: str, acl: str) -> str:
    config = tmp_path / f"{name}.json"
    config.write_text(json.dumps({"greeting": "hello", "api_key": API_KEY, "parameters": WHO_SCHEMA}))
    code = run(_parse("tools", "add", name, "--kind", "echo", "--config-file", str(config), "--acl", acl,
                      "--database-url", database_url))  # fmt: skip
    assert code == 0
    return f"echo_{name}"


@pytest.fixture
def migrated(database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    async def prepare() -> None:
        async with ContextEngine(make_config(database_url)) as engine:
            await engine.stats(principals=[])

    asyncio.run(prepare())
    monkeypatch.setenv("CE_SECRET_KEY", SECRET_KEY)
    return database_url


def test_a_registered_kind_is_a_cli_choice_checked_stored_and_listed(
    migrated: str, tmp_path: Path, echo_kind: ToolKindSpec, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _register_with_the_cli(migrated, tmp_path, "greeter", "group:hr") == "echo_greeter"
    assert capsys.readouterr().out.startswith("registered echo_greeter (tool_id ")
    stored = table_rows(migrated, "SELECT kind, call_name, config FROM ce_tools")
    assert [(r["kind"], r["call_name"]) for r in stored] == [("echo", "echo_greeter")]
    assert API_KEY.encode() not in bytes(stored[0]["config"])  # encrypted like any other kind's config

    assert run(_parse("tools", "list", "--database-url", migrated)) == 0
    table = capsys.readouterr().out
    assert "echo_greeter" in table and " echo " in table and API_KEY not in table

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"greeting": ""}))
    assert run(_parse("tools", "add", "x", "--kind", "echo", "--config-file", str(bad), "--database-url", migrated)) == 1  # noqa: E501
    assert "invalid_tool_config: echo tool config needs a greeting" in capsys.readouterr().err

    # the model and its JSON Schema follow the registry
    assert "echo" in ToolConfig.model_json_schema()["properties"]["kind"]["enum"]
    assert ToolConfig(name="t", kind="echo").call_name == "echo_t"


def test_a_kind_no_module_registers_is_refused_everywhere(migrated: str, tmp_path: Path) -> None:
    assert "echo" not in kinds.listed()
    with pytest.raises(SystemExit):  # argparse: not one of the choices
        _parse("tools", "add", "x", "--kind", "echo", "--config-file", "-")
    with pytest.raises(ToolConfigInvalid, match="kind: Value error, kind must be one of http, db, mcp, function"):
        tool_config({"name": "x", "kind": "echo", "config": {"greeting": "hi"}})
    assert "echo" not in ToolConfig.model_json_schema()["properties"]["kind"]["enum"]


def test_a_stored_tool_whose_kind_is_gone_is_listed_but_cannot_run(
    migrated: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kinds.register(ECHO)
    try:
        _register_with_the_cli(migrated, tmp_path, "orphan", "")
    finally:
        kinds.unregister(ECHO.name)

    async def use() -> tuple[list[dict[str, Any]], ToolExecutionFailed]:
        async with ContextEngine(make_config(migrated, secret_key=SECRET_KEY)) as engine:
            listed = await engine.list_tools(principals=TRUSTED)
            with pytest.raises(ToolExecutionFailed) as refused:
                await engine.execute_tool("echo_orphan", {"who": "ann"}, principals=TRUSTED)
        return listed, refused.value

    listed, refused = asyncio.run(use())
    assert [(t["name"], t["kind"]) for t in listed] == [("echo_orphan", "echo")]
    assert (refused.code, refused.status) == ("tool_unavailable", 502)
    assert "this tool's kind is not registered in this process" in refused.message
    audit = table_rows(migrated, "SELECT kind, outcome, error_code FROM ce_tool_calls")
    assert audit == [{"kind": "echo", "outcome": "error", "error_code": "tool_unavailable"}]


@pytest.mark.parametrize("adapter", ["fastapi", "flask", "django"])
def test_a_registered_kind_is_served_by_every_adapter(
    adapter: str, migrated: str, tmp_path: Path, echo_kind: ToolKindSpec
) -> None:
    name = _register_with_the_cli(migrated, tmp_path, "greeter", "group:hr")
    engine = ContextEngine(make_config(migrated, secret_key=SECRET_KEY))
    auth, principals = host_callables(HostLog())
    with CLIENTS[adapter](engine, auth, principals) as send:
        call = Caller(send)
        listed = call("GET", "/tools", who="group:hr", query={"kind": "echo"})
        hidden = call("GET", "/tools", who="group:eng", query={"kind": "echo"})
        unknown = call("GET", "/tools", who="group:hr", query={"kind": "telnet"})
        ran = call("POST", "/tools/execute", who="group:hr", json_body={"name": name, "arguments": {"who": "ann"}})
        refused = call("POST", "/tools/execute", who="group:eng", json_body={"name": name, "arguments": {"who": "x"}})
        invalid = call("POST", "/tools/execute", who="group:hr", json_body={"name": name, "arguments": {}})
    assert listed.status == 200 and [(t["name"], t["kind"]) for t in listed.body["tools"]] == [(name, "echo")]
    assert hidden.status == 200 and hidden.body["tools"] == []
    assert unknown.status == 400 and unknown.body["error"]["code"] == "invalid_request"
    assert "echo" in unknown.body["error"]["message"]  # the enum the route checks is the registry's
    assert ran.status == 200, ran.body
    assert ran.body["result"]["greeting"] == "hello" and ran.body["result"]["echo"] == {"who": "ann"}
    assert API_KEY not in ran.raw.decode()  # the kind leaked its credential; the governed path scrubbed it
    assert refused.status == 404 and refused.body["error"]["code"] == "tool_not_found"
    assert invalid.status == 400 and invalid.body["error"]["code"] == "invalid_arguments"
    audit = table_rows(migrated, "SELECT kind, outcome FROM ce_tool_calls ORDER BY started_at")
    assert [(r["kind"], r["outcome"]) for r in audit] == [
        ("echo", "success"), (None, "not_found"), ("echo", "invalid_arguments"),
    ]  # fmt: skip


def test_the_openapi_document_lists_the_registered_kinds(echo_kind: ToolKindSpec) -> None:
    spec = build_openapi()
    params = {p["name"]: p["schema"] for p in spec["paths"]["/tools"]["get"]["parameters"]}
    assert params["kind"]["enum"] == ["http", "db", "mcp", "echo", "function"]


def test_kind_registrations_that_would_collide_are_refused(echo_kind: ToolKindSpec) -> None:
    def spec(name: str, prefix: str) -> ToolKindSpec:
        return ToolKindSpec(name, prefix, "x", _check_echo, _call_echo)

    with pytest.raises(ValueError, match="already registered"):
        kinds.register(spec("echo", "echo2_"))
    with pytest.raises(ValueError, match="already the prefix of kind 'http'"):
        kinds.register(spec("web", "http_"))
    with pytest.raises(ValueError, match="already the prefix of kind 'function'"):
        kinds.register(spec("fun", "fn_"))
    for name in ("function", "Echo", "e-cho", ""):
        with pytest.raises(ValueError, match="lower-case"):
            kinds.register(spec(name, "z_"))
    assert kinds.names() == ["http", "db", "mcp", "echo"]


# ------------------------------------------------------------------------------------ the action

SWITCH = {"on": True}


def _word_on(capabilities: Capabilities) -> bool:
    return SWITCH["on"]


def _not_found(doc_id: str) -> Refusal:
    return Refusal(f"document {doc_id} was not found.", next_action={"action": "discover"})


async def count_word(call: ToolCall) -> dict[str, Any]:
    """How often ``word`` occurs in one document the caller may read within the ceiling."""
    doc_id = document_id(call.args["document_id"])
    if not call.within_ceiling(doc_id):
        raise _not_found(doc_id)
    try:
        doc = await call.engine.get_document(
            doc_id, principals=call.caller, redaction=call.redaction, redaction_secret_key=call.secret_key
        )
    except NotFound:
        raise _not_found(doc_id) from None
    if call.ceiling.source_ids is not None and doc.source_id not in call.ceiling.source_ids:
        raise _not_found(doc_id)
    words = (call.redactor.text(doc.text) or "").lower().split()
    word = call.args["word"].lower()
    return {"success": True, "document_id": doc_id, "word": word, "count": sum(w.strip(".,") == word for w in words)}


COUNT_WORD = Action(
    name="count_word",
    purpose="how often one word occurs in a document",
    handler=count_word,
    required=("document_id", "word"),
    properties={"word": {"type": "string", "description": "count_word: the word to count."}},
    available=_word_on,
    off_sentence="count_word is off on this deployment. Use search for the word instead.",
)


@pytest.fixture
def word_action() -> Iterator[Action]:
    actions.register(COUNT_WORD)
    SWITCH["on"] = True
    try:
        yield COUNT_WORD
    finally:
        actions.unregister(COUNT_WORD.name)
        SWITCH["on"] = True


async def test_a_registered_action_is_in_the_definition_discover_and_off_actions(
    database_url: str, word_action: Action
) -> None:
    assert list(KNOWLEDGE_ACTIONS)[-1] == "count_word" and len(KNOWLEDGE_ACTIONS) == 14
    bare = knowledge_tool_definition()
    assert "count_word" in bare["input_schema"]["properties"]["action"]["enum"]
    assert bare["input_schema"]["properties"]["word"]["description"] == "count_word: the word to count."
    assert "- count_word: how often one word occurs in a document" in bare["description"]
    async with ContextEngine(make_config(database_url)) as engine:
        report = (await engine.ingest(text="The cat sat. The cat ran.", name="cats.md")).documents[0]
        by_method = await engine.search_knowledge_base(
            action="count_word", document_id=report.document_id, word="cat", principals=TRUSTED, scope=UNSCOPED
        )
        by_call = await call_knowledge_tool(
            engine, principals=TRUSTED, scope=UNSCOPED, action="count_word", document_id=report.document_id, word="cat"
        )
        missing = await call_knowledge_tool(
            engine, principals=TRUSTED, scope=UNSCOPED, action="count_word", document_id=report.document_id
        )
        stray = await call_knowledge_tool(
            engine, principals=TRUSTED, scope=UNSCOPED, action="count_word", document_id=report.document_id,
            word="cat", top_k=3,
        )  # fmt: skip
        discovered = await call_knowledge_tool(engine, principals=TRUSTED, scope=UNSCOPED, action="discover")
        assert actions.off_actions(Deployment(engine)).get("count_word") is None
        SWITCH["on"] = False
        off = await call_knowledge_tool(
            engine, principals=TRUSTED, scope=UNSCOPED, action="count_word", document_id=report.document_id, word="cat"
        )
        off_definition = await deployment_definition(engine)
        off_discovered = await call_knowledge_tool(engine, principals=TRUSTED, scope=UNSCOPED, action="discover")
        off_listed = actions.off_actions(Deployment(engine))
    assert by_method == by_call == {"success": True, "document_id": report.document_id, "word": "cat", "count": 2}
    assert missing["success"] is False and "count_word needs word" in missing["error"]
    assert stray["success"] is False and "top_k is not used by count_word" in stray["error"]
    assert discovered["available_actions"]["count_word"] == "how often one word occurs in a document"
    assert off == {"success": False, "error": COUNT_WORD.off_sentence}
    assert f"- count_word: how often one word occurs in a document (OFF: {COUNT_WORD.off_sentence})" in (
        off_definition["description"]
    )
    assert off_discovered["available_actions"]["count_word"].endswith(f"(OFF: {COUNT_WORD.off_sentence})")
    assert off_listed["count_word"] == COUNT_WORD.off_sentence


def test_action_registrations_that_would_disagree_are_refused(word_action: Action) -> None:
    def action(name: str = "other", **fields: Any) -> Action:
        return Action(name=name, purpose="p", handler=count_word, **fields)

    with pytest.raises(ValueError, match="already registered"):
        actions.register(action("count_word"))
    with pytest.raises(ValueError, match="takes 'colour', which no table declares"):
        actions.register(action(required=("colour",)))
    with pytest.raises(ValueError, match="'query' of 'other' differs"):
        actions.register(action(properties={"query": {"type": "integer", "description": "a number"}}))
    with pytest.raises(ValueError, match="'word' of 'other' differs"):
        actions.register(action(properties={"word": {"type": "string", "description": "another word"}}))
    with pytest.raises(ValueError, match="needs the off_sentence"):
        actions.register(action(available=_word_on))
    with pytest.raises(ValueError, match="lower-case"):
        actions.register(action("Count Word"))
    assert "other" not in KNOWLEDGE_ACTIONS


# ------------------------------------------------------------------------------- both, over MCP


async def _mcp(url: str, team: str, calls: list[tuple[str, dict[str, Any]]]) -> tuple[dict[str, Any], list[Any]]:
    async with httpx2.AsyncClient(headers={"x-team": team}, timeout=60) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            answers = [(await client.call_tool(name, args)).structured_content for name, args in calls]
    return listed, answers


async def test_mcp_serves_the_registered_kind_and_action(
    migrated: str, tmp_path: Path, echo_kind: ToolKindSpec, word_action: Action
) -> None:
    name = await asyncio.to_thread(_register_with_the_cli, migrated, tmp_path, "greeter", "group:hr")

    def principals() -> list[str]:
        request = current_request()
        assert request is not None
        return [request.headers.get("x-team", "nobody")]

    async with ContextEngine(make_config(migrated, secret_key=SECRET_KEY)) as engine:
        mine = (await engine.ingest(text="Dogs bark. Dogs play.", name="dogs.md", acl=["group:hr"])).documents[0]
        theirs = (await engine.ingest(text="Dogs sleep.", name="secret.md", acl=["group:eng"])).documents[0]
        app = create_mcp_app(engine, principals=principals, scope=UNSCOPED)
        with ServerThread(app) as base:
            listed, answers = await _mcp(
                base + "/mcp",
                "group:hr",
                [
                    ("search_tools", {"kind": "echo"}),
                    ("execute_tool", {"name": name, "arguments": {"who": "ann"}}),
                    *(
                        ("search_knowledge_base", {"action": "count_word", "document_id": doc, "word": "dogs"})
                        for doc in (mine.document_id, theirs.document_id, MISSING)
                    ),
                ],
            )
    kind_enum = listed["search_tools"].input_schema["properties"]["kind"]["enum"]
    assert kind_enum == ["http", "db", "mcp", "echo", "function"]
    knowledge = listed["search_knowledge_base"]
    assert "count_word" in knowledge.input_schema["properties"]["action"]["enum"]
    assert "word" in knowledge.input_schema["properties"]
    assert "- count_word: how often one word occurs in a document" in (knowledge.description or "")
    found, ran, counted, hidden, missing = answers
    assert found["success"] is True and [t["name"] for t in found["tools"]] == [name]
    assert ran["success"] is True and ran["result"]["echo"] == {"who": "ann"} and API_KEY not in json.dumps(ran)
    assert counted == {"success": True, "document_id": mine.document_id, "word": "dogs", "count": 2}
    # another team's document reads exactly like one that does not exist
    assert hidden["success"] is False and missing["success"] is False
    assert hidden["error"].replace(theirs.document_id, "<id>") == missing["error"].replace(MISSING, "<id>")

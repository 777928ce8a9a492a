"""structured_call against scripted OpenAI-compatible and Anthropic servers on 127.0.0.1: each mode
(native, tool, prompt), the prompt path's one retry, no re-ask under an enforced schema, refusals,
``enforce=False`` and the schema linters."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from context_engine.config import LLMConfig
from context_engine.llm import (
    SchemaError,
    StructuredCallError,
    StructuredRefusal,
    lint_unenforced,
    reset_native_schema_support,
    structured_call,
    structured_repair_count,
    validate,
)
from tests.fakes import FakeHTTPServer, json_reply, sequence
from tests.knowledge_fakes import completion

SCHEMA: dict[str, Any] = {"type": "object", "properties": {"total": {"type": ["number", "null"]}}}


@pytest.fixture
def server() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer() as fake:
        yield fake


@pytest.fixture(autouse=True)
def _fresh_memo() -> Iterator[None]:
    reset_native_schema_support()
    yield
    reset_native_schema_support()


def openai_like(server: FakeHTTPServer) -> LLMConfig:
    return LLMConfig(provider="custom", base_url=server.url("/v1"), model="m", api_key="k", max_retries=0)


def anthropic(server: FakeHTTPServer) -> LLMConfig:
    import anthropic  # noqa: F401  (the anthropic extra is part of the test install)
    return LLMConfig(provider="anthropic", base_url=server.url(), model="c", api_key="k", max_retries=0)


def message(content: list[dict[str, Any]], stop: str = "end_turn") -> dict[str, Any]:
    return {"id": "m", "type": "message", "role": "assistant", "model": "c", "content": content,
            "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": 8, "output_tokens": 2}}  # fmt: skip


def refuse_json_schema(*replies: Any) -> Any:
    answers = sequence(*replies)

    def handler(body: Any, headers: dict[str, str], target: Any) -> Any:
        if body.get("response_format", {}).get("type") == "json_schema":
            return 400, {}, {"error": {"message": "response_format json_schema is not supported"}}
        return answers(body, headers, target)

    return handler


async def ask(config: LLMConfig, **kwargs: Any) -> Any:
    options: dict[str, Any] = {"system": "Extract.", "user": "Total: 12", "schema": SCHEMA, "schema_name": "invoice"}
    return await structured_call(config, **{**options, **kwargs})


# ------------------------------------------------------------------------------------ modes
async def test_native_mode_takes_a_config_and_validates(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/chat/completions", json_reply(200, completion('{"total": 12}', 30)))
    result = await ask(openai_like(server))
    assert (result.value, result.mode, result.attempts, result.tokens) == ({"total": 12}, "native", 1, 30)


async def test_a_native_reply_breaking_the_schema_is_refused_not_re_asked(server: FakeHTTPServer) -> None:
    raw = '{"total": "twelve"}'
    server.route("POST", "/v1/chat/completions", json_reply(200, completion(raw, 30)))
    with pytest.raises(StructuredCallError) as failed:
        await ask(openai_like(server))
    err = failed.value
    assert (err.mode, err.attempts, err.tokens, err.raw, err.code) == ("native", 1, 30, raw, "llm_invalid_reply")
    assert "twelve" not in str(err) and "twelve" not in repr(err) and len(server.requests) == 1


async def test_the_prompt_path_retries_once_with_the_error_then_fails_loudly(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/chat/completions", refuse_json_schema(
        json_reply(200, completion("Sure! The total is 12.", 20)), json_reply(200, completion('{"total": 12}', 25))
    ))  # fmt: skip
    result = await ask(openai_like(server))
    assert (result.value, result.mode, result.attempts, result.tokens) == ({"total": 12}, "prompt", 2, 45)
    retry = server.requests[2].json()["messages"]
    assert retry[-2] == {"role": "assistant", "content": "Sure! The total is 12."}
    assert "not valid JSON" in retry[-1]["content"]
    server.route("POST", "/v1/chat/completions", json_reply(200, completion("[]", 5)))
    with pytest.raises(StructuredCallError) as failed:
        await ask(openai_like(server))
    assert (failed.value.mode, failed.value.attempts, failed.value.raw) == ("prompt", 2, "[]")


async def test_anthropic_native_and_tool_modes(server: FakeHTTPServer) -> None:
    config = anthropic(server)
    server.route("POST", "/v1/messages", json_reply(200, message([{"type": "text", "text": '{"total": 3}'}])))
    native = await ask(config)
    assert (native.value, native.mode, native.tokens) == ({"total": 3}, "native", 10)

    def tool_only(body: Any, _h: dict[str, str], _t: Any) -> Any:
        if "output_config" in body:
            return 400, {}, {"type": "error", "error": {"type": "invalid_request_error",
                                                        "message": "output_config: Extra inputs are not permitted"}}
        return 200, {}, message([{"type": "tool_use", "id": "t", "name": "invoice", "input": {"total": None}}])

    server.route("POST", "/v1/messages", tool_only)
    tool = await ask(config)
    assert (tool.value, tool.mode, tool.attempts) == ({"total": None}, "tool", 1)


async def test_a_tool_reply_breaking_the_schema_is_not_re_asked(server: FakeHTTPServer) -> None:
    config = anthropic(server)

    def tool_only(body: Any, _h: dict[str, str], _t: Any) -> Any:
        if "output_config" in body:
            return 400, {}, {"type": "error", "error": {"type": "invalid_request_error",
                                                        "message": "output_config is not supported"}}
        return 200, {}, message([{"type": "tool_use", "id": "t", "name": "invoice", "input": {"sum": 1}}])

    server.route("POST", "/v1/messages", tool_only)
    with pytest.raises(StructuredCallError) as failed:
        await ask(config)
    assert (failed.value.mode, failed.value.attempts) == ("tool", 1) and len(server.requests) == 2


# ------------------------------------------------------------------------------------ refusals
async def test_refusals_are_structured_refusals_on_both_wire_formats(server: FakeHTTPServer) -> None:
    refused = {"id": "x", "object": "chat.completion", "usage": {"total_tokens": 9},
               "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "refusal": "I can't."}}]}
    server.route("POST", "/v1/chat/completions", json_reply(200, refused))
    with pytest.raises(StructuredRefusal) as openai_refusal:
        await ask(openai_like(server))
    assert openai_refusal.value.code == "llm_refused" and isinstance(openai_refusal.value, StructuredCallError)
    server.route("POST", "/v1/messages", json_reply(200, message([{"type": "text", "text": ""}], stop="refusal")))
    with pytest.raises(StructuredRefusal):
        await ask(anthropic(server))


# ------------------------------------------------------------------------------------ enforce=False
async def test_unenforced_schemas_go_in_words_and_are_validated_as_written(server: FakeHTTPServer) -> None:
    open_schema = {"type": "object", "properties": {"kind": {"type": "string"}}, "required": ["kind"]}
    server.route("POST", "/v1/chat/completions", json_reply(200, completion('{"kind": "a", "extra": [1]}', 7)))
    result = await ask(openai_like(server), schema=open_schema, enforce=False)
    assert (result.value, result.mode) == ({"kind": "a", "extra": [1]}, "prompt")
    body = server.requests[0].json()
    assert "response_format" not in body and '"required":["kind"]' in body["messages"][0]["content"]
    server.route("POST", "/v1/chat/completions", json_reply(200, completion('{"other": 1}', 7)))
    with pytest.raises(StructuredCallError, match="missing required property 'kind'"):
        await ask(openai_like(server), schema=open_schema, enforce=False)


def test_the_unenforced_linter_checks_vocabulary_and_fills_nothing_in() -> None:
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    assert lint_unenforced(schema) == schema
    assert validate({"a": 1, "b": 2}, schema) == []
    assert validate({"a": "x"}, schema) == ["$.a: expected integer, got string"]
    for bad in (
        {"type": "string", "format": "date"},
        {"type": "object", "properties": {"a": {"pattern": "x"}}},
        {"type": "object", "additionalProperties": "no"},
        {"type": "thing"},
        {"$ref": "#/$defs/missing"},
    ):
        with pytest.raises(SchemaError):
            lint_unenforced(bad)


async def test_a_schema_outside_the_subset_is_refused_before_any_request(server: FakeHTTPServer) -> None:
    with pytest.raises(SchemaError, match="anyOf"):
        await ask(openai_like(server), schema={"type": "object", "properties": {"a": {"anyOf": []}}})
    with pytest.raises(SchemaError, match="format"):
        await ask(openai_like(server), schema={"type": "object", "properties": {"a": {"format": "x"}}}, enforce=False)
    assert server.requests == []


async def test_a_fenced_reply_under_an_enforced_schema_is_counted_as_a_repair(server: FakeHTTPServer) -> None:
    before = structured_repair_count()
    server.route("POST", "/v1/chat/completions", json_reply(200, completion('```json\n{"total": 1}\n```', 5)))
    assert (await ask(openai_like(server))).value == {"total": 1}
    assert structured_repair_count() == before + 1
    fenced = json_reply(200, completion('```\n{"total": 2}\n```'))
    server.route("POST", "/v1/chat/completions", refuse_json_schema(fenced))
    reset_native_schema_support()
    assert (await ask(openai_like(server))).mode == "prompt"
    assert structured_repair_count() == before + 1  # a prompt-mode fence is expected, not a repair
    assert json.loads(server.requests[-1].body)["response_format"] == {"type": "json_object"}

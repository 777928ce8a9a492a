"""LLM providers over real HTTP against a scripted server on 127.0.0.1: wire shape, schema-checked
JSON with one re-ask, retries and per-attempt timeouts, host clients, secrets kept out of errors."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from context_engine.config import LLMConfig
from context_engine.errors import ConfigError, ProviderError
from context_engine.llm import (
    SchemaError,
    StructuredCallError,
    build_llm,
    reset_native_schema_support,
    strict_portable,
    structured_call,
    validate,
)
from tests.fakes import FakeHTTPServer, json_reply, sequence
from tests.knowledge_fakes import completion, last_user

SECRET = "sk-test-very-secret-key-123456"
SCHEMA: dict[str, Any] = {"type": "object", "properties": {"queries": {"type": "array", "items": {"type": "string"}}}}
GOOD = json.dumps({"queries": ["a", "b"]})


@pytest.fixture
def server() -> Iterator[FakeHTTPServer]:
    """A scripted HTTP server on 127.0.0.1 playing the LLM and rerank providers for one test."""
    with FakeHTTPServer() as fake:
        yield fake


@pytest.fixture(autouse=True)
def _fresh_memo() -> Iterator[None]:
    reset_native_schema_support()
    yield
    reset_native_schema_support()


def custom(server: FakeHTTPServer, **overrides: Any) -> LLMConfig:
    data: dict[str, Any] = {
        "provider": "custom",
        "base_url": server.url("/v1"),
        "model": "test-model",
        "api_key": SECRET,
        "max_retries": 0,
        "timeout": 5.0,
    }
    data.update(overrides)
    return LLMConfig(**data)


def answer(content: str, tokens: int = 50) -> Any:
    return json_reply(200, completion(content, tokens))


async def call(config: LLMConfig, **kwargs: Any) -> Any:
    llm = build_llm(config)
    try:
        return await structured_call(
            llm, system="Split.", user="q?", schema=SCHEMA, schema_name="sub_queries", **kwargs
        )
    finally:
        await llm.aclose()


# ------------------------------------------------------------------------------------ wire shape
async def test_custom_requests_a_strict_json_schema_and_validates_the_reply(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/chat/completions", answer(GOOD))
    result = await call(custom(server))
    assert (result.value, result.mode, result.attempts, result.tokens) == ({"queries": ["a", "b"]}, "native", 1, 50)
    (request,) = server.requests
    assert request.header("authorization") == f"Bearer {SECRET}"
    body = request.json()
    assert body["model"] == "test-model" and body["temperature"] == 0.0 and body["max_tokens"] == 1024
    assert body["messages"] == [{"role": "system", "content": "Split."}, {"role": "user", "content": "q?"}]
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    assert fmt["json_schema"]["name"] == "sub_queries"
    assert fmt["json_schema"]["schema"] == {
        "type": "object",
        "properties": {"queries": {"type": "array", "items": {"type": "string"}}},
        "additionalProperties": False,
        "required": ["queries"],
    }


async def test_azure_uses_the_deployment_url_api_version_and_api_key_header(server: FakeHTTPServer) -> None:
    server.route("POST", "/openai/deployments/my-dep/chat/completions", answer(GOOD))
    config = LLMConfig(provider="azure_openai", base_url=server.url(), deployment="my-dep", api_key=SECRET)
    result = await call(config)
    assert result.value == {"queries": ["a", "b"]}
    (request,) = server.requests
    assert request.query == {"api-version": "2024-10-21"}
    assert request.header("api-key") == SECRET and request.header("authorization") is None
    assert "model" not in request.json()


async def test_openai_sends_max_completion_tokens(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/chat/completions", answer(GOOD))
    await call(LLMConfig(provider="openai", base_url=server.url("/v1"), api_key=SECRET, max_tokens=99))
    body = server.requests[0].json()
    assert body["model"] == "gpt-4o-mini" and body["max_completion_tokens"] == 99 and "max_tokens" not in body


def test_missing_settings_fail_at_build_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"llm\.api_key"):
        build_llm(LLMConfig(provider="openai"))
    with pytest.raises(ConfigError, match=r"llm\.deployment"):
        build_llm(LLMConfig(provider="azure_openai", api_key="k", base_url="http://x"))
    with pytest.raises(ConfigError, match=r"llm\.base_url"):
        build_llm(LLMConfig(provider="custom", model="m"))


# ------------------------------------------------------------------------------------ schema modes
async def test_an_endpoint_refusing_json_schema_falls_back_to_the_prompt_once(server: FakeHTTPServer) -> None:
    def handler(body: Any, _h: dict[str, str], _t: Any) -> Any:
        if body["response_format"]["type"] == "json_schema":
            return 400, {}, {"error": {"message": "response_format json_schema is not supported for this model"}}
        return 200, {}, completion(GOOD)

    server.route("POST", "/v1/chat/completions", handler)
    first = await call(custom(server))
    assert (first.value, first.mode) == ({"queries": ["a", "b"]}, "prompt")
    refused, fallback = server.requests
    assert refused.json()["response_format"]["type"] == "json_schema"
    assert fallback.json()["response_format"] == {"type": "json_object"}
    system = fallback.json()["messages"][0]["content"]
    assert system.startswith("Split.") and '"additionalProperties":false' in system
    server.clear()
    second = await call(custom(server))  # remembered: no second refusal is paid
    assert second.mode == "prompt" and len(server.requests) == 1
    reset_native_schema_support()
    server.clear()
    await call(custom(server))
    assert len(server.requests) == 2  # rediscovered after the reset


async def test_an_invalid_schema_error_is_not_worked_around(server: FakeHTTPServer) -> None:
    server.route(
        "POST", "/v1/chat/completions", json_reply(400, {"error": {"message": "Invalid schema for response_format"}})
    )
    with pytest.raises(ProviderError) as refused:
        await call(custom(server))
    assert refused.value.code == "provider_rejected" and len(server.requests) == 1


def prompt_only(*replies: Any) -> Any:
    """An endpoint that refuses the json_schema parameter, then answers ``replies`` in turn."""
    answers = sequence(*replies)

    def handler(body: Any, headers: dict[str, str], target: Any) -> Any:
        if body["response_format"]["type"] == "json_schema":
            return 400, {}, {"error": {"message": "response_format json_schema is not supported"}}
        return answers(body, headers, target)

    return handler


async def test_an_invalid_reply_on_the_prompt_path_is_re_asked_once_with_the_error(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/chat/completions", prompt_only(answer("not json at all", 30), answer(GOOD, 40)))
    result = await call(custom(server))
    assert (result.value, result.mode, result.attempts, result.tokens) == ({"queries": ["a", "b"]}, "prompt", 2, 70)
    retry = server.requests[2].json()["messages"]
    assert retry[2] == {"role": "assistant", "content": "not json at all"}
    assert "not valid JSON" in retry[3]["content"]


async def test_a_reply_breaking_the_schema_is_re_asked_naming_the_field(server: FakeHTTPServer) -> None:
    bad = json.dumps({"queries": "one string"})
    server.route("POST", "/v1/chat/completions", prompt_only(answer(bad), answer(GOOD)))
    result = await call(custom(server))
    assert result.attempts == 2
    assert "$.queries: expected array, got string" in last_user(server.requests[2].json())


async def test_a_second_invalid_reply_is_an_error_never_a_guess(server: FakeHTTPServer) -> None:
    raw = json.dumps({"queries": ["ok"], "extra": "SURPRISE-FIELD"})
    server.route("POST", "/v1/chat/completions", prompt_only(answer(raw, 25)))
    with pytest.raises(StructuredCallError) as failed:
        await call(custom(server))
    err = failed.value
    assert (err.attempts, err.tokens, err.mode, err.raw, err.status) == (2, 50, "prompt", raw, 502)
    assert "unexpected property 'extra'" in str(err) and "SURPRISE-FIELD" not in str(err)
    assert len(server.requests) == 3  # the refused json_schema request, then two prompt-path attempts


async def test_a_schema_outside_the_portable_subset_fails_before_any_request(server: FakeHTTPServer) -> None:
    llm = build_llm(custom(server))
    bad = {"type": "object", "properties": {"q": {"type": "array", "items": {"type": "string"}, "minItems": 1}}}
    with pytest.raises(SchemaError, match="minItems"):
        await structured_call(llm, system="s", user="u", schema=bad)
    assert server.requests == []
    await llm.aclose()


def test_portable_schema_and_validator() -> None:
    schema = strict_portable(
        {
            "type": "object",
            "properties": {
                "n": {"type": "integer"},
                "x": {"type": ["number", "null"]},
                "kind": {"type": "string", "enum": ["a", "b"]},
                "item": {"$ref": "#/$defs/item"},
            },
            "$defs": {"item": {"type": "object", "properties": {"ok": {"type": "boolean"}}}},
        }
    )
    assert schema["required"] == ["n", "x", "kind", "item"] and schema["$defs"]["item"]["required"] == ["ok"]
    assert validate({"n": 3.0, "x": None, "kind": "a", "item": {"ok": True}}, schema) == []
    errors = validate({"n": True, "x": "1", "kind": "c", "item": {"ok": 1, "more": 1}}, schema)
    assert errors == [
        "$.n: expected integer, got boolean",
        "$.x: expected number or null, got string",
        "$.kind: must be one of ['a', 'b']",
        "$.item: unexpected property 'more'",
        "$.item.ok: expected boolean, got number",
    ]
    for bad in (
        {"type": "object", "properties": {"a": {"anyOf": []}}},
        {"type": "object", "properties": {"a": {"type": "string", "format": "date"}}},
        {"type": "object", "additionalProperties": True},
        {"type": "array", "items": {"type": "string"}},
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}, "$defs": {"a": {"$ref": "#/$defs/a"}}},
    ):
        with pytest.raises(SchemaError):
            strict_portable(bad)


# ------------------------------------------------------------------------------------ retries
async def test_server_errors_are_retried_up_to_max_retries(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/chat/completions", sequence(json_reply(500, {}), json_reply(503, {}), answer(GOOD)))
    llm = build_llm(custom(server, max_retries=2))
    llm.backoff_base = 0.01  # type: ignore[attr-defined]
    result = await structured_call(llm, system="s", user="u", schema=SCHEMA)
    assert result.value == {"queries": ["a", "b"]} and len(server.requests) == 3


async def test_max_retries_zero_means_exactly_one_attempt(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/chat/completions", sequence(json_reply(500, {}), answer(GOOD)))
    with pytest.raises(ProviderError) as failed:
        await call(custom(server, max_retries=0))
    assert failed.value.code == "provider_unavailable" and "after 1 attempt(s)" in failed.value.message
    assert len(server.requests) == 1


async def test_429_honours_retry_after(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/chat/completions", sequence(json_reply(429, {}, {"Retry-After": "0"}), answer(GOOD)))
    result = await call(custom(server, max_retries=1))
    assert result.value == {"queries": ["a", "b"]} and len(server.requests) == 2


async def test_a_client_error_is_not_retried(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/chat/completions", json_reply(400, {"error": {"message": "bad messages"}}))
    with pytest.raises(ProviderError) as failed:
        await call(custom(server, max_retries=3))
    assert failed.value.code == "provider_rejected" and len(server.requests) == 1


async def test_the_timeout_is_per_attempt(server: FakeHTTPServer) -> None:
    """Each attempt is cut at the timeout: both fail while the server is still holding its replies."""
    release = threading.Event()

    def stall(_b: Any, _h: dict[str, str], _t: Any) -> Any:
        release.wait(120)
        return 200, {}, completion(GOOD)

    server.route("POST", "/v1/chat/completions", stall)
    llm = build_llm(custom(server, max_retries=1, timeout=0.3))
    llm.backoff_base = 0.01  # type: ignore[attr-defined]
    started = time.perf_counter()
    try:
        with pytest.raises(ProviderError) as failed:
            await structured_call(llm, system="s", user="u", schema=SCHEMA)
        cut_before_any_reply = not release.is_set()
    finally:
        release.set()
    elapsed = time.perf_counter() - started
    await llm.aclose()
    assert failed.value.code == "provider_unavailable" and "Timeout" in failed.value.message
    assert cut_before_any_reply and len(server.requests) == 2  # two attempts, each cut, not waited out
    assert elapsed >= 0.6  # each attempt waited its 0.3 s


# ------------------------------------------------------------------------------------ secrets, clients
async def test_the_api_key_never_reaches_an_error_message(server: FakeHTTPServer) -> None:
    server.route(
        "POST", "/v1/chat/completions", json_reply(401, {"error": {"message": f"Incorrect API key provided: {SECRET}"}})
    )
    with pytest.raises(ProviderError) as failed:
        await call(custom(server))
    assert SECRET not in str(failed.value) and "[redacted]" in str(failed.value)
    assert SECRET not in repr(custom(server))


async def test_a_host_client_is_used_for_purpose_llm_and_never_closed(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/chat/completions", answer(GOOD))
    purposes: list[str] = []
    async with httpx.AsyncClient(headers={"X-Host": "yes"}) as host:

        def factory(purpose: str) -> httpx.AsyncClient:
            purposes.append(purpose)
            return host

        llm = build_llm(custom(server), factory)
        await structured_call(llm, system="s", user="u", schema=SCHEMA)
        await llm.aclose()
        assert purposes == ["llm"] and not host.is_closed
        assert server.requests[0].header("x-host") == "yes"


async def test_an_engine_built_client_is_closed_by_aclose(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/chat/completions", answer(GOOD))
    llm = build_llm(custom(server), lambda purpose: None)
    await structured_call(llm, system="s", user="u", schema=SCHEMA)
    client = llm._http._client  # type: ignore[attr-defined]
    await llm.aclose()
    assert client is not None and client.is_closed


# ------------------------------------------------------------------------------------ anthropic (extra)
def anthropic_message(content: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 20, "output_tokens": 5},
    }


def anthropic_config(server: FakeHTTPServer, **overrides: Any) -> LLMConfig:
    data: dict[str, Any] = {
        "provider": "anthropic",
        "base_url": server.url(),
        "model": "claude-test",
        "api_key": SECRET,
        "max_retries": 0,
        "timeout": 5.0,
    }
    data.update(overrides)
    return LLMConfig(**data)


async def test_anthropic_sends_output_config_through_the_sdk(server: FakeHTTPServer) -> None:
    import anthropic  # noqa: F401  (the anthropic extra is part of the test install)
    server.route("POST", "/v1/messages", json_reply(200, anthropic_message([{"type": "text", "text": GOOD}])))
    result = await call(anthropic_config(server))
    assert (result.value, result.mode, result.tokens) == ({"queries": ["a", "b"]}, "native", 25)
    (request,) = server.requests
    assert request.header("x-api-key") == SECRET and request.header("anthropic-version")
    assert not [name for name in request.headers if name.startswith("x-stainless")]
    body = request.json()
    assert body["system"] == "Split." and body["model"] == "claude-test"
    assert body["output_config"]["format"]["type"] == "json_schema"
    assert body["output_config"]["format"]["schema"]["additionalProperties"] is False


async def test_anthropic_falls_back_to_a_forced_strict_tool(server: FakeHTTPServer) -> None:
    import anthropic  # noqa: F401  (the anthropic extra is part of the test install)

    def handler(body: Any, _h: dict[str, str], _t: Any) -> Any:
        if "output_config" in body:
            error = {"type": "invalid_request_error", "message": "output_config: Extra inputs are not permitted"}
            return 400, {}, {"type": "error", "error": error}
        tool = {"type": "tool_use", "id": "toolu_1", "name": "sub_queries", "input": {"queries": ["x", "y"]}}
        return 200, {}, anthropic_message([tool])

    server.route("POST", "/v1/messages", handler)
    result = await call(anthropic_config(server))
    assert (result.value, result.mode) == ({"queries": ["x", "y"]}, "tool")
    body = server.requests[1].json()
    assert body["tool_choice"] == {"type": "tool", "name": "sub_queries"} and body["tools"][0]["strict"] is True


async def test_anthropic_retries_are_the_configured_number(server: FakeHTTPServer) -> None:
    import anthropic  # noqa: F401  (the anthropic extra is part of the test install)
    overloaded = json_reply(529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    server.route("POST", "/v1/messages", overloaded)
    with pytest.raises(ProviderError) as failed:
        await call(anthropic_config(server, max_retries=0))
    assert failed.value.code == "provider_unavailable" and len(server.requests) == 1
    server.clear()
    good = json_reply(200, anthropic_message([{"type": "text", "text": GOOD}]))
    server.route("POST", "/v1/messages", sequence(overloaded, good))
    assert (await call(anthropic_config(server, max_retries=1))).value == {"queries": ["a", "b"]}
    assert len(server.requests) == 2


async def test_anthropic_errors_carry_no_key(server: FakeHTTPServer) -> None:
    import anthropic  # noqa: F401  (the anthropic extra is part of the test install)
    error = {"type": "error", "error": {"type": "authentication_error", "message": f"invalid x-api-key {SECRET}"}}
    server.route("POST", "/v1/messages", json_reply(401, error))
    with pytest.raises(ProviderError) as failed:
        await call(anthropic_config(server))
    assert failed.value.code == "provider_rejected" and SECRET not in str(failed.value)
    with pytest.raises(ConfigError, match=r"llm\.api_key"):
        build_llm(LLMConfig(provider="anthropic"))

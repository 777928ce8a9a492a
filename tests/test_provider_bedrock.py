"""``bedrock`` through the real boto3 Converse client over real HTTP to a fake Bedrock runtime.

boto3's ``endpoint_url`` points at ``FakeHTTPServer``, which answers in Converse's wire format
(``POST /model/{modelId}/converse``, errors typed by ``x-amzn-ErrorType``). Requests are SigV4-signed
with static fake credentials from the environment; the fake does not check signatures. An older
botocore (before Converse had ``outputConfig`` and ``toolSpec.strict``) is reproduced with
botocore's own ``AWS_DATA_PATH`` override: a copy of the service model without those members.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore
import pydantic
import pytest

from context_engine.config import LLMConfig
from context_engine.errors import ConfigError, ProviderError
from context_engine.llm import build_llm, reset_native_schema_support, structured_call
from context_engine.llm.bedrock import BedrockLLM
from tests.fakes.http_server import FakeHTTPServer, Target, json_reply, sequence

ACCESS_KEY = "AKIAFAKEEXAMPLE0001"
SECRET_KEY = "fake/SECRET/key/0123456789abcdefghijkl"
MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"
PATH = "/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse"
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}}
PORTABLE = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}
GUARD_SECONDS = 15.0


@pytest.fixture
def server() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer() as fake:
        yield fake


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Static fake credentials, no profile files, no instance metadata: nothing leaves 127.0.0.1."""
    for name in (
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_DATA_PATH",
        "AWS_BEARER_TOKEN_BEDROCK",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    reset_native_schema_support()


def config(server: FakeHTTPServer, **overrides: Any) -> LLMConfig:
    settings: dict[str, Any] = {
        "provider": "bedrock",
        "model": MODEL,
        "region": "eu-central-1",
        "base_url": server.url(),
    }
    settings.update(overrides)
    return LLMConfig(**settings)


def converse_text(text: str, stop: str = "end_turn") -> Any:
    return json_reply(
        200,
        {
            "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
            "stopReason": stop,
            "usage": {"inputTokens": 9, "outputTokens": 3, "totalTokens": 12},
            "metrics": {"latencyMs": 5},
        },
    )


def converse_tool(name: str, value: dict[str, Any]) -> Any:
    return json_reply(
        200,
        {
            "output": {
                "message": {
                    "role": "assistant",
                    "content": [{"toolUse": {"toolUseId": "t1", "name": name, "input": value}}],
                }
            },
            "stopReason": "tool_use",
            "usage": {"inputTokens": 20, "outputTokens": 5, "totalTokens": 25},
            "metrics": {"latencyMs": 5},
        },
    )


def aws_error(status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> Any:
    return json_reply(
        status, {"message": message}, {"x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/", **(headers or {})}
    )


def fast(llm: Any, backoff: float = 0.01) -> Any:
    llm.backoff_base = backoff
    return llm


async def guarded(awaitable: Any) -> Any:
    return await asyncio.wait_for(awaitable, GUARD_SECONDS)


async def ask(llm: Any) -> Any:
    return await guarded(llm.complete(system="S", messages=[{"role": "user", "content": "q"}]))


async def test_native_output_config_is_sent_signed_and_validated(server: FakeHTTPServer) -> None:
    server.route("POST", PATH, converse_text('{"answer": "42"}'))
    llm = build_llm(config(server))
    assert isinstance(llm, BedrockLLM) and llm.native_schema and llm.strict_tools
    try:
        result = await guarded(structured_call(llm, system="Answer.", user="six times seven?", schema=SCHEMA))
    finally:
        await llm.aclose()
    assert result.value == {"answer": "42"} and result.mode == "native" and result.tokens == 12
    request = server.requests_to(PATH)[0]
    auth = request.header("authorization") or ""
    assert auth.startswith(f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/") and "/eu-central-1/bedrock/" in auth
    assert SECRET_KEY not in json.dumps(request.headers) and SECRET_KEY.encode() not in request.body
    body = request.json()
    assert body["system"] == [{"text": "Answer."}]
    assert body["messages"] == [{"role": "user", "content": [{"text": "six times seven?"}]}]
    assert body["inferenceConfig"] == {"maxTokens": 1024, "temperature": 0.0}
    text_format = body["outputConfig"]["textFormat"]
    assert text_format["type"] == "json_schema"
    assert json.loads(text_format["structure"]["jsonSchema"]["schema"]) == PORTABLE
    assert "toolConfig" not in body


async def test_a_service_refusing_output_config_gets_a_strict_forced_tool_once(
    server: FakeHTTPServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="context_engine.llm")
    server.route(
        "POST",
        PATH,
        sequence(
            aws_error(400, "ValidationException", "This model doesn't support the outputConfig field."),
            converse_tool("reply", {"answer": "a"}),
        ),
    )
    llm = build_llm(config(server))
    try:
        first = await guarded(structured_call(llm, system="S", user="q1", schema=SCHEMA))
        second = await guarded(structured_call(llm, system="S", user="q2", schema=SCHEMA))
    finally:
        await llm.aclose()
    assert first.value == second.value == {"answer": "a"}
    assert first.mode == second.mode == "tool"
    bodies = [r.json() for r in server.requests_to(PATH)]
    assert len(bodies) == 3 and "outputConfig" in bodies[0]
    for body in bodies[1:]:
        assert "outputConfig" not in body
        spec = body["toolConfig"]["tools"][0]["toolSpec"]
        assert spec["strict"] is True and spec["inputSchema"]["json"] == PORTABLE
        assert body["toolConfig"]["toolChoice"] == {"tool": {"name": "reply"}}
    assert sum("refused outputConfig" in r.message for r in caplog.records) == 1


async def test_an_invalid_schema_error_is_not_worked_around(server: FakeHTTPServer) -> None:
    server.route("POST", PATH, aws_error(400, "ValidationException", "outputConfig: invalid schema at properties"))
    llm = build_llm(config(server))
    try:
        with pytest.raises(ProviderError) as caught:
            await guarded(structured_call(llm, system="S", user="q", schema=SCHEMA))
    finally:
        await llm.aclose()
    assert caught.value.code == "provider_rejected" and len(server.requests) == 1


@pytest.fixture
def older_botocore(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore's data-path override with a Converse model lacking ``outputConfig`` and ``toolSpec.strict``."""
    source = Path(botocore.__file__).parent / "data" / "bedrock-runtime" / "2023-09-30" / "service-2.json.gz"
    model = json.loads(gzip.decompress(source.read_bytes()))
    model["shapes"]["ConverseRequest"]["members"].pop("outputConfig")
    model["shapes"]["ToolSpecification"]["members"].pop("strict")
    target = tmp_path / "models" / "bedrock-runtime" / "2023-09-30"
    target.mkdir(parents=True)
    (target / "service-2.json").write_text(json.dumps(model))
    monkeypatch.setenv("AWS_DATA_PATH", str(tmp_path / "models"))


async def test_an_older_botocore_asks_for_the_tool_and_says_prompt(
    server: FakeHTTPServer, older_botocore: None
) -> None:
    server.route("POST", PATH, converse_tool("reply", {"answer": "b"}))
    llm = build_llm(config(server))
    assert not llm.native_schema and not llm.strict_tools
    try:
        result = await guarded(structured_call(llm, system="S", user="q", schema=SCHEMA))
    finally:
        await llm.aclose()
    assert result.value == {"answer": "b"} and result.mode == "prompt"
    body = server.requests[0].json()
    assert "outputConfig" not in body and "strict" not in body["toolConfig"]["tools"][0]["toolSpec"]
    assert "JSON Schema" in body["system"][0]["text"]


async def test_throttling_is_retried_and_counted_after_the_first_attempt(server: FakeHTTPServer) -> None:
    server.route(
        "POST",
        PATH,
        sequence(
            aws_error(429, "ThrottlingException", "Too many requests", {"Retry-After": "0"}), converse_text("fine")
        ),
    )
    llm = fast(build_llm(config(server)), backoff=30.0)  # only Retry-After can make this fast
    try:
        started = time.monotonic()
        reply = await ask(llm)
    finally:
        await llm.aclose()
    assert reply.text == "fine" and reply.mode == "text" and time.monotonic() - started < 10
    assert len(server.requests_to(PATH)) == 2

    for retries in (0, 2):
        server.clear()
        server.route("POST", PATH, aws_error(503, "ServiceUnavailableException", "busy"))
        llm = fast(build_llm(config(server, max_retries=retries)))
        try:
            with pytest.raises(ProviderError) as caught:
                await ask(llm)
        finally:
            await llm.aclose()
        assert caught.value.code == "provider_unavailable"
        assert len(server.requests_to(PATH)) == retries + 1


async def test_the_timeout_is_per_attempt(server: FakeHTTPServer) -> None:
    answered = converse_text("late but fine")

    def slow_then_fast(body: Any, headers: dict[str, str], target: Target) -> Any:
        if len(server.requests_to(PATH)) == 1:
            time.sleep(1.5)
        return answered(body, headers, target)

    server.route("POST", PATH, slow_then_fast)
    llm = fast(build_llm(config(server, timeout=1.0, max_retries=1)))
    try:
        reply = await ask(llm)
    finally:
        await llm.aclose()
    assert reply.text == "late but fine" and len(server.requests_to(PATH)) == 2


async def test_a_rejection_is_final_and_carries_no_secret(
    server: FakeHTTPServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)

    def echo(_body: Any, headers: dict[str, str], _target: Target) -> Any:
        return aws_error(403, "AccessDeniedException", f"denied for {headers.get('authorization')}")(
            _body, headers, _target
        )

    server.route("POST", PATH, echo)
    llm = fast(build_llm(config(server, max_retries=2)))
    try:
        with pytest.raises(ProviderError) as caught:
            await ask(llm)
    finally:
        await llm.aclose()
    assert caught.value.code == "provider_rejected" and caught.value.details["error_code"] == "AccessDeniedException"
    assert len(server.requests_to(PATH)) == 1
    assert SECRET_KEY not in caught.value.message and SECRET_KEY not in caplog.text


async def test_a_guardrail_stop_is_a_refusal(server: FakeHTTPServer) -> None:
    server.route("POST", PATH, converse_text("blocked", stop="guardrail_intervened"))
    llm = build_llm(config(server))
    try:
        with pytest.raises(ProviderError, match="refused"):
            await ask(llm)
    finally:
        await llm.aclose()


async def test_an_unreachable_endpoint_is_provider_unavailable() -> None:
    with FakeHTTPServer() as gone:
        url = gone.url()
    llm = fast(build_llm(LLMConfig(provider="bedrock", model=MODEL, region="eu-central-1", base_url=url)))
    try:
        with pytest.raises(ProviderError) as caught:
            await ask(llm)
    finally:
        await llm.aclose()
    assert caught.value.code == "provider_unavailable" and caught.value.details["attempts"] == 3


async def test_missing_settings_and_credentials_are_named(
    server: FakeHTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match=r"llm\.model is required for provider 'bedrock'"):
        build_llm(LLMConfig(provider="bedrock", region="eu-central-1"))
    with pytest.raises(ConfigError, match=r"llm\.region is required for provider 'bedrock'"):
        build_llm(LLMConfig(provider="bedrock", model=MODEL))
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    assert build_llm(LLMConfig(provider="bedrock", model=MODEL)).region == "us-west-2"  # type: ignore[attr-defined]
    with pytest.raises(pydantic.ValidationError, match=r"llm\.api_key is not used by provider 'bedrock'"):
        LLMConfig(provider="bedrock", model=MODEL, api_key="k")
    with pytest.raises(pydantic.ValidationError, match=r"llm\.region is used by provider 'bedrock' only"):
        LLMConfig(provider="openai", region="us-west-2")

    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    server.route("POST", PATH, converse_text("never"))
    llm = build_llm(config(server))
    try:
        with pytest.raises(ConfigError, match="found no AWS credentials"):
            await ask(llm)
    finally:
        await llm.aclose()
    assert server.requests == []

"""``gemini`` and ``vertex_ai`` (embeddings and LLM) through the real google-genai SDK over real HTTP.

The SDK's endpoint override points at ``FakeHTTPServer``, which answers in the Gemini API's and
Vertex AI's wire formats. Vertex signs in with application default credentials exactly as in
production: ``GOOGLE_APPLICATION_CREDENTIALS`` names a service-account file (a key generated here)
whose token endpoint is the same fake server, so the SDK's OAuth exchange runs for real and
nothing ever contacts Google.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import pydantic
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from context_engine.config import EmbeddingConfig, LLMConfig
from context_engine.embeddings.factory import build_embedder
from context_engine.embeddings.gemini import GeminiEmbedder
from context_engine.embeddings.openai_compat import BatchTooLarge
from context_engine.errors import ConfigError, DimensionMismatch, ProviderError
from context_engine.llm import build_llm, reset_native_schema_support, structured_call
from context_engine.llm.gemini import GeminiLLM
from tests.fakes.http_server import DROP_CONNECTION, FakeHTTPServer, Target, fake_vector, json_reply, sequence

API_KEY = "AIza-test-SECRET-0123456789abcdef"
ACCESS_TOKEN = "ya29.fake-access-token-0123456789"
PROJECT, LOCATION = "acme-retrieval", "europe-west4"
VERTEX_MODELS = f"/v1beta1/projects/{PROJECT}/locations/{LOCATION}/publishers/google/models"
GUARD_SECONDS = 15.0
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}}


@pytest.fixture
def server() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer() as fake:
        yield fake


@pytest.fixture(autouse=True)
def google_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No ambient Google settings: every value the SDK uses comes from our config or the test."""
    for name in (
        "GOOGLE_API_KEY",
        "GEMINI_API_KEY",
        "GOOGLE_GENAI_USE_VERTEXAI",
        "GOOGLE_GENAI_USE_ENTERPRISE",
        "GOOGLE_CLOUD_PROJECT",
        "GOOGLE_CLOUD_LOCATION",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GOOGLE_GENAI_API_VERSION",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))  # no gcloud login to find
    monkeypatch.setenv("NO_GCE_CHECK", "true")  # never probe a metadata server
    reset_native_schema_support()


@pytest.fixture
def adc(server: FakeHTTPServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHTTPServer:
    """A service-account ADC file whose OAuth token endpoint is the fake server."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    account = {
        "type": "service_account",
        "project_id": PROJECT,
        "private_key_id": "test-key-1",
        "private_key": pem,
        "client_email": "retrieval@acme-retrieval.iam.gserviceaccount.com",
        "client_id": "1234567890",
        "token_uri": server.url("/token"),
    }
    path = tmp_path / "adc.json"
    path.write_text(json.dumps(account))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
    server.route("POST", "/token", token_endpoint)
    return server


def token_endpoint(_body: Any, _headers: dict[str, str], _target: Target) -> tuple[int, dict[str, str], Any]:
    return 200, {}, {"access_token": ACCESS_TOKEN, "expires_in": 3600, "token_type": "Bearer"}


# --- fake wire formats -----------------------------------------------------------------------------


def gemini_batch_embed(dim: int) -> Any:
    """``models/{model}:batchEmbedContents`` on either service: one vector per request, in order."""

    def handler(body: Any, _headers: dict[str, str], _target: Target) -> tuple[int, dict[str, str], Any]:
        vectors = []
        for request in body["requests"]:
            options = request.get("embedContentConfig", request)
            width = int(options.get("outputDimensionality") or dim)
            vectors.append({"values": fake_vector(request["content"]["parts"][0]["text"], width)})
        return 200, {}, {"embeddings": vectors}

    return handler


def vertex_single_embed(dim: int) -> Any:
    def handler(body: Any, _headers: dict[str, str], _target: Target) -> tuple[int, dict[str, str], Any]:
        width = int(body.get("embedContentConfig", {}).get("outputDimensionality") or dim)
        return 200, {}, {"embedding": {"values": fake_vector(body["content"]["parts"][0]["text"], width)}}

    return handler


def vertex_predict(dim: int) -> Any:
    """The ``:predict`` shape of Vertex's text-embedding models."""

    def handler(body: Any, _headers: dict[str, str], _target: Target) -> tuple[int, dict[str, str], Any]:
        width = int(body.get("parameters", {}).get("outputDimensionality") or dim)
        predictions = [
            {"embeddings": {"values": fake_vector(item["content"], width), "statistics": {"token_count": 3}}}
            for item in body["instances"]
        ]
        return 200, {}, {"predictions": predictions}

    return handler


def generate_reply(text: str, finish: str = "STOP", total: int = 12) -> Any:
    def handler(_body: Any, _headers: dict[str, str], _target: Target) -> tuple[int, dict[str, str], Any]:
        return (
            200,
            {},
            {
                "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": finish}],
                "usageMetadata": {"promptTokenCount": total - 2, "candidatesTokenCount": 2, "totalTokenCount": total},
            },
        )

    return handler


def google_error(status: int, message: str, code: str = "INVALID_ARGUMENT") -> Any:
    return json_reply(status, {"error": {"code": status, "message": message, "status": code}})


def echo_key_error(status: int) -> Any:
    """An error that quotes the caller's key back, as a careless gateway might."""

    def handler(_body: Any, headers: dict[str, str], _target: Target) -> tuple[int, dict[str, str], Any]:
        sent = headers.get("x-goog-api-key", "")
        return status, {}, {"error": {"code": status, "message": f"API key not valid: {sent}", "status": "DENIED"}}

    return handler


def drop_connection(_body: Any, _headers: dict[str, str], _target: Target) -> Any:
    return DROP_CONNECTION


def gemini_embed_config(server: FakeHTTPServer, **overrides: Any) -> EmbeddingConfig:
    settings: dict[str, Any] = {"provider": "gemini", "api_key": API_KEY, "base_url": server.url(), "dim": 16}
    settings.update(overrides)
    return EmbeddingConfig(**settings)


def vertex_embed_config(server: FakeHTTPServer, **overrides: Any) -> EmbeddingConfig:
    settings: dict[str, Any] = {
        "provider": "vertex_ai",
        "project": PROJECT,
        "location": LOCATION,
        "base_url": server.url(),
        "dim": 16,
    }
    settings.update(overrides)
    return EmbeddingConfig(**settings)


def gemini_llm_config(server: FakeHTTPServer, **overrides: Any) -> LLMConfig:
    settings: dict[str, Any] = {"provider": "gemini", "api_key": API_KEY, "base_url": server.url()}
    settings.update(overrides)
    return LLMConfig(**settings)


def fast(provider: Any, backoff: float = 0.01) -> Any:
    provider.backoff_base = backoff
    return provider


async def guarded(awaitable: Any) -> Any:
    return await asyncio.wait_for(awaitable, GUARD_SECONDS)


# --- embeddings: Gemini API ------------------------------------------------------------------------

EMBED_PATH = "/v1/models/gemini-embedding-001:batchEmbedContents"


async def test_gemini_embeds_through_the_sdk_with_task_types(server: FakeHTTPServer) -> None:
    server.route("POST", EMBED_PATH, gemini_batch_embed(3072))
    embedder = build_embedder(gemini_embed_config(server))
    assert isinstance(embedder, GeminiEmbedder)
    try:
        vectors = await guarded(embedder.embed(["alpha", "beta"]))
        await guarded(embedder.embed(["what is alpha?"], kind="query"))
    finally:
        await embedder.aclose()
    assert vectors == [fake_vector("alpha", 16), fake_vector("beta", 16)]
    first, second = server.requests_to(EMBED_PATH)
    assert first.header("x-goog-api-key") == API_KEY
    assert [r["taskType"] for r in first.json()["requests"]] == ["RETRIEVAL_DOCUMENT"] * 2
    assert {r["outputDimensionality"] for r in first.json()["requests"]} == {16}
    assert second.json()["requests"][0]["taskType"] == "RETRIEVAL_QUERY"
    assert embedder.key == "gemini\tgemini-embedding-001\t16"
    assert embedder.max_input_tokens == 2048


async def test_gemini_native_width_sends_no_dimensionality(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/models/text-embedding-004:batchEmbedContents", gemini_batch_embed(768))
    embedder = build_embedder(gemini_embed_config(server, model="text-embedding-004", dim=None))
    try:
        vectors = await guarded(embedder.embed(["x"]))
    finally:
        await embedder.aclose()
    assert len(vectors[0]) == 768 and embedder.dim == 768
    assert "outputDimensionality" not in server.requests[0].json()["requests"][0]


async def test_a_reply_of_the_wrong_width_is_a_dimension_mismatch(server: FakeHTTPServer) -> None:
    server.route("POST", EMBED_PATH, json_reply(200, {"embeddings": [{"values": [0.1, 0.2, 0.3]}]}))
    embedder = build_embedder(gemini_embed_config(server))
    try:
        with pytest.raises(DimensionMismatch, match=r"embedding\.dim"):
            await guarded(embedder.embed(["x"]))
    finally:
        await embedder.aclose()


async def test_gemini_retries_server_errors_then_succeeds(server: FakeHTTPServer) -> None:
    server.route(
        "POST",
        EMBED_PATH,
        sequence(google_error(503, "overloaded", "UNAVAILABLE"), drop_connection, gemini_batch_embed(16)),
    )
    embedder = fast(build_embedder(gemini_embed_config(server, max_retries=2)))
    try:
        vectors = await guarded(embedder.embed(["x"]))
    finally:
        await embedder.aclose()
    assert vectors == [fake_vector("x", 16)]
    assert len(server.requests_to(EMBED_PATH)) == 3


async def test_gemini_429_waits_for_retry_after_not_the_backoff(server: FakeHTTPServer) -> None:
    server.route(
        "POST",
        EMBED_PATH,
        sequence(
            json_reply(
                429, {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}}, {"Retry-After": "0"}
            ),
            gemini_batch_embed(16),
        ),
    )
    embedder = fast(build_embedder(gemini_embed_config(server)), backoff=30.0)
    try:
        started = time.monotonic()
        await guarded(embedder.embed(["x"]))
    finally:
        await embedder.aclose()
    assert time.monotonic() - started < 10
    assert len(server.requests_to(EMBED_PATH)) == 2


async def test_max_retries_counts_retries_after_the_first_attempt(server: FakeHTTPServer) -> None:
    server.route("POST", EMBED_PATH, google_error(500, "internal", "INTERNAL"))
    for retries in (0, 2):
        server.clear()
        embedder = fast(build_embedder(gemini_embed_config(server, max_retries=retries)))
        try:
            with pytest.raises(ProviderError) as caught:
                await guarded(embedder.embed(["x"]))
        finally:
            await embedder.aclose()
        assert caught.value.code == "provider_unavailable"
        assert len(server.requests_to(EMBED_PATH)) == retries + 1


async def test_the_timeout_is_per_attempt(server: FakeHTTPServer) -> None:
    answered = gemini_batch_embed(16)

    def slow_then_fast(body: Any, headers: dict[str, str], target: Target) -> Any:
        if len(server.requests_to(EMBED_PATH)) == 1:
            time.sleep(1.5)
        return answered(body, headers, target)

    server.route("POST", EMBED_PATH, slow_then_fast)
    embedder = fast(build_embedder(gemini_embed_config(server, timeout=1.0, max_retries=1)))
    try:
        assert await guarded(embedder.embed(["x"])) == [fake_vector("x", 16)]
    finally:
        await embedder.aclose()
    assert len(server.requests_to(EMBED_PATH)) == 2


async def test_a_too_large_batch_can_be_halved(server: FakeHTTPServer) -> None:
    server.route("POST", EMBED_PATH, google_error(400, "Request payload size exceeds the limit: 10485760 bytes."))
    embedder = build_embedder(gemini_embed_config(server))
    try:
        with pytest.raises(BatchTooLarge):
            await guarded(embedder.embed(["a", "b"]))
    finally:
        await embedder.aclose()


async def test_more_inputs_than_one_request_takes_are_refused_unsent(server: FakeHTTPServer) -> None:
    server.route("POST", EMBED_PATH, gemini_batch_embed(16))
    embedder = build_embedder(gemini_embed_config(server))
    try:
        with pytest.raises(BatchTooLarge, match="at most 100 inputs"):
            await guarded(embedder.embed([f"t{i}" for i in range(101)]))
        assert len(await guarded(embedder.embed([f"t{i}" for i in range(100)]))) == 100
    finally:
        await embedder.aclose()
    assert len(server.requests_to(EMBED_PATH)) == 1


@pytest.mark.parametrize("status", [400, 401, 403])
async def test_a_rejection_is_final_and_never_shows_the_key(
    server: FakeHTTPServer, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.route("POST", EMBED_PATH, echo_key_error(status))
    embedder = fast(build_embedder(gemini_embed_config(server, max_retries=2)))
    try:
        with pytest.raises(ProviderError) as caught:
            await guarded(embedder.embed(["x"]))
    finally:
        await embedder.aclose()
    assert caught.value.code == "provider_rejected"
    assert len(server.requests_to(EMBED_PATH)) == 1
    assert "API key not valid" in caught.value.message
    assert API_KEY not in caught.value.message and API_KEY not in str(caught.value.details)
    assert API_KEY not in caplog.text


async def test_the_host_client_is_used_and_never_closed(server: FakeHTTPServer) -> None:
    server.route("POST", EMBED_PATH, gemini_batch_embed(16))
    seen: list[str] = []
    host = httpx.AsyncClient(event_hooks={"request": [lambda request: _record(seen, request)]})

    def factory(purpose: str) -> httpx.AsyncClient:
        assert purpose == "embeddings"
        return host

    embedder = build_embedder(gemini_embed_config(server), http_client_factory=factory)
    try:
        await guarded(embedder.embed(["x"]))
    finally:
        await embedder.aclose()
    assert seen == [server.url(EMBED_PATH)]
    assert not host.is_closed
    await host.aclose()


async def _record(seen: list[str], request: httpx.Request) -> None:
    seen.append(str(request.url))


async def test_an_unreachable_endpoint_is_provider_unavailable() -> None:
    with FakeHTTPServer() as gone:
        url = gone.url()
    embedder = fast(build_embedder(EmbeddingConfig(provider="gemini", api_key=API_KEY, base_url=url, dim=8)))
    try:
        with pytest.raises(ProviderError) as caught:
            await guarded(embedder.embed(["x"]))
    finally:
        await embedder.aclose()
    assert caught.value.code == "provider_unavailable" and caught.value.details["attempts"] == 3


# --- embeddings: Vertex AI -------------------------------------------------------------------------


async def test_vertex_signs_in_with_adc_and_uses_the_project_path(adc: FakeHTTPServer) -> None:
    path = f"{VERTEX_MODELS}/gemini-embedding-001:batchEmbedContents"
    adc.route("POST", path, gemini_batch_embed(3072))
    embedder = build_embedder(vertex_embed_config(adc))
    try:
        first = await guarded(embedder.embed(["alpha", "beta"]))
        await guarded(embedder.embed(["gamma", "delta"], kind="query"))
    finally:
        await embedder.aclose()
    assert first == [fake_vector("alpha", 16), fake_vector("beta", 16)]
    tokens = adc.requests_to("/token")
    assert len(tokens) == 1  # the access token is reused until it expires
    grant = parse_qs(tokens[0].body.decode())
    assert grant["grant_type"] == ["urn:ietf:params:oauth:grant-type:jwt-bearer"]
    calls = adc.requests_to(path)
    assert [c.header("authorization") for c in calls] == [f"Bearer {ACCESS_TOKEN}"] * 2
    assert all(c.header("x-goog-api-key") is None for c in calls)
    options = calls[0].json()["requests"][0]["embedContentConfig"]
    assert options == {"taskType": "RETRIEVAL_DOCUMENT", "outputDimensionality": 16, "autoTruncate": False}
    assert calls[1].json()["requests"][0]["embedContentConfig"]["taskType"] == "RETRIEVAL_QUERY"


async def test_vertex_single_input_and_the_predict_models(adc: FakeHTTPServer) -> None:
    adc.route("POST", f"{VERTEX_MODELS}/gemini-embedding-001:embedContent", vertex_single_embed(3072))
    adc.route("POST", f"{VERTEX_MODELS}/text-embedding-005:predict", vertex_predict(768))
    gemini_model = build_embedder(vertex_embed_config(adc))
    text_model = build_embedder(vertex_embed_config(adc, model="text-embedding-005", dim=None))
    try:
        assert await guarded(gemini_model.embed(["solo"])) == [fake_vector("solo", 16)]
        assert await guarded(text_model.embed(["one", "two"])) == [fake_vector("one", 768), fake_vector("two", 768)]
    finally:
        await gemini_model.aclose()
        await text_model.aclose()
    predict = adc.requests_to(f"{VERTEX_MODELS}/text-embedding-005:predict")[0].json()
    assert [i["task_type"] for i in predict["instances"]] == ["RETRIEVAL_DOCUMENT"] * 2
    assert predict["parameters"]["autoTruncate"] is False


async def test_vertex_without_credentials_is_a_config_error(server: FakeHTTPServer) -> None:
    server.route("POST", f"{VERTEX_MODELS}/gemini-embedding-001:batchEmbedContents", gemini_batch_embed(16))
    embedder = build_embedder(vertex_embed_config(server))
    try:
        with pytest.raises(ConfigError, match="application default credentials"):
            await guarded(embedder.embed(["a", "b"]))
    finally:
        await embedder.aclose()
    assert server.requests == []


async def test_a_refused_token_exchange_is_final_and_quotes_nothing(adc: FakeHTTPServer) -> None:
    adc.route("POST", "/token", json_reply(400, {"error": "invalid_grant", "error_description": "key revoked"}))
    adc.route("POST", f"{VERTEX_MODELS}/gemini-embedding-001:batchEmbedContents", gemini_batch_embed(16))
    embedder = fast(build_embedder(vertex_embed_config(adc, max_retries=2)))
    try:
        with pytest.raises(ProviderError) as caught:
            await guarded(embedder.embed(["a", "b"]))
    finally:
        await embedder.aclose()
    assert caught.value.code == "provider_rejected"
    assert "RefreshError" in caught.value.message and "revoked" not in caught.value.message
    assert len(adc.requests_to("/token")) == 1
    assert adc.requests_to(f"{VERTEX_MODELS}/gemini-embedding-001:batchEmbedContents") == []


def test_config_errors_name_the_setting() -> None:
    with pytest.raises(pydantic.ValidationError, match=r"Anthropic has no embeddings API; set embedding\.provider"):
        EmbeddingConfig(provider="anthropic", api_key="k")
    with pytest.raises(pydantic.ValidationError, match=r"embedding\.project and embedding\.location are used"):
        EmbeddingConfig(provider="gemini", api_key="k", project=PROJECT)
    with pytest.raises(ConfigError, match=r"embedding\.api_key is required for provider 'gemini'"):
        build_embedder(EmbeddingConfig(provider="gemini"))
    with pytest.raises(ConfigError, match=r"llm\.api_key is required for provider 'gemini'"):
        build_llm(LLMConfig(provider="gemini"))
    with pytest.raises(ConfigError, match=r"embedding\.dim is required"):
        build_embedder(EmbeddingConfig(provider="gemini", api_key="k", model="my-tuned-model"))


# --- LLM -------------------------------------------------------------------------------------------

CHAT_PATH = "/v1/models/gemini-2.5-flash:generateContent"


async def test_gemini_llm_sends_the_schema_natively_and_validates_the_reply(server: FakeHTTPServer) -> None:
    server.route("POST", CHAT_PATH, generate_reply('{"answer": "42"}'))
    llm = build_llm(gemini_llm_config(server))
    assert isinstance(llm, GeminiLLM)
    try:
        result = await guarded(structured_call(llm, system="Answer.", user="What is six times seven?", schema=SCHEMA))
    finally:
        await llm.aclose()
    assert result.value == {"answer": "42"} and result.mode == "native" and result.tokens == 12
    body = server.requests[0].json()
    assert server.requests[0].header("x-goog-api-key") == API_KEY
    assert body["systemInstruction"]["parts"][0]["text"] == "Answer."
    assert body["contents"] == [{"role": "user", "parts": [{"text": "What is six times seven?"}]}]
    config = body["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"] == {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    assert config["maxOutputTokens"] == 1024 and config["temperature"] == 0.0


async def test_a_refused_schema_parameter_falls_back_to_the_prompt_once(
    server: FakeHTTPServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="context_engine.llm")
    server.route(
        "POST",
        CHAT_PATH,
        sequence(
            google_error(400, 'Invalid JSON payload received. Unknown name "responseJsonSchema"'),
            generate_reply('{"answer": "a"}'),
        ),
    )
    llm = build_llm(gemini_llm_config(server))
    try:
        first = await guarded(structured_call(llm, system="S", user="q1", schema=SCHEMA))
        second = await guarded(structured_call(llm, system="S", user="q2", schema=SCHEMA))
    finally:
        await llm.aclose()
    assert first.mode == second.mode == "prompt"
    bodies = [r.json() for r in server.requests_to(CHAT_PATH)]
    assert len(bodies) == 3  # the refusal is paid once, not per call
    assert "responseJsonSchema" in bodies[0]["generationConfig"]
    for body in bodies[1:]:
        assert "responseJsonSchema" not in body["generationConfig"]
        assert "JSON Schema" in body["systemInstruction"]["parts"][0]["text"]
    assert sum("refused response_json_schema" in r.message for r in caplog.records) == 1


async def test_an_invalid_schema_error_is_not_worked_around(server: FakeHTTPServer) -> None:
    server.route("POST", CHAT_PATH, google_error(400, "responseJsonSchema: invalid schema at $.properties"))
    llm = build_llm(gemini_llm_config(server))
    try:
        with pytest.raises(ProviderError) as caught:
            await guarded(structured_call(llm, system="S", user="q", schema=SCHEMA))
    finally:
        await llm.aclose()
    assert caught.value.code == "provider_rejected" and len(server.requests) == 1


async def test_a_reask_sends_the_models_answer_back_as_the_model_role(server: FakeHTTPServer) -> None:
    server.route("POST", CHAT_PATH, sequence(generate_reply('{"wrong": 1}'), generate_reply('{"answer": "ok"}')))
    llm = build_llm(gemini_llm_config(server))
    try:
        # the one re-ask belongs to the prompt path (a schema the provider enforced is never re-asked)
        strict = {**SCHEMA, "required": ["answer"], "additionalProperties": False}
        result = await guarded(structured_call(llm, system="S", user="q", schema=strict, enforce=False))
    finally:
        await llm.aclose()
    assert result.attempts == 2 and result.value == {"answer": "ok"}
    roles = [c["role"] for c in server.requests[1].json()["contents"]]
    assert roles == ["user", "model", "user"]


async def test_a_safety_stop_is_a_refusal(server: FakeHTTPServer) -> None:
    server.route("POST", CHAT_PATH, generate_reply("", finish="SAFETY"))
    llm = build_llm(gemini_llm_config(server))
    try:
        with pytest.raises(ProviderError, match="refused") as caught:
            await guarded(llm.complete(system="S", messages=[{"role": "user", "content": "q"}]))
    finally:
        await llm.aclose()
    assert caught.value.code == "provider_rejected"


async def test_llm_retries_timeouts_and_never_shows_the_key(
    server: FakeHTTPServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    answered = generate_reply("plain text")

    def slow_then_fast(body: Any, headers: dict[str, str], target: Target) -> Any:
        if len(server.requests_to(CHAT_PATH)) == 1:
            time.sleep(1.5)
        return answered(body, headers, target)

    server.route("POST", CHAT_PATH, slow_then_fast)
    llm = fast(build_llm(gemini_llm_config(server, timeout=1.0, max_retries=1)))
    try:
        reply = await guarded(llm.complete(system="S", messages=[{"role": "user", "content": "q"}]))
    finally:
        await llm.aclose()
    assert reply.text == "plain text" and reply.mode == "text"

    server.clear()
    server.route("POST", CHAT_PATH, echo_key_error(403))
    llm = fast(build_llm(gemini_llm_config(server, max_retries=2)))
    try:
        with pytest.raises(ProviderError) as caught:
            await guarded(llm.complete(system="S", messages=[{"role": "user", "content": "q"}]))
    finally:
        await llm.aclose()
    assert len(server.requests_to(CHAT_PATH)) == 1
    assert API_KEY not in caught.value.message and API_KEY not in caplog.text

    server.clear()
    server.route("POST", CHAT_PATH, google_error(503, "busy", "UNAVAILABLE"))
    llm = fast(build_llm(gemini_llm_config(server, max_retries=2)))
    try:
        with pytest.raises(ProviderError) as caught:
            await guarded(llm.complete(system="S", messages=[{"role": "user", "content": "q"}]))
    finally:
        await llm.aclose()
    assert caught.value.code == "provider_unavailable" and len(server.requests_to(CHAT_PATH)) == 3


async def test_vertex_llm_uses_adc_and_the_project_path(adc: FakeHTTPServer) -> None:
    path = f"{VERTEX_MODELS}/gemini-2.5-pro:generateContent"
    adc.route("POST", path, generate_reply('{"answer": "v"}'))
    host = httpx.AsyncClient()
    purposes: list[str] = []

    def factory(purpose: str) -> httpx.AsyncClient:
        purposes.append(purpose)
        return host

    llm = build_llm(
        LLMConfig(provider="vertex_ai", model="gemini-2.5-pro", project=PROJECT, location=LOCATION, base_url=adc.url()),
        factory,
    )
    try:
        result = await guarded(structured_call(llm, system="S", user="q", schema=SCHEMA))
    finally:
        await llm.aclose()
    assert result.value == {"answer": "v"} and result.mode == "native"
    assert adc.requests_to(path)[0].header("authorization") == f"Bearer {ACCESS_TOKEN}"
    assert purposes == ["llm"] and not host.is_closed
    await host.aclose()


# --- vertex_ai: project and location from the environment, express mode ---------------------------


async def test_vertex_reads_project_and_location_from_the_environment_and_ignores_a_key_beside_them(
    adc: FakeHTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    monkeypatch.setenv("GOOGLE_CLOUD_LOCATION", LOCATION)
    chat = f"{VERTEX_MODELS}/gemini-2.5-pro:generateContent"
    embed = f"{VERTEX_MODELS}/gemini-embedding-001:embedContent"
    adc.route("POST", chat, generate_reply('{"answer": "env"}'))
    adc.route("POST", embed, vertex_single_embed(3072))
    key = "vertex-key-beside-a-project-31f0"
    llm = build_llm(LLMConfig(provider="vertex_ai", model="gemini-2.5-pro", api_key=key, base_url=adc.url()))
    embedder = build_embedder(EmbeddingConfig(provider="vertex_ai", base_url=adc.url(), dim=16))
    try:
        result = await guarded(structured_call(llm, system="S", user="q", schema=SCHEMA))
        vectors = await guarded(embedder.embed(["alpha"]))
    finally:
        await llm.aclose()
        await embedder.aclose()
    assert result.value == {"answer": "env"} and vectors == [fake_vector("alpha", 16)]
    for call in (adc.requests_to(chat)[0], adc.requests_to(embed)[0]):
        assert call.header("authorization") == f"Bearer {ACCESS_TOKEN}"
        assert call.header("x-goog-api-key") is None and key not in call.raw_target


async def test_a_vertex_api_key_with_no_project_is_express_mode(server: FakeHTTPServer) -> None:
    key = "vertex-express-key-8c21d"
    express = "/v1beta1/publishers/google/models/gemini-2.5-pro:generateContent"
    server.route("POST", express, generate_reply('{"answer": "express"}'))
    llm = build_llm(LLMConfig(provider="vertex_ai", model="gemini-2.5-pro", api_key=key, base_url=server.url()))
    try:
        result = await guarded(structured_call(llm, system="S", user="q", schema=SCHEMA))
    finally:
        await llm.aclose()
    assert result.value == {"answer": "express"}
    (call,) = server.requests
    assert call.path == express and call.header("x-goog-api-key") == key and call.header("authorization") is None
    assert server.requests_to("/token") == []

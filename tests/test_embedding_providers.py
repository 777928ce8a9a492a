"""Remote embedding providers over real HTTP against a scripted server on 127.0.0.1.

Nothing of ours is mocked: each provider (and, for cohere/voyage, the official SDK underneath it)
opens real connections to ``FakeHTTPServer``; the tests script its replies and read back the
exact requests it received.
"""

from __future__ import annotations

import asyncio
import base64
import struct
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from context_engine.config import EmbeddingConfig
from context_engine.embeddings.base import Embedder
from context_engine.embeddings.cohere import CohereEmbedder
from context_engine.embeddings.factory import build_embedder
from context_engine.embeddings.openai_compat import (
    BatchTooLarge,
    OpenAICompatibleEmbedder,
    error_snippet,
    parse_retry_after,
)
from context_engine.embeddings.voyage import VoyageEmbedder
from context_engine.errors import ConfigError, DimensionMismatch, InputTooLarge, ProviderError
from tests.fakes.http_server import (
    DROP_CONNECTION,
    FakeHTTPServer,
    Target,
    fake_openai_embeddings,
    fake_vector,
    json_reply,
    sequence,
)

API_KEY = "sk-test-SECRET-0123456789abcdef"
#: a wait no test should ever reach: a retry that used it instead of Retry-After would time out
SLOW_BACKOFF = 30.0
GUARD_SECONDS = 10.0


@pytest.fixture
def server() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer() as fake:
        yield fake


def openai_config(server: FakeHTTPServer, **overrides: Any) -> EmbeddingConfig:
    settings: dict[str, Any] = {"provider": "openai", "api_key": API_KEY, "base_url": server.url("/v1")}
    settings.update(overrides)
    return EmbeddingConfig(**settings)


def fast(embedder: Embedder, backoff: float = 0.01) -> Embedder:
    """Shrink the retry backoff so retry tests run in milliseconds."""
    embedder.backoff_base = backoff  # type: ignore[attr-defined]
    return embedder


async def embed_guarded(embedder: Embedder, texts: list[str], **kwargs: Any) -> list[list[float]]:
    return await asyncio.wait_for(embedder.embed(texts, **kwargs), GUARD_SECONDS)


def echo_key_error(status: int) -> Any:
    """An error reply that echoes the caller's key back, as a careless proxy might."""

    def handler(_body: Any, headers: dict[str, str], _target: Target) -> tuple[int, dict[str, str], Any]:
        sent = headers.get("authorization", "") + " " + headers.get("api-key", "")
        return status, {}, {"error": {"message": f"Incorrect API key provided: {sent.strip()}"}}

    return handler


# --- openai --------------------------------------------------------------------------------------


async def test_openai_request_shape_and_order_by_index(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/embeddings", fake_openai_embeddings(1536, reverse=True))
    embedder = OpenAICompatibleEmbedder(openai_config(server))
    texts = ["alpha", "beta", "gamma"]
    vectors = await embedder.embed(texts)
    await embedder.aclose()

    assert vectors == [fake_vector(t, 1536) for t in texts]
    [request] = server.requests
    assert request.method == "POST" and request.path == "/v1/embeddings"
    assert request.header("authorization") == f"Bearer {API_KEY}"
    assert request.json() == {"input": texts, "model": "text-embedding-3-small"}
    assert embedder.key == "openai\ttext-embedding-3-small\t1536"
    assert embedder.max_input_tokens == 8192


async def test_openai_sends_dimensions_only_when_set(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/embeddings", fake_openai_embeddings(1536))
    embedder = OpenAICompatibleEmbedder(openai_config(server, dim=256))
    [vector] = await embedder.embed(["short"])
    await embedder.aclose()
    assert len(vector) == 256
    assert server.requests[0].json()["dimensions"] == 256

    large = OpenAICompatibleEmbedder(openai_config(server, model="text-embedding-3-large"))
    assert large.dim == 3072
    with pytest.raises(ConfigError):
        OpenAICompatibleEmbedder(openai_config(server, model="text-embedding-ada-002", dim=256))
    ada = OpenAICompatibleEmbedder(openai_config(server, model="text-embedding-ada-002", dim=1536))
    assert ada._payload(["x"]) == {"input": ["x"], "model": "text-embedding-ada-002"}
    with pytest.raises(ConfigError):
        OpenAICompatibleEmbedder(openai_config(server, model="some-new-model"))


async def test_empty_batch_sends_nothing(server: FakeHTTPServer) -> None:
    embedder = OpenAICompatibleEmbedder(openai_config(server))
    assert await embedder.embed([]) == []
    assert server.requests == []


# --- azure and custom ----------------------------------------------------------------------------


async def test_azure_url_shape_and_api_key_header(server: FakeHTTPServer) -> None:
    path = "/openai/deployments/my-embed/embeddings"
    server.route("POST", path, fake_openai_embeddings(1536))
    config = EmbeddingConfig(
        provider="azure_openai",
        api_key=API_KEY,
        base_url=server.base_url + "/",
        deployment="my-embed",
        api_version="2024-02-01",
        model="text-embedding-3-small",
    )
    embedder = OpenAICompatibleEmbedder(config)
    [vector] = await embedder.embed(["hello"], kind="query")
    await embedder.aclose()

    assert vector == fake_vector("hello", 1536)
    [request] = server.requests
    assert request.path == path
    assert request.query == {"api-version": "2024-02-01"}
    assert request.header("api-key") == API_KEY
    assert request.header("authorization") is None
    assert request.json() == {"input": ["hello"]}


def test_azure_needs_endpoint_and_deployment() -> None:
    with pytest.raises(ConfigError):
        OpenAICompatibleEmbedder(EmbeddingConfig(provider="azure_openai", api_key=API_KEY, deployment="d"))
    with pytest.raises(ConfigError):
        OpenAICompatibleEmbedder(
            EmbeddingConfig(provider="azure_openai", api_key=API_KEY, base_url="https://x.example")
        )
    with pytest.raises(ConfigError):  # no key
        OpenAICompatibleEmbedder(EmbeddingConfig(provider="azure_openai", base_url="https://x.example", deployment="d"))


async def test_custom_endpoint_without_key(server: FakeHTTPServer) -> None:
    server.route("POST", "/api/embeddings", fake_openai_embeddings(8))
    config = EmbeddingConfig(provider="custom", base_url=server.url("/api"), model="nomic-embed-text", dim=8)
    embedder = build_embedder(config)
    vectors = await embedder.embed(["one", "two"])
    await embedder.aclose()

    assert vectors == [fake_vector("one", 8), fake_vector("two", 8)]
    [request] = server.requests
    assert request.header("authorization") is None
    assert request.json() == {"input": ["one", "two"], "model": "nomic-embed-text"}
    assert embedder.key == "custom\tnomic-embed-text\t8"


def test_custom_requires_dim_model_and_url() -> None:
    with pytest.raises(ConfigError, match="dim"):
        OpenAICompatibleEmbedder(EmbeddingConfig(provider="custom", base_url="http://127.0.0.1:9", model="m"))
    with pytest.raises(ConfigError):
        OpenAICompatibleEmbedder(EmbeddingConfig(provider="custom", base_url="http://127.0.0.1:9", dim=8))
    with pytest.raises(ConfigError):
        OpenAICompatibleEmbedder(EmbeddingConfig(provider="custom", model="m", dim=8))


async def test_reply_of_the_wrong_width_is_a_dimension_mismatch(server: FakeHTTPServer) -> None:
    server.route("POST", "/api/embeddings", fake_openai_embeddings(4))
    config = EmbeddingConfig(provider="custom", base_url=server.url("/api"), model="m", dim=8)
    embedder = OpenAICompatibleEmbedder(config)
    with pytest.raises(DimensionMismatch):
        await embedder.embed(["x"])
    await embedder.aclose()


async def test_malformed_reply_is_a_provider_error(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/embeddings", json_reply(200, {"unexpected": True}))
    embedder = OpenAICompatibleEmbedder(openai_config(server))
    with pytest.raises(ProviderError) as caught:
        await embedder.embed(["x"])
    await embedder.aclose()
    assert caught.value.code == "provider_unavailable"


# --- retries -------------------------------------------------------------------------------------


async def test_retries_503_then_succeeds(server: FakeHTTPServer) -> None:
    server.route(
        "POST",
        "/v1/embeddings",
        sequence(
            json_reply(503, {"error": {"message": "overloaded"}}),
            json_reply(502, "bad gateway"),
            fake_openai_embeddings(1536),
        ),
    )
    embedder = fast(OpenAICompatibleEmbedder(openai_config(server, max_retries=2)))
    [vector] = await embed_guarded(embedder, ["retry me"])
    await embedder.aclose()
    assert vector == fake_vector("retry me", 1536)
    assert len(server.requests) == 3
    # every attempt sends the same bytes
    assert len({r.body for r in server.requests}) == 1


async def test_429_honours_retry_after(server: FakeHTTPServer) -> None:
    """Backoff is set far beyond the guard: only Retry-After: 0 lets this finish in time."""
    server.route(
        "POST",
        "/v1/embeddings",
        sequence(
            json_reply(429, {"error": {"message": "rate limited"}}, {"Retry-After": "0"}),
            fake_openai_embeddings(1536),
        ),
    )
    embedder = fast(OpenAICompatibleEmbedder(openai_config(server, max_retries=1)), backoff=SLOW_BACKOFF)
    [vector] = await embed_guarded(embedder, ["limited"])
    await embedder.aclose()
    assert vector == fake_vector("limited", 1536)
    assert len(server.requests) == 2


async def test_max_retries_zero_means_one_attempt(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/embeddings", json_reply(503, {"error": {"message": "down"}}))
    embedder = fast(OpenAICompatibleEmbedder(openai_config(server, max_retries=0)))
    with pytest.raises(ProviderError) as caught:
        await embed_guarded(embedder, ["x"])
    await embedder.aclose()
    assert caught.value.code == "provider_unavailable"
    assert len(server.requests) == 1


async def test_exhausted_retries_are_provider_unavailable(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/embeddings", json_reply(500, {"error": {"message": "boom"}}))
    embedder = fast(OpenAICompatibleEmbedder(openai_config(server, max_retries=3)))
    with pytest.raises(ProviderError) as caught:
        await embed_guarded(embedder, ["x"])
    await embedder.aclose()
    assert caught.value.code == "provider_unavailable"
    assert caught.value.details["attempts"] == 4
    assert "boom" in caught.value.message
    assert len(server.requests) == 4


async def test_dropped_connection_is_retried(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/embeddings", sequence(lambda *_: DROP_CONNECTION, fake_openai_embeddings(1536)))
    embedder = fast(OpenAICompatibleEmbedder(openai_config(server, max_retries=1)))
    [vector] = await embed_guarded(embedder, ["again"])
    await embedder.aclose()
    assert vector == fake_vector("again", 1536)
    assert len(server.requests) == 2


async def test_unreachable_endpoint_is_provider_unavailable() -> None:
    closed = FakeHTTPServer()
    url = closed.url("/v1")
    closed.stop()  # nothing listens on that port any more
    embedder = fast(OpenAICompatibleEmbedder(EmbeddingConfig(provider="openai", api_key=API_KEY, base_url=url)))
    with pytest.raises(ProviderError) as caught:
        await embed_guarded(embedder, ["x"])
    await embedder.aclose()
    assert caught.value.code == "provider_unavailable"
    assert API_KEY not in str(caught.value)


# --- rejections ----------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_4xx_is_rejected_at_once_and_never_shows_the_key(server: FakeHTTPServer, status: int) -> None:
    server.route("POST", "/v1/embeddings", echo_key_error(status))
    embedder = fast(OpenAICompatibleEmbedder(openai_config(server, max_retries=5)))
    with pytest.raises(ProviderError) as caught:
        await embed_guarded(embedder, ["x", "y"])
    await embedder.aclose()
    error = caught.value
    assert error.code == "provider_rejected"
    assert not isinstance(error, BatchTooLarge)
    assert len(server.requests) == 1
    assert f"HTTP {status}" in error.message
    for text in (str(error), error.message, repr(error.details), repr(error.args)):
        assert API_KEY not in text
    assert "[redacted]" in error.message


async def test_azure_key_never_in_messages(server: FakeHTTPServer) -> None:
    server.route("POST", "/openai/deployments/d/embeddings", echo_key_error(401))
    config = EmbeddingConfig(
        provider="azure_openai", api_key=API_KEY, base_url=server.base_url, deployment="d", dim=1536
    )
    embedder = OpenAICompatibleEmbedder(config)
    with pytest.raises(ProviderError) as caught:
        await embedder.embed(["x"])
    await embedder.aclose()
    assert caught.value.code == "provider_rejected"
    assert API_KEY not in str(caught.value)


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (400, "Requested 400000 tokens, max 300000 tokens per request"),
        (400, "'$.input' is invalid: too many inputs, maximum array size is 2048"),
        (413, "Request Entity Too Large"),
    ],
)
async def test_too_large_batch_is_batch_too_large(server: FakeHTTPServer, status: int, message: str) -> None:
    server.route("POST", "/v1/embeddings", json_reply(status, {"error": {"message": message}}))
    embedder = OpenAICompatibleEmbedder(openai_config(server))
    with pytest.raises(BatchTooLarge) as caught:
        await embedder.embed(["a", "b", "c", "d"])
    assert caught.value.code == "provider_rejected"
    assert caught.value.details["batch_size"] == 4
    assert isinstance(caught.value, ProviderError)
    # one input too large cannot be halved: that is the input's own fault
    with pytest.raises(InputTooLarge):
        await embedder.embed(["a"])
    await embedder.aclose()
    assert len(server.requests) == 2


# --- host-supplied clients -----------------------------------------------------------------------


async def test_host_client_is_used_and_never_closed(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/embeddings", fake_openai_embeddings(1536))
    host_client = httpx.AsyncClient(headers={"x-host-client": "yes"})
    purposes: list[str] = []

    def factory(purpose: str) -> httpx.AsyncClient | None:
        purposes.append(purpose)
        return host_client

    embedder = build_embedder(openai_config(server), http_client_factory=factory)
    await embedder.embed(["a"])
    await embedder.embed(["b"])
    await embedder.aclose()

    assert purposes == ["embeddings"]
    assert not host_client.is_closed
    assert all(r.header("x-host-client") == "yes" for r in server.requests)
    # the host can keep using its client after the provider is gone
    response = await host_client.post(server.url("/v1/embeddings"), json={"input": ["c"]})
    assert response.status_code == 200
    await host_client.aclose()


async def test_factory_returning_none_builds_and_closes_own_client(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/embeddings", fake_openai_embeddings(1536))
    embedder = OpenAICompatibleEmbedder(openai_config(server), http_client_factory=lambda purpose: None)
    await embedder.embed(["a"])
    own = embedder._http.get()
    assert not own.is_closed
    await embedder.aclose()
    assert own.is_closed
    # usable again after aclose: a fresh client is built
    await embedder.embed(["b"])
    await embedder.aclose()
    assert len(server.requests) == 2


# --- cohere --------------------------------------------------------------------------------------


def fake_cohere_embed(dim: int) -> Any:
    """Cohere ``/v2/embed`` reply: float embeddings per text."""

    def handler(body: Any, _headers: dict[str, str], _target: Target) -> tuple[int, dict[str, str], Any]:
        texts = body["texts"]
        return (
            200,
            {},
            {
                "id": "fake-id",
                "response_type": "embeddings_by_type",
                "embeddings": {"float": [fake_vector(t, dim) for t in texts]},
                "texts": texts,
                "meta": {"api_version": {"version": "2"}, "billed_units": {"input_tokens": len(texts)}},
            },
        )

    return handler


def cohere_config(server: FakeHTTPServer, **overrides: Any) -> EmbeddingConfig:
    settings: dict[str, Any] = {"provider": "cohere", "api_key": API_KEY, "base_url": server.base_url}
    settings.update(overrides)
    return EmbeddingConfig(**settings)


async def test_cohere_through_the_sdk(server: FakeHTTPServer) -> None:
    server.route("POST", "/v2/embed", fake_cohere_embed(1024))
    embedder = build_embedder(cohere_config(server))
    assert isinstance(embedder, CohereEmbedder)
    assert embedder.key == "cohere\tembed-english-v3.0\t1024"
    assert embedder.max_input_tokens == 512

    docs = await embedder.embed(["first doc", "second doc"])
    [query] = await embedder.embed(["a question"], kind="query")
    await embedder.aclose()

    assert docs == [fake_vector("first doc", 1024), fake_vector("second doc", 1024)]
    assert query == fake_vector("a question", 1024)
    first, second = server.requests
    assert first.path == "/v2/embed"
    assert first.header("authorization") == f"Bearer {API_KEY}"
    assert first.json()["texts"] == ["first doc", "second doc"]
    assert first.json()["model"] == "embed-english-v3.0"
    assert first.json()["input_type"] == "search_document"
    assert first.json()["truncate"] == "NONE"
    assert first.json()["embedding_types"] == ["float"]
    assert "output_dimension" not in first.json()
    assert second.json()["input_type"] == "search_query"
    assert second.json()["truncate"] == "NONE"


async def test_cohere_retries_429_and_rejects_401_without_the_key(server: FakeHTTPServer) -> None:
    server.route(
        "POST",
        "/v2/embed",
        sequence(
            json_reply(429, {"message": "slow down"}, {"Retry-After": "0"}),
            fake_cohere_embed(1024),
        ),
    )
    embedder = fast(build_embedder(cohere_config(server, max_retries=1)), backoff=SLOW_BACKOFF)
    [vector] = await embed_guarded(embedder, ["x"])
    assert vector == fake_vector("x", 1024)
    assert len(server.requests) == 2

    server.clear()
    server.route("POST", "/v2/embed", echo_key_error(401))
    with pytest.raises(ProviderError) as caught:
        await embed_guarded(embedder, ["x"])
    await embedder.aclose()
    assert caught.value.code == "provider_rejected"
    assert API_KEY not in str(caught.value)
    assert len(server.requests) == 1


async def test_cohere_uses_the_host_client_without_closing_it(server: FakeHTTPServer) -> None:
    server.route("POST", "/v2/embed", fake_cohere_embed(1024))
    host_client = httpx.AsyncClient(headers={"x-host-client": "yes"})
    embedder = build_embedder(cohere_config(server), http_client_factory=lambda purpose: host_client)
    await embedder.embed(["x"])
    await embedder.aclose()
    assert server.requests[0].header("x-host-client") == "yes"
    assert not host_client.is_closed
    await host_client.aclose()


async def test_cohere_v4_sends_output_dimension(server: FakeHTTPServer) -> None:
    server.route("POST", "/v2/embed", fake_cohere_embed(256))
    embedder = build_embedder(cohere_config(server, model="embed-v4.0", dim=256))
    [vector] = await embedder.embed(["x"])
    await embedder.aclose()
    assert len(vector) == 256
    assert server.requests[0].json()["output_dimension"] == 256
    with pytest.raises(ConfigError):
        build_embedder(cohere_config(server, dim=256))  # v3 cannot be shortened


# --- voyage --------------------------------------------------------------------------------------


def fake_voyage_embeddings(dim: int) -> Any:
    """Voyage ``/v1/embeddings``: base64 float32 when asked (the SDK asks), lists otherwise."""

    def handler(body: Any, _headers: dict[str, str], _target: Target) -> tuple[int, dict[str, str], Any]:
        width = int(body.get("output_dimension") or dim)
        data = []
        for i, text in enumerate(body["input"]):
            vector = fake_vector(text, width)
            if body.get("encoding_format") == "base64":
                encoded: Any = base64.b64encode(struct.pack(f"<{width}f", *vector)).decode("ascii")
            else:
                encoded = vector
            data.append({"object": "embedding", "embedding": encoded, "index": i})
        return 200, {}, {"object": "list", "data": data, "model": body["model"], "usage": {"total_tokens": 3}}

    return handler


def voyage_config(server: FakeHTTPServer, **overrides: Any) -> EmbeddingConfig:
    settings: dict[str, Any] = {"provider": "voyage", "api_key": API_KEY, "base_url": server.url("/v1")}
    settings.update(overrides)
    return EmbeddingConfig(**settings)


def _float32(values: list[float]) -> list[float]:
    return list(struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}f", *values)))


async def test_voyage_through_the_sdk(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/embeddings", fake_voyage_embeddings(1024))
    embedder = build_embedder(voyage_config(server))
    assert isinstance(embedder, VoyageEmbedder)
    assert embedder.key == "voyage\tvoyage-3\t1024"
    assert embedder.max_input_tokens == 32000

    docs = await embedder.embed(["doc one", "doc two"])
    [query] = await embedder.embed(["what is it"], kind="query")
    await embedder.aclose()

    assert docs == [_float32(fake_vector("doc one", 1024)), _float32(fake_vector("doc two", 1024))]
    assert query == _float32(fake_vector("what is it", 1024))
    first, second = server.requests
    assert first.header("authorization") == f"Bearer {API_KEY}"
    assert first.json()["input"] == ["doc one", "doc two"]
    assert first.json()["model"] == "voyage-3"
    assert first.json()["input_type"] == "document"
    assert first.json()["truncation"] is False
    assert second.json()["input_type"] == "query"
    assert second.json()["truncation"] is True


async def test_voyage_retries_then_rejects(server: FakeHTTPServer) -> None:
    server.route(
        "POST",
        "/v1/embeddings",
        sequence(json_reply(503, {"detail": "busy"}), fake_voyage_embeddings(1024)),
    )
    embedder = fast(build_embedder(voyage_config(server, max_retries=1)))
    [vector] = await embed_guarded(embedder, ["x"])
    assert vector == _float32(fake_vector("x", 1024))
    assert len(server.requests) == 2

    server.clear()
    server.route("POST", "/v1/embeddings", json_reply(401, {"detail": f"Provided API key is invalid: {API_KEY}"}))
    with pytest.raises(ProviderError) as caught:
        await embed_guarded(embedder, ["x"])
    assert caught.value.code == "provider_rejected"
    assert API_KEY not in str(caught.value)
    assert len(server.requests) == 1

    server.clear()
    server.route(
        "POST",
        "/v1/embeddings",
        json_reply(400, {"detail": "The max allowed tokens per submitted batch is 120000."}),
    )
    with pytest.raises(BatchTooLarge):
        await embed_guarded(embedder, ["x", "y"])
    await embedder.aclose()


async def test_voyage_exhaustion_and_zero_retries(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/embeddings", json_reply(429, {"detail": "rate"}, {"Retry-After": "0"}))
    embedder = fast(build_embedder(voyage_config(server, max_retries=0)))
    with pytest.raises(ProviderError) as caught:
        await embed_guarded(embedder, ["x"])
    assert caught.value.code == "provider_unavailable"
    assert len(server.requests) == 1


# --- factory and helpers -------------------------------------------------------------------------


def test_factory_picks_the_provider_and_checks_keys(server: FakeHTTPServer) -> None:
    assert isinstance(build_embedder(openai_config(server)), OpenAICompatibleEmbedder)
    for provider in ("openai", "cohere", "voyage", "azure_openai"):
        with pytest.raises(ConfigError, match="api_key"):
            build_embedder(EmbeddingConfig(provider=provider, base_url="http://127.0.0.1:9", deployment="d"))


def test_retry_after_parsing() -> None:
    assert parse_retry_after({"Retry-After": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # in the past
    assert parse_retry_after({"Retry-After": "86400"}) == 60.0  # capped
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None


def test_error_snippet_extracts_the_message() -> None:
    assert error_snippet(b'{"error": {"message": "bad  input"}}') == "bad input"
    assert error_snippet({"detail": "nope"}) == "nope"
    assert error_snippet("plain text") == "plain text"
    assert error_snippet(None) == ""
    assert len(error_snippet("x" * 5000)) == 300
    # a key straddling the length limit is removed before the cut, so no half of it survives
    cut = error_snippet("x" * 290 + API_KEY, (API_KEY,))
    assert API_KEY[:6] not in cut

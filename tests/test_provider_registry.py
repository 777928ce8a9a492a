"""An embedding provider and an LLM provider are each one module and one registration line: the two
defined here, in a test module, over a small JSON API served on 127.0.0.1, are accepted by the
settings (in code and from ``CE_*`` variables), listed in the settings schema, embed at ingest in
batches of their registered size and at search, retry like the built-ins, and answer the knowledge
tool's ``map_reduce`` action, with no other file edited."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pydantic
import pytest

from context_engine import TRUSTED, UNSCOPED, ContextEngine, call_knowledge_tool
from context_engine.config import ContextEngineConfig, EmbeddingConfig, LLMConfig, VisionLLMConfig
from context_engine.embeddings.base import InputKind
from context_engine.embeddings.factory import build_embedder
from context_engine.embeddings.remote import ModelTable, RemoteEmbedder
from context_engine.errors import ConfigError, ProviderError
from context_engine.ingest.batching import batch_limits
from context_engine.llm import build_llm, call_llm
from context_engine.llm.base import LLMClient, LLMReply
from context_engine.providers import (
    EmbeddingProvider,
    LLMProvider,
    register_embedding_provider,
    register_llm_provider,
    unregister_embedding_provider,
    unregister_llm_provider,
)
from context_engine.providers.failures import status_failure, transport_failure
from context_engine.providers.http import HttpClientFactory, HttpClientHolder
from context_engine.providers.redact import secret_of
from context_engine.providers.retry import with_retries
from tests.conftest import make_config
from tests.fakes import FakeHTTPServer, Target, fake_vector, json_reply, sequence

DIM = 16
KEY = "toy-secret-key-123"


# --- the provider modules a newcomer would write -----------------------------------------------------


class WordsEmbedder(RemoteEmbedder):
    """``POST {base_url}/embed`` with ``{"texts", "kind"}``; the reply is ``{"vectors": [...]}``."""

    models = ModelTable("words-1", 512)
    backoff_base = 0.01

    def __init__(self, config: EmbeddingConfig, http_client_factory: HttpClientFactory | None = None):
        if not config.base_url:
            raise ConfigError("provider 'words' needs embedding.base_url")
        super().__init__(config, http_client_factory, secret_of(config.api_key))
        self.size(flexible=True)  # no width table: embedding.dim is required
        self._url = config.base_url.rstrip("/") + "/embed"

    async def request(self, texts: list[str], kind: InputKind) -> list[list[float]]:
        try:
            response = await self._http.get().post(
                self._url, json={"texts": texts, "kind": kind}, headers={"x-key": self._api_key or ""}
            )
        except httpx.TransportError as exc:
            raise self.unreachable(exc) from exc
        if response.status_code >= 300:
            raise self.status_error(response.status_code, response.content, response.headers, len(texts))
        return [[float(x) for x in vector] for vector in response.json()["vectors"]]


class EchoChat(LLMClient):
    """``POST {base_url}/complete`` with the conversation; the reply is ``{"text", "tokens"}``."""

    def __init__(self, config: LLMConfig, http_client_factory: HttpClientFactory | None = None):
        if not config.base_url:
            raise ConfigError("provider 'echo' needs llm.base_url")
        self.provider, self.model = config.provider, config.model or "echo-1"
        self._config = config
        self._url = config.base_url.rstrip("/") + "/complete"
        self._http = HttpClientHolder(http_client_factory, "llm", config.timeout)

    async def complete(
        self,
        *,
        system: str,
        messages: list[dict[str, str]],
        schema: dict[str, Any] | None = None,
        schema_name: str = "reply",
    ) -> LLMReply:
        what = f"{self.provider} chat"

        async def attempt() -> httpx.Response:
            try:
                response = await self._http.get().post(self._url, json={"system": system, "messages": messages})
            except httpx.TransportError as exc:
                raise transport_failure(what, exc, ()) from exc
            if response.status_code >= 300:
                raise status_failure(what, response.status_code, response.content, response.headers, secrets=())
            return response

        response = await with_retries(what, attempt, max_retries=self._config.max_retries, backoff_base=0.01,
                                      secrets=())  # fmt: skip
        body = response.json()
        return LLMReply(text=body["text"], tokens=int(body["tokens"]), mode="text" if schema is None else "prompt")

    async def aclose(self) -> None:
        await self._http.aclose()


# --- the fake service both talk to --------------------------------------------------------------------


def embed(body: Any, headers: dict[str, str], target: Target) -> tuple[int, dict[str, str], Any]:
    if headers.get("x-key") != KEY:
        return 401, {}, {"error": {"message": f"bad key {headers.get('x-key')}"}}
    return 200, {}, {"vectors": [fake_vector(text, DIM) for text in body["texts"]]}


def complete(body: Any, headers: dict[str, str], target: Target) -> tuple[int, dict[str, str], Any]:
    prompt = body["messages"][-1]["content"]
    return 200, {}, {"text": json.dumps({"answer": "colonies" in prompt.lower()}), "tokens": 7}


@pytest.fixture
def providers() -> Iterator[tuple[EmbeddingProvider, LLMProvider]]:
    words = register_embedding_provider(EmbeddingProvider("words", WordsEmbedder, batch_items=2))
    echo = register_llm_provider(LLMProvider("echo", EchoChat))
    try:
        yield words, echo
    finally:
        unregister_embedding_provider("words")
        unregister_llm_provider("echo")


@pytest.fixture
def server() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer() as fake:
        fake.route("POST", "/embed", embed)
        fake.route("POST", "/complete", complete)
        yield fake


def settings(server: FakeHTTPServer) -> dict[str, Any]:
    return {
        "embedding": {"provider": "words", "base_url": server.url(), "api_key": KEY, "dim": DIM, "max_retries": 2},
        "llm": {"provider": "echo", "base_url": server.url(), "max_retries": 0},
    }


async def test_registered_providers_ingest_search_and_answer_map_reduce(
    database_url: str, server: FakeHTTPServer, providers: Any
) -> None:
    config = make_config(database_url, ingest={"chunk_tokens": 16}, **settings(server))
    birds = " ".join(f"Penguin colonies nest on rocky shore number {n}, far from any town." for n in range(6))
    async with ContextEngine(config) as engine:
        await engine.ingest(text=f"# Birds\n\n{birds}", name="birds.md")
        await engine.ingest(text="# Money\n\nQuarterly figures for the board.", name="money.md")
        found = await engine.search("penguin colonies", principals=TRUSTED)
        mapped = await call_knowledge_tool(
            engine, principals=TRUSTED, scope=UNSCOPED, action="map_reduce", query="Does this name a penguin?"
        )
    embedded = [r.json() for r in server.requests if r.path == "/embed"]
    assert {body["kind"] for body in embedded} == {"document", "query"}
    # the registered batch size: the six-chunk document went two chunks a request
    assert max(len(body["texts"]) for body in embedded) == 2
    assert found.hits and found.hits[0].document_name == "birds.md" and "vector" in found.usage["legs"]
    assert mapped["success"] is True and mapped["processed"] == 2
    answers = {r["document_name"]: r["data"] for r in mapped["results"]}
    assert answers == {"birds.md": {"answer": True}, "money.md": {"answer": False}}
    assert any(r.path == "/complete" for r in server.requests)


async def test_registered_providers_are_read_from_the_environment(
    database_url: str, server: FakeHTTPServer, providers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {
        "CE_DATABASE_URL": database_url,
        "CE_STORAGE__AUTO_MIGRATE": "true",
        "CE_EMBEDDING__PROVIDER": "words",
        "CE_EMBEDDING__BASE_URL": server.url(),
        "CE_EMBEDDING__API_KEY": KEY,
        "CE_EMBEDDING__DIM": str(DIM),
        "CE_LLM__PROVIDER": "echo",
        "CE_LLM__BASE_URL": server.url(),
    }.items():
        monkeypatch.setenv(name, value)
    config = ContextEngineConfig.from_env()
    assert (config.embedding.provider, config.llm and config.llm.provider) == ("words", "echo")
    async with ContextEngine(config) as engine:
        report = await engine.ingest(text="Penguins again.", name="p.md")
        assert [d.status for d in report.documents] == ["completed"]
    assert [r.json()["texts"] for r in server.requests if r.path == "/embed"] == [["Penguins again."]]
    reply = await call_llm(config.llm, user="do penguin colonies nest here?")  # type: ignore[arg-type]
    assert json.loads(reply.text) == {"answer": True} and reply.tokens == 7


async def test_a_registered_provider_shares_the_retry_policy_and_redaction(
    server: FakeHTTPServer, providers: Any
) -> None:
    server.route(
        "POST",
        "/embed",
        sequence(json_reply(429, {"error": {"message": "slow down"}}, {"Retry-After": "0"}), embed),
    )
    embedder = build_embedder(EmbeddingConfig(**settings(server)["embedding"]))
    assert isinstance(embedder, WordsEmbedder) and embedder.key == f"words\twords-1\t{DIM}"
    assert len(await embedder.embed(["a", "b"])) == 2 and len(server.requests) == 2
    server.route("POST", "/embed", json_reply(400, {"error": {"message": f"key {KEY} is not allowed"}}))
    with pytest.raises(ProviderError) as caught:
        await embedder.embed(["a"])
    assert caught.value.code == "provider_rejected" and KEY not in caught.value.message
    await embedder.aclose()
    assert isinstance(build_llm(LLMConfig(**settings(server)["llm"])), EchoChat)


def test_settings_schema_and_batch_caps_follow_the_registry(providers: Any) -> None:
    schema = ContextEngineConfig.model_json_schema()["$defs"]
    assert "words" in schema["EmbeddingConfig"]["properties"]["provider"]["enum"]
    assert "echo" in schema["LLMConfig"]["properties"]["provider"]["enum"]
    assert "echo" in schema["VisionLLMConfig"]["properties"]["provider"]["enum"]
    assert batch_limits(EmbeddingConfig(provider="words", dim=DIM), "words") == (2, None)
    assert VisionLLMConfig(provider="echo").provider == "echo"
    with pytest.raises(pydantic.ValidationError, match=r"echo serves LLMs only; set embedding\.provider to one of"):
        EmbeddingConfig(provider="echo")
    with pytest.raises(pydantic.ValidationError, match=r"words serves embeddings only; set vision_llm\.provider"):
        VisionLLMConfig(provider="words")
    with pytest.raises(ValueError, match="already registered"):
        register_embedding_provider(EmbeddingProvider("words", WordsEmbedder))
    with pytest.raises(ValueError, match="Python identifier"):
        register_llm_provider(LLMProvider("no such", EchoChat))


def test_an_unregistered_name_is_refused_with_the_registered_ones() -> None:
    with pytest.raises(pydantic.ValidationError, match=r"no embedding provider is named 'words'; set embedding\."):
        EmbeddingConfig(provider="words")
    with pytest.raises(pydantic.ValidationError, match=r"no llm provider is named 'echo'; set llm\.provider to one of"):
        LLMConfig(provider="echo")
    enum = ContextEngineConfig.model_json_schema()["$defs"]["EmbeddingConfig"]["properties"]["provider"]["enum"]
    assert enum == ["local", "openai", "azure_openai", "custom", "cohere", "voyage", "gemini", "vertex_ai"]

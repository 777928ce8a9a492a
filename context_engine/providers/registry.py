"""The embedding and LLM providers, registered once by name.

A provider is one module and one :class:`EmbeddingProvider` or :class:`LLMProvider` record
registered here. The record names what builds it (``build(config, http_client_factory)``) and the
facts the rest of the engine asks of a provider without building it: the settings accept its name
(``embedding.provider``, ``llm.provider``, ``vision_llm.provider``), ingest packs its batches by its
limits, and ``embedding.tokenizer="exact"`` is refused unless it counts tokens locally.

The built-ins are listed at the bottom, each naming its builder as ``"module:attribute"`` so a
provider's module (and its optional SDK) is imported only when it is built. A host or a test adds
one with :func:`register_embedding_provider` / :func:`register_llm_provider` and a builder it
imports itself.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from context_engine.errors import ConfigError
from context_engine.providers.http import HttpClientFactory

#: ``build(config_section, http_client_factory)``: an ``Embedder`` or an ``LLMClient``
Builder = Callable[[Any, HttpClientFactory | None], Any]


@dataclass(frozen=True)
class EmbeddingProvider:
    """One ``embedding.provider`` value and what the engine needs to know about it."""

    name: str
    #: the builder, or ``"module:attribute"`` naming it (imported on first build)
    build: Builder | str
    #: items per request, and tokens per request or None (``embedding.max_batch_*`` override)
    batch_items: int = 64
    batch_tokens: int | None = None
    #: the provider's own tokenizer runs locally, so ``embedding.tokenizer="exact"`` means something
    exact_tokenizer: bool = False


@dataclass(frozen=True)
class LLMProvider:
    """One ``llm.provider`` / ``vision_llm.provider`` value."""

    name: str
    build: Builder | str
    #: why ``embedding.provider`` refuses this name, when it has no embeddings API here
    no_embeddings: str | None = None


_EMBEDDING: dict[str, EmbeddingProvider] = {}
_LLM: dict[str, LLMProvider] = {}


def _check_name(name: Any, registered: dict[str, Any], kind: str, record: Any) -> None:
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"an {kind} provider needs a name that is a Python identifier (it is a setting's value)")
    if name in registered and registered[name] is not record:
        raise ValueError(f"an {kind} provider named {name!r} is already registered")


def register_embedding_provider(provider: EmbeddingProvider) -> EmbeddingProvider:
    """Add an embedding provider; a second one with a registered name is refused (unregister first)."""
    _check_name(provider.name, _EMBEDDING, "embedding", provider)
    _EMBEDDING[provider.name] = provider
    return provider


def register_llm_provider(provider: LLMProvider) -> LLMProvider:
    """Add an LLM provider; a second one with a registered name is refused (unregister first)."""
    _check_name(provider.name, _LLM, "LLM", provider)
    _LLM[provider.name] = provider
    return provider


def unregister_embedding_provider(name: str) -> None:
    _EMBEDDING.pop(name, None)


def unregister_llm_provider(name: str) -> None:
    _LLM.pop(name, None)


def embedding_providers() -> dict[str, EmbeddingProvider]:
    """Every embedding provider by name, built-ins first, then in registration order."""
    return dict(_EMBEDDING)


def llm_providers() -> dict[str, LLMProvider]:
    return dict(_LLM)


def embedding_provider(name: str) -> EmbeddingProvider:
    try:
        return _EMBEDDING[name]
    except KeyError:
        raise ConfigError(f"unknown embedding provider {name!r}") from None


def llm_provider(name: str) -> LLMProvider:
    try:
        return _LLM[name]
    except KeyError:
        raise ConfigError(f"unknown llm provider {name!r}") from None


def build(provider: EmbeddingProvider | LLMProvider, config: Any, http_client_factory: HttpClientFactory | None,
          expected: type[Any]) -> Any:  # fmt: skip
    """What the provider's builder makes of ``config`` (its module imported when named by path),
    checked to be an ``expected`` (``Embedder`` or ``LLMClient``: the factories' return types)."""
    builder = provider.build
    if isinstance(builder, str):
        module, _, attribute = builder.partition(":")
        builder = getattr(importlib.import_module(module), attribute)
    built = builder(config, http_client_factory)
    if not isinstance(built, expected):
        raise TypeError(f"provider {provider.name!r} built {type(built).__name__}, not {expected.__name__}")
    return built


# --- the built-ins ------------------------------------------------------------------------------

_OPENAI_EMBEDDINGS = "context_engine.embeddings.openai_compat:OpenAICompatibleEmbedder"
_GEMINI_EMBEDDINGS = "context_engine.embeddings.gemini:GeminiEmbedder"
_OPENAI_LLM = "context_engine.llm.openai_compat:OpenAICompatibleLLM"
_GEMINI_LLM = "context_engine.llm.gemini:GeminiLLM"

for _embedding in (
    EmbeddingProvider("local", "context_engine.embeddings.local:from_settings", 64, None, exact_tokenizer=True),
    EmbeddingProvider("openai", _OPENAI_EMBEDDINGS, 256, 250_000, exact_tokenizer=True),
    EmbeddingProvider("azure_openai", _OPENAI_EMBEDDINGS, 256, 250_000, exact_tokenizer=True),
    EmbeddingProvider("custom", _OPENAI_EMBEDDINGS, 256, 250_000, exact_tokenizer=True),
    EmbeddingProvider("cohere", "context_engine.embeddings.cohere:CohereEmbedder", 96, None),
    EmbeddingProvider("voyage", "context_engine.embeddings.voyage:VoyageEmbedder", 128, 120_000),
    # one batchEmbedContents request carries at most 100 inputs; the API states no per-request token cap
    EmbeddingProvider("gemini", _GEMINI_EMBEDDINGS, 100, None),
    EmbeddingProvider("vertex_ai", _GEMINI_EMBEDDINGS, 100, None),
):
    register_embedding_provider(_embedding)

for _llm in (
    LLMProvider("openai", _OPENAI_LLM),
    LLMProvider("azure_openai", _OPENAI_LLM),
    LLMProvider("custom", _OPENAI_LLM),
    LLMProvider("anthropic", "context_engine.llm.anthropic_sdk:AnthropicLLM", "Anthropic has no embeddings API"),
    LLMProvider("gemini", _GEMINI_LLM),
    LLMProvider("vertex_ai", _GEMINI_LLM),
    LLMProvider("bedrock", "context_engine.llm.bedrock:BedrockLLM", "bedrock is served for LLMs only"),
):
    register_llm_provider(_llm)

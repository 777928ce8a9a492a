"""One entry point from settings to a working embedder."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from context_engine.config import EmbeddingConfig
from context_engine.embeddings.base import Embedder
from context_engine.errors import ConfigError


def build_embedder(
    config: EmbeddingConfig,
    http_client_factory: Callable[[str], httpx.AsyncClient | None] | None = None,
) -> Embedder:
    """The provider named by ``config.provider``, built with its settings checked.

    ``http_client_factory(purpose)`` lets the host share its httpx client (purpose
    ``"embeddings"``); returning None makes the provider build, and later close, its own. Optional
    SDKs (cohere, voyage, google-genai) are imported here, so a missing extra fails at startup with its install
    command rather than on the first request.
    """
    provider = config.provider
    if provider == "local":
        from context_engine.embeddings.local import LocalEmbedder

        return LocalEmbedder(config)
    if provider in ("openai", "azure_openai", "custom"):
        from context_engine.embeddings.openai_compat import OpenAICompatibleEmbedder

        return OpenAICompatibleEmbedder(config, http_client_factory)
    if provider == "cohere":
        from context_engine.embeddings.cohere import CohereEmbedder

        return CohereEmbedder(config, http_client_factory)
    if provider == "voyage":
        from context_engine.embeddings.voyage import VoyageEmbedder

        return VoyageEmbedder(config, http_client_factory)
    if provider in ("gemini", "vertex_ai"):
        from context_engine.embeddings.gemini import GeminiEmbedder

        return GeminiEmbedder(config, http_client_factory)
    raise ConfigError(f"unknown embedding provider {provider!r}")

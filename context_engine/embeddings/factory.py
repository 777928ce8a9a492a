"""One entry point from settings to a working embedder."""

from __future__ import annotations

from context_engine.config import EmbeddingConfig
from context_engine.embeddings.base import Embedder
from context_engine.providers import registry
from context_engine.providers.http import HttpClientFactory


def build_embedder(config: EmbeddingConfig, http_client_factory: HttpClientFactory | None = None) -> Embedder:
    """The provider registered as ``config.provider``, built with its settings checked.

    ``http_client_factory(purpose)`` lets the host share its httpx client (purpose
    ``"embeddings"``); returning None makes the provider build, and later close, its own. Optional
    SDKs (cohere, voyage, google-genai) are imported here, so a missing extra fails at startup with its install
    command rather than on the first request.
    """
    return registry.build(registry.embedding_provider(config.provider), config, http_client_factory, Embedder)

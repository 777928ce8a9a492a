"""The model-provider seam: the host's HTTP clients, the provider registries, schema-enforced calls.

What every remote provider (embedders, LLMs, rerankers) shares lives in this package: the HTTP
client holder (:mod:`.http`), the retry policy (:mod:`.retry`), what a failure means
(:mod:`.failures`), keeping keys out of messages (:mod:`.redact`), optional SDK imports
(:mod:`.sdk`) and the Google SDK both Gemini providers use (:mod:`.genai`).
"""

from __future__ import annotations

from context_engine.providers.http import HttpClientFactory, HttpClientPurpose
from context_engine.providers.registry import (
    EmbeddingProvider,
    LLMProvider,
    register_embedding_provider,
    register_llm_provider,
    unregister_embedding_provider,
    unregister_llm_provider,
)

__all__ = [
    "EmbeddingProvider",
    "HttpClientFactory",
    "HttpClientPurpose",
    "LLMProvider",
    "register_embedding_provider",
    "register_llm_provider",
    "unregister_embedding_provider",
    "unregister_llm_provider",
]

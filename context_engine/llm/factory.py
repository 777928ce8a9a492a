"""From ``LLMConfig`` to a working client."""

from __future__ import annotations

from context_engine.config import LLMConfig
from context_engine.llm.base import LLMClient
from context_engine.providers import registry
from context_engine.providers.http import HttpClientFactory


def build_llm(config: LLMConfig, http_client_factory: HttpClientFactory | None = None) -> LLMClient:
    """The provider registered as ``config.provider``; settings are checked here, before any request.

    ``http_client_factory("llm")`` may hand over the host's long-lived httpx client; the engine
    never closes it. Returning None makes the provider build its own, closed by ``aclose()``.
    """
    return registry.build(registry.llm_provider(config.provider), config, http_client_factory, LLMClient)

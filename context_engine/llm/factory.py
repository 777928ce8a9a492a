"""From ``LLMConfig`` to a working client."""

from __future__ import annotations

from context_engine.config import LLMConfig
from context_engine.errors import ConfigError
from context_engine.llm.base import HttpClientFactory, LLMClient


def build_llm(config: LLMConfig, http_client_factory: HttpClientFactory | None = None) -> LLMClient:
    """The provider named by ``config.provider``; settings are checked here, before any request.

    ``http_client_factory("llm")`` may hand over the host's long-lived httpx client; the engine
    never closes it. Returning None makes the provider build its own, closed by ``aclose()``.
    """
    if config.provider in ("openai", "azure_openai", "custom"):
        from context_engine.llm.openai_compat import OpenAICompatibleLLM

        return OpenAICompatibleLLM(config, http_client_factory)
    if config.provider == "anthropic":
        from context_engine.llm.anthropic_sdk import AnthropicLLM

        return AnthropicLLM(config, http_client_factory)
    if config.provider in ("gemini", "vertex_ai"):
        from context_engine.llm.gemini import GeminiLLM

        return GeminiLLM(config, http_client_factory)
    if config.provider == "bedrock":
        from context_engine.llm.bedrock import BedrockLLM

        return BedrockLLM(config, http_client_factory)
    raise ConfigError(f"unknown llm provider {config.provider!r}")

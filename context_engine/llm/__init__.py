"""LLM providers behind one small interface, and schema-checked JSON replies.

``build_llm(config.llm, http_client_factory)`` gives an :class:`LLMClient`; ``structured_call``
asks it for JSON matching a schema from the portable subset (:mod:`context_engine.llm.schema`),
validates the reply locally and re-asks at most once.
"""

from context_engine.llm.base import LLMClient, LLMReply
from context_engine.llm.factory import build_llm
from context_engine.llm.schema import SchemaError, strict_portable, validate
from context_engine.llm.structured import StructuredCallError, StructuredResult, structured_call


def reset_native_schema_support() -> None:
    """Let every provider rediscover native schema support (after an SDK, model or endpoint upgrade)."""
    from context_engine.llm import anthropic_sdk, bedrock, gemini, openai_compat

    for module in (openai_compat, anthropic_sdk, gemini, bedrock):
        module.reset_native_schema_support()


__all__ = [
    "LLMClient",
    "LLMReply",
    "SchemaError",
    "StructuredCallError",
    "StructuredResult",
    "build_llm",
    "reset_native_schema_support",
    "strict_portable",
    "structured_call",
    "validate",
]

"""LLM providers behind one small interface, and schema-checked JSON replies.

``build_llm(config.llm, http_client_factory)`` gives an :class:`LLMClient`; ``structured_call``
asks it for JSON matching a schema from the portable subset (:mod:`context_engine.llm.schema`),
validates the reply locally and re-asks at most once when the schema was only asked for in words.
"""

from context_engine.llm.base import LLMClient, LLMReply, reset_native_schema_support
from context_engine.llm.call import call_llm
from context_engine.llm.factory import build_llm
from context_engine.llm.schema import SchemaError, lint_unenforced, strict_portable, validate
from context_engine.llm.structured import (
    StructuredCallError,
    StructuredRefusal,
    StructuredResult,
    structured_call,
    structured_repair_count,
)

__all__ = [
    "LLMClient",
    "LLMReply",
    "SchemaError",
    "StructuredCallError",
    "StructuredRefusal",
    "StructuredResult",
    "build_llm",
    "call_llm",
    "lint_unenforced",
    "reset_native_schema_support",
    "strict_portable",
    "structured_call",
    "structured_repair_count",
    "validate",
]

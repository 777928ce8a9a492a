"""One validated JSON value from any configured LLM (the portable-schema call and its errors)."""

from __future__ import annotations

from context_engine.llm.structured import (
    LLMNotConfigured,
    StructuredCallError,
    StructuredRefusal,
    StructuredResult,
    structured_call,
    structured_repair_count,
)

__all__ = [
    "LLMNotConfigured",
    "StructuredCallError",
    "StructuredRefusal",
    "StructuredResult",
    "structured_call",
    "structured_repair_count",
]

"""The portable JSON Schema subset every provider's strict mode accepts, and its linter."""

from __future__ import annotations

from context_engine.llm.schema import SchemaError, strict_portable, validate

__all__ = ["SchemaError", "strict_portable", "validate"]

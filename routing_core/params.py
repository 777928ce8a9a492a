"""Query parameters checked against the schema each route declares for them (the OpenAPI one).

The declared schema is the whole check: type, bounds, length, ``enum`` and ``pattern`` are read
from it here, so what ``openapi/openapi.json`` promises is what every adapter enforces.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from context_engine.errors import ContextEngineError
from context_engine.validation import check_text
from routing_core.http import HttpError

#: a parameter's JSON schema, or a function that builds it when it follows a registry (the tool kinds)
ParamSchema = dict[str, Any] | Callable[[], dict[str, Any]]
#: (name, JSON schema, description), as a route declares them
QueryParam = tuple[str, ParamSchema, str]
#: a schema's own error code for a string it refuses (a cursor: ``invalid_cursor``), else ``invalid_request``
ERROR_CODE = "x-error-code"


def check_query(declared: tuple[QueryParam, ...], query: Mapping[str, list[str]]) -> dict[str, list[Any]]:
    """Every value of every declared parameter, converted to its schema's type; others are ignored."""
    checked: dict[str, list[Any]] = {}
    for name, schema, _ in declared:
        if name in query:
            built = schema_of(schema)
            checked[name] = [_convert(name, built, raw) for raw in query[name]]
    return checked


def schema_of(schema: ParamSchema) -> dict[str, Any]:
    """The schema as it stands now (one built from a registry is built on each call)."""
    return schema() if callable(schema) else schema


def _convert(name: str, schema: dict[str, Any], raw: str) -> Any:
    kind = schema["type"]
    if kind == "integer":
        digits = raw[1:] if raw[:1] == "-" else raw
        if not (digits.isascii() and digits.isdigit()) or len(digits) > 18:
            raise HttpError(400, "invalid_request", f"{name}: must be an integer")
        value = int(raw)
        low, high = schema.get("minimum"), schema.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = f"at least {low}" if high is None else f"between {low} and {high}"
            raise HttpError(400, "invalid_request", f"{name}: must be an integer {bounds}")
        return value
    if kind == "boolean":
        if raw.lower() in ("1", "true", "yes"):
            return True
        if raw.lower() in ("0", "false", "no"):
            return False
        raise HttpError(400, "invalid_request", f"{name}: must be true or false")
    code = schema.get(ERROR_CODE, "invalid_request")
    try:
        text = check_text(raw, name, schema.get("maxLength"), required=schema.get("minLength", 0) > 0)
    except ContextEngineError as exc:
        raise HttpError(exc.status, code if exc.status == 400 else exc.code, exc.message) from None
    allowed = schema.get("enum")
    if allowed is not None and text not in allowed:
        raise HttpError(400, code, f"{name}: must be one of {', '.join(allowed)}")
    pattern = schema.get("pattern")
    if pattern is not None and _compiled(pattern).search(text) is None:
        raise HttpError(400, code, f"{name}: has characters this parameter never holds")
    return text


@lru_cache(maxsize=64)
def _compiled(pattern: str) -> re.Pattern[str]:
    """A JSON Schema pattern: unanchored, as ``re.search`` reads it."""
    return re.compile(pattern)

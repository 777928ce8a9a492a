"""Query parameters checked against the schema each route declares for them (the OpenAPI one)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from context_engine.errors import ContextEngineError
from context_engine.validation import check_text
from routing_core.http import HttpError

#: (name, JSON schema, description), as a route declares them
QueryParam = tuple[str, dict[str, Any], str]


def check_query(declared: tuple[QueryParam, ...], query: Mapping[str, list[str]]) -> dict[str, list[Any]]:
    """Every value of every declared parameter, converted to its schema's type; others are ignored."""
    checked: dict[str, list[Any]] = {}
    for name, schema, _ in declared:
        if name in query:
            checked[name] = [_convert(name, schema, raw) for raw in query[name]]
    return checked


def _convert(name: str, schema: dict[str, Any], raw: str) -> Any:
    kind = schema["type"]
    if kind == "integer":
        digits = raw[1:] if raw[:1] == "-" else raw
        if not (digits.isascii() and digits.isdigit()) or len(digits) > 18:
            raise HttpError(400, "invalid_request", f"{name}: must be an integer")
        return int(raw)
    if kind == "boolean":
        if raw.lower() in ("1", "true", "yes"):
            return True
        if raw.lower() in ("0", "false", "no"):
            return False
        raise HttpError(400, "invalid_request", f"{name}: must be true or false")
    try:
        return check_text(raw, name, schema.get("maxLength"), required=schema.get("minLength", 0) > 0)
    except ContextEngineError as exc:
        raise HttpError(exc.status, exc.code, exc.message) from None

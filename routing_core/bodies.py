"""A JSON request body: bytes to a validated request model, or a precise 4xx."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ValidationError

from routing_core.http import HttpError


def too_large(size: int, limit: int) -> HttpError:
    return HttpError(413, "too_large", f"the request body is {size} bytes; the limit is {limit}")


def parse_json_body(raw: bytes, model: type[BaseModel], max_bytes: int) -> BaseModel:
    """Decode, check and validate one JSON object body against ``model``."""
    if len(raw) > max_bytes:
        raise too_large(len(raw), max_bytes)
    if not raw.strip():
        raise HttpError(400, "invalid_request", "a JSON body is required")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HttpError(400, "invalid_json", f"the body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise HttpError(400, "invalid_request", "the body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise HttpError(400, "invalid_request", describe(exc)) from None


def describe(exc: ValidationError) -> str:
    """The first few validation errors, each naming its field."""
    parts = []
    for err in exc.errors()[:5]:
        field = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(_message(field, err))
    return "; ".join(parts)


def _message(field: str, err: Any) -> str:
    if err["type"] == "string_too_short" and err.get("ctx", {}).get("min_length") == 1:
        return f"{field} must be a non-empty string"  # the engine's words for the same refusal
    return f"{field}: {err['msg']}"

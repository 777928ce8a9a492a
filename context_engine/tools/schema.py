"""JSON-Schema checks for tool arguments (the schema a model is shown is the one enforced)."""

from __future__ import annotations

import json
from functools import lru_cache
from types import ModuleType
from typing import TYPE_CHECKING, Any

from context_engine.tools.errors import ToolArgumentsInvalid, ToolConfigInvalid, missing_extra

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator


OBJECT_SCHEMA: dict[str, Any] = {"type": "object"}


def checked_schema(schema: Any) -> dict[str, Any]:
    """``schema`` if it is a valid JSON Schema for an arguments object, else a precise refusal."""
    if schema is None:
        return dict(OBJECT_SCHEMA)
    if not isinstance(schema, dict):
        raise ToolConfigInvalid("parameters must be a JSON Schema object")
    jsonschema = _jsonschema()
    try:
        _validator(json.dumps(schema, sort_keys=True))
    except jsonschema.exceptions.SchemaError as exc:
        raise ToolConfigInvalid(f"parameters is not a valid JSON Schema: {exc.message}") from None
    except (TypeError, ValueError):
        raise ToolConfigInvalid("parameters must be plain JSON") from None
    if "type" not in schema and "properties" in schema:
        schema = {"type": "object", **schema}
    return schema


def validate_arguments(schema: dict[str, Any], arguments: Any) -> None:
    """Raise ``ToolArgumentsInvalid`` naming the first violation (by path) of ``arguments``."""
    if not isinstance(arguments, dict):
        raise ToolArgumentsInvalid("arguments must be a JSON object")
    validator = _validator(json.dumps(schema, sort_keys=True))
    errors = sorted(validator.iter_errors(arguments), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(root)"
        raise ToolArgumentsInvalid(
            f"arguments do not match the tool's schema at {where}: {first.message}",
            details={"path": [str(p) for p in first.absolute_path], "rule": str(first.validator)},
        )


def _jsonschema() -> ModuleType:
    """jsonschema (the ``tools`` extra), imported with the first schema rather than with the package."""
    try:
        import jsonschema
    except ImportError:  # the extra is not installed: refused when a schema is checked
        raise missing_extra("tools", "jsonschema") from None
    return jsonschema


@lru_cache(maxsize=512)
def _validator(schema_json: str) -> Draft202012Validator:
    """A checked validator per distinct schema (checking a schema costs far more than using it)."""
    validator: type[Draft202012Validator] = _jsonschema().Draft202012Validator
    schema = json.loads(schema_json)
    validator.check_schema(schema)
    return validator(schema)

"""The portable JSON Schema subset: what every provider's strict mode accepts, and a local validator.

Why a subset: OpenAI's ``strict`` json_schema, Anthropic's ``output_config.format`` and a forced
tool all enforce only part of JSON Schema, and each rejects a different part. A schema that stays
inside their intersection can be sent to any of them unchanged; and because the same normalised
bytes are both sent and validated against here, a reply is never judged against a schema the
provider did not see.

The subset: objects, arrays, strings, numbers, integers, booleans, nulls, ``enum`` of scalars and
``$ref`` into a root ``$defs``. Nullable is a type list (``["string", "null"]``). Every object gets
``additionalProperties: false`` and all its properties required. No ``minItems``/``pattern``/
``format``/``minimum``/``anyOf``, no recursion: range and length checks belong to the caller.

Why a local validator rather than the ``jsonschema`` package: the subset is small, and the engine
should not take a dependency for it; replies are always validated here, even in the modes where
the provider says it enforced the schema.

A shape the subset cannot describe (an object whose keys come from the document) is sent with
``enforce=False``: :func:`lint_unenforced` checks only that the schema stays inside the keywords
the validator implements and fills nothing in, so ``required`` and ``additionalProperties`` mean
what the caller wrote (absent ``additionalProperties`` allows extra keys, as in JSON Schema).
"""

from __future__ import annotations

import copy
from typing import Any

from context_engine.errors import ConfigError

_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}
_ALLOWED = {"type", "properties", "required", "additionalProperties", "items", "enum", "$ref", "description", "title"}
_MAX_ERRORS = 5


class SchemaError(ConfigError):
    """A schema outside the portable subset: raised before any request goes out."""

    code = "schema_error"


def strict_portable(schema: dict[str, Any]) -> dict[str, Any]:
    """A normalised copy of ``schema`` inside the portable subset, or ``SchemaError`` naming the problem."""
    if not isinstance(schema, dict):
        raise SchemaError("a schema must be a JSON object")
    out = copy.deepcopy(schema)
    defs = out.pop("$defs", None)
    if defs is not None and not isinstance(defs, dict):
        raise SchemaError("$defs must be an object")
    defs = defs or {}
    for name, sub in defs.items():
        _normalise(sub, f"$defs/{name}", defs, ())
    _normalise(out, "#", defs, ())
    if out.get("type") != "object":
        raise SchemaError("the root of a reply schema must be an object")
    if defs:
        out["$defs"] = defs
    return out


def lint_unenforced(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` checked against the validator's vocabulary only (nothing filled in).

    Why still checked: a keyword the validator does not implement (``format``, ``pattern``...) would
    be silently ignored, and the caller would trust a check that never ran.
    """
    if not isinstance(schema, dict):
        raise SchemaError("a schema must be a JSON object")
    out = copy.deepcopy(schema)
    defs = out.get("$defs", {})
    if not isinstance(defs, dict):
        raise SchemaError("$defs must be an object")
    for name, sub in defs.items():
        _lint(sub, f"$defs/{name}", defs)
    _lint({k: v for k, v in out.items() if k != "$defs"}, "#", defs)
    return out


def _check_keywords(node: Any, where: str, outside: str) -> None:
    """``node`` is a schema object using only keywords the validator implements (else: ``outside``)."""
    if not isinstance(node, dict):
        raise SchemaError(f"{where}: a schema must be a JSON object")
    unknown = set(node) - _ALLOWED
    if unknown:
        raise SchemaError(f"{where}: {sorted(unknown)[0]!r} {outside}")


def _check_ref(ref: Any, where: str, defs: dict[str, Any]) -> str:
    if not isinstance(ref, str) or not ref.startswith("#/$defs/") or ref[8:] not in defs:
        raise SchemaError(f"{where}: $ref must point into the root $defs")
    return ref


def _lint(node: Any, where: str, defs: dict[str, Any]) -> None:
    _check_keywords(node, where, "is not a keyword the reply validator implements")
    if "$ref" in node:
        _check_ref(node["$ref"], where, defs)
        return
    if "type" in node:
        types = node["type"]
        names = [types] if isinstance(types, str) else types
        if not isinstance(names, list) or not names or not all(isinstance(t, str) and t in _TYPES for t in names):
            raise SchemaError(f"{where}: 'type' must name one or more of {sorted(_TYPES)}")
    if "enum" in node and (not isinstance(node["enum"], list) or not node["enum"]):
        raise SchemaError(f"{where}: 'enum' must be a non-empty list")
    props = node.get("properties", {})
    if not isinstance(props, dict):
        raise SchemaError(f"{where}: 'properties' must be an object")
    required = node.get("required", [])
    if not isinstance(required, list) or not all(isinstance(k, str) for k in required):
        raise SchemaError(f"{where}: 'required' must be a list of property names")
    for key, sub in props.items():
        _lint(sub, f"{where}/{key}", defs)
    extra = node.get("additionalProperties", True)
    if isinstance(extra, dict):
        _lint(extra, f"{where}/additionalProperties", defs)
    elif not isinstance(extra, bool):
        raise SchemaError(f"{where}: 'additionalProperties' must be a boolean or a schema")
    if "items" in node:
        _lint(node["items"], f"{where}/items", defs)


def _normalise(node: Any, where: str, defs: dict[str, Any], refs: tuple[str, ...]) -> None:
    _check_keywords(node, where, "is outside the portable schema subset")
    if "$ref" in node:
        if len(node) > 1 and set(node) - {"$ref", "description", "title"}:
            raise SchemaError(f"{where}: $ref cannot be combined with other keywords")
        ref = _check_ref(node["$ref"], where, defs)
        if ref in refs:
            raise SchemaError(f"{where}: recursive schemas are outside the portable subset")
        _normalise(defs[ref[8:]], ref, defs, (*refs, ref))
        return
    types = node.get("type")
    names = [types] if isinstance(types, str) else types
    if not isinstance(names, list) or not names or not all(isinstance(t, str) and t in _TYPES for t in names):
        raise SchemaError(f"{where}: 'type' must name one or more of {sorted(_TYPES)}")
    if "enum" in node:
        values = node["enum"]
        if not isinstance(values, list) or not values or any(isinstance(v, dict | list) for v in values):
            raise SchemaError(f"{where}: 'enum' must be a non-empty list of scalars")
    if "object" in names:
        props = node.setdefault("properties", {})
        if not isinstance(props, dict):
            raise SchemaError(f"{where}: 'properties' must be an object")
        if node.get("additionalProperties", False) is not False:
            raise SchemaError(f"{where}: objects may not take additional properties in the portable subset")
        node["additionalProperties"] = False
        node["required"] = list(props)
        for key, sub in props.items():
            _normalise(sub, f"{where}/{key}", defs, refs)
    if "array" in names:
        if "items" not in node:
            raise SchemaError(f"{where}: an array needs 'items'")
        _normalise(node["items"], f"{where}/items", defs, refs)


def validate(value: Any, schema: dict[str, Any]) -> list[str]:
    """Where ``value`` breaks ``schema`` (from :func:`strict_portable` or :func:`lint_unenforced`); empty if none."""
    errors: list[str] = []
    _check(value, schema, "$", schema.get("$defs", {}), errors)
    return errors[:_MAX_ERRORS]


def _type_ok(value: Any, name: str) -> bool:
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if name == "string":
        return isinstance(value, str)
    if name == "array":
        return isinstance(value, list)
    return isinstance(value, dict)


def _check(value: Any, node: dict[str, Any], path: str, defs: dict[str, Any], errors: list[str]) -> None:
    if len(errors) >= _MAX_ERRORS:
        return
    if "$ref" in node:
        _check(value, defs[node["$ref"][8:]], path, defs, errors)
        return
    declared = node.get("type")
    types = declared if isinstance(declared, list) else [declared] if declared is not None else []
    if types and not any(_type_ok(value, t) for t in types):
        errors.append(f"{path}: expected {' or '.join(types)}, got {_json_type(value)}")
        return
    if "enum" in node and value not in node["enum"]:
        errors.append(f"{path}: must be one of {node['enum']}")
        return
    if isinstance(value, dict):
        props: dict[str, Any] = node.get("properties", {})
        for key in node.get("required", []):
            if key not in value:
                errors.append(f"{path}: missing required property {key!r}")
        extra = node.get("additionalProperties", True)
        for key in value:
            if key in props:
                continue
            if extra is False:
                errors.append(f"{path}: unexpected property {key!r}")
            elif isinstance(extra, dict):
                _check(value[key], extra, f"{path}.{key}", defs, errors)
        for key, sub in props.items():
            if key in value:
                _check(value[key], sub, f"{path}.{key}", defs, errors)
    elif isinstance(value, list) and "items" in node:
        for i, item in enumerate(value):
            _check(item, node["items"], f"{path}[{i}]", defs, errors)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"

"""Request bodies: JSON bytes or multipart form fields to a validated request model, or a precise 4xx.

Both paths end in the same pydantic model and the same checks of ``context_engine.validation``,
so a name, a source id, an ACL or attributes have the same limits whichever way they arrive.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ValidationError

from context_engine.limits import MAX_JSON_DEPTH
from context_engine.validation import check_json_value
from routing_core.http import HttpError, is_json
from routing_core.schemas import LIST_BODIES, NOT_BLANK, ErrorDetail


def too_large(size: int, limit: int) -> HttpError:
    return HttpError(413, "too_large", f"the request body is {size} bytes; the limit is {limit}")


def parse_json_body(raw: bytes, content_type: str | None, model: type[BaseModel], max_bytes: int) -> BaseModel:
    """Decode, check and validate one JSON object body against ``model``.

    Only a body declared JSON (``application/json`` or ``application/*+json``) is read as JSON: a
    ``text/plain`` body, which a browser sends cross-site without a preflight, is refused.
    """
    if len(raw) > max_bytes:
        raise too_large(len(raw), max_bytes)
    if not raw.strip():
        raise HttpError(400, "invalid_request", "a JSON body is required")
    if not is_json(content_type):
        raise HttpError(415, "unsupported_media_type", "the body must be sent with Content-Type: application/json")
    try:
        data = json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise HttpError(400, "invalid_request", f"the body nests deeper than {MAX_JSON_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise HttpError(400, "invalid_json", f"the body is not valid JSON: {exc}") from None
    if isinstance(data, list) and model in LIST_BODIES:
        return parse_list(check_json_value(data, "", MAX_JSON_DEPTH), LIST_BODIES[model], model)
    if not isinstance(data, dict):
        raise HttpError(400, "invalid_request", "the body must be a JSON object")
    return validate(check_json_value(data, "", MAX_JSON_DEPTH), model)


#: ``acl`` parts a form may repeat: with the form's other fields they stay under every framework's
#: default cap on parts (1,000); a longer list travels as one part holding a JSON list
MAX_FORM_ACL_PARTS = 500

#: a boolean form field's words; anything else reaches validation as text and is refused there
_FORM_BOOLS = {"true": True, "false": False}


def parse_list(data: list[Any], list_model: type[BaseModel], model: type[BaseModel]) -> BaseModel:
    """A JSON list body: each entry validated against ``model`` on its own, an entry that does not
    validate kept as its error (``invalid_request``), so it is refused alone. An empty list, or one
    longer than the list model allows, is refused whole."""
    if not data:
        raise HttpError(400, "invalid_request", "the list of documents is empty")
    entries: list[BaseModel] = []
    for index, entry in enumerate(data):
        if not isinstance(entry, dict):
            entries.append(ErrorDetail(code="invalid_request", message=f"{index}: each entry must be a JSON object"))
            continue
        try:
            entries.append(model.model_validate(entry))
        except ValidationError as exc:
            entries.append(ErrorDetail(code="invalid_request", message=f"{index}: {describe(exc)}"))
    return validate({"documents": entries}, list_model)


def parse_form_fields(fields: list[tuple[str, str]], model: type[BaseModel]) -> BaseModel:
    """The non-file fields of a multipart form, as ``model``.

    ``acl`` may come as repeated parts, one principal each, or as one part holding a JSON list or
    comma-separated principals; ``attributes`` is JSON text; ``batch`` is ``true`` or ``false``. Any
    other repeated field: the last wins.
    """
    data: dict[str, Any] = {}
    acl = [raw for key, raw in fields if key == "acl"]
    if len(acl) > MAX_FORM_ACL_PARTS:
        raise HttpError(
            400,
            "invalid_request",
            f"acl: at most {MAX_FORM_ACL_PARTS} parts; send a longer list as one part holding a JSON list",
        )
    for key, raw in fields:
        if raw == "" or key == "acl":
            continue  # an empty field means the default, as an absent one does
        if key == "attributes":
            data[key] = _form_json(raw, key)
        else:
            data[key] = _FORM_BOOLS.get(raw, raw) if key == "batch" else raw
    if len(acl) > 1:
        data["acl"] = acl
    elif acl and acl[0] != "":
        data["acl"] = _form_json(acl[0], "acl") if acl[0].lstrip().startswith("[") else _comma_list(acl[0])
    return validate(check_json_value(data, "", MAX_JSON_DEPTH), model)


def validate(data: dict[str, Any], model: type[BaseModel]) -> BaseModel:
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
    blank = err["type"] == "string_too_short" and err.get("ctx", {}).get("min_length") == 1
    if blank or (err["type"] == "string_pattern_mismatch" and err.get("ctx", {}).get("pattern") == NOT_BLANK):
        return f"{field} must be a non-empty string"  # the engine's words for the same refusal
    return f"{field}: {err['msg']}"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _form_json(raw: str, name: str) -> Any:
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise HttpError(400, "invalid_request", f"{name}: nests deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError:
        raise HttpError(400, "invalid_request", f"{name}: must be valid JSON") from None


def _comma_list(raw: str) -> list[str]:
    return [part.strip() for part in raw.split(",") if part.strip()]

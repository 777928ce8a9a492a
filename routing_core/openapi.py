"""The OpenAPI 3.1 document, generated from the route table and the pydantic models.

``openapi/openapi.json`` is this output checked in; a test fails when the two drift.
Regenerate with ``python -m routing_core.openapi > openapi/openapi.json``.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from context_engine.limits import (
    INGEST_MANY_MAX,
    MAX_ACL_ENTRIES,
    MAX_ACL_ENTRY_CHARS,
    MAX_ATTRIBUTES_DEPTH,
    MAX_NAME_CHARS,
    MAX_SOURCE_ID_CHARS,
)
from routing_core.bodies import MAX_FORM_ACL_PARTS
from routing_core.http import JSON_TYPE
from routing_core.params import schema_of
from routing_core.routes import ROUTES, Route
from routing_core.schemas import NOT_BLANK, ErrorBody

_ERRORS = {
    "400": "Invalid request (empty query, bound out of range, bad JSON or a wrong field type; a cursor this server "
    "did not issue, `invalid_cursor`; an `as_of` past the current revision or, from a non-trusted caller, no "
    "revision handle; or given with `version`)",
    "401": "Missing or invalid credentials",
    "403": (
        "Forbidden: an ACL the caller does not hold, a document it may read but not change, "
        "or credentials without the knowledge scope"
    ),
    "404": "Not found, or not visible to the caller (the two are indistinguishable)",
    "413": "Body or file over the configured size",
    "429": "Rate limited (POST /knowledge/query); see the Retry-After header",
    "405": "Method not allowed on this path",
    "500": "Server error (including a principals resolver that returned None)",
    "502": "An outbound provider (embeddings) failed",
    "503": "The database is unavailable",
}


#: one principal in its own part: not blank (as ``NOT_BLANK``), no comma, not starting with ``[``
ACL_PART = r"^[^\s\u001c-\u001f\u0085\ufeff,\[][^,]*$"
#: the multipart form of an upload; its fields carry the limits of the JSON body's (``IngestFields``)
_FORM = {
    "type": "object",
    "required": ["file"],
    "additionalProperties": False,
    "properties": {
        "file": {"type": "string", "format": "binary"},
        "name": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS, "pattern": NOT_BLANK},
        "source_id": {"type": "string", "minLength": 1, "maxLength": MAX_SOURCE_ID_CHARS, "pattern": NOT_BLANK},
        "acl": {
            "type": "array",
            # one part per principal; a single part is read as a JSON list or as comma-separated principals
            "items": {"type": "string", "maxLength": MAX_ACL_ENTRY_CHARS, "pattern": ACL_PART},
            "maxItems": MAX_FORM_ACL_PARTS,
            "description": f"the principals: one part each (at most {MAX_FORM_ACL_PARTS} parts); a single part may "
            f"also hold a JSON list (up to {MAX_ACL_ENTRIES}) or comma-separated principals",
        },
        "attributes": {
            "type": "object",
            "description": f"a JSON object nested at most {MAX_ATTRIBUTES_DEPTH} levels deep",
        },
    },
}
#: acl and attributes travel as JSON text in their parts
_FORM_ENCODING = {"acl": {"contentType": JSON_TYPE}, "attributes": {"contentType": JSON_TYPE}}
_UNSUPPORTED = (
    "Unsupported media type: a body is read as JSON only when sent as application/json (or application/*+json)"
)
_DESCRIPTION = (
    "Permission-aware retrieval over the host's PostgreSQL. Every route but three runs the host's own "
    "authentication and resolves the caller's principals; the ACL is enforced inside each query. "
    "GET /health (liveness) and GET /ready (database and schema) are operational and unauthenticated: "
    "they answer a status and nothing else (a failed readiness check is logged, not explained). "
    "GET /tools/oauth/callback is where an OAuth provider returns the popup that connects an mcp tool; "
    "its single-use state is its credential and it answers an HTML page. "
    'Every failure is the JSON error contract {"error": {"code", "message"}}; POST /documents answers '
    "201 when it stored a document, 200 when the content was unchanged, and 422 when nothing was stored, "
    "with the error contract beside the report."
)


def build_openapi(title: str = "context-engine", version: str = "0.1.0") -> dict[str, Any]:
    schemas: dict[str, Any] = {}

    def ref(model: type[BaseModel]) -> dict[str, str]:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}", mode="serialization")
        for name, sub in schema.pop("$defs", {}).items():
            schemas[name] = sub
        schemas[model.__name__] = schema
        return {"$ref": f"#/components/schemas/{model.__name__}"}

    error_ref = ref(ErrorBody)
    paths: dict[str, Any] = {}
    for route in ROUTES:
        op: dict[str, Any] = {"summary": route.summary, "operationId": route.handler}
        params = [
            {"name": n, "in": "path", "required": True, "schema": {"type": "string"}} for n in route.pattern.groupindex
        ]
        params += [
            {"name": n, "in": "query", "required": False, "description": d, "schema": schema_of(schema)}
            for n, schema, d in route.query_params
        ]
        if params:
            op["parameters"] = params
        if route.request_model is not None:
            body_schema: dict[str, Any] = ref(route.request_model)
            if route.list_item_model is not None:  # the same body, or a list of them
                listed = {"type": "array", "items": ref(route.list_item_model), "minItems": 1}
                body_schema = {"oneOf": [body_schema, {**listed, "maxItems": INGEST_MANY_MAX}]}
            content: dict[str, Any] = {"application/json": {"schema": body_schema}}
            if route.multipart:
                content["multipart/form-data"] = {"schema": _FORM, "encoding": _FORM_ENCODING}
            op["requestBody"] = {"required": True, "content": content}
        responses: dict[str, Any] = {}
        if route.response_model is not None:
            responses[str(route.success_status)] = {
                "description": "Success",
                "content": {"application/json": {"schema": ref(route.response_model)}},
            }
        for status, description in route.html_responses:
            responses[str(status)] = {
                "description": description,
                "content": {"text/html": {"schema": {"type": "string"}}},
            }
        for status, description, model in route.responses:
            responses[str(status)] = {
                "description": description,
                "content": {"application/json": {"schema": ref(model)}},
            }
        for status, description, model in route.list_responses:  # beside the single form's answer
            if str(status) not in responses and str(status) in _ERRORS:  # the single form's error answer
                responses[str(status)] = {
                    "description": _ERRORS[str(status)],
                    "content": {"application/json": {"schema": error_ref}},
                }
            found = responses.get(str(status))
            if found is None:
                responses[str(status)] = {
                    "description": description,
                    "content": {"application/json": {"schema": ref(model)}},
                }
                continue
            single = found["content"]["application/json"]["schema"]
            found["description"] += f". {description}"
            # anyOf, not oneOf: an error envelope also validates against a report that carries an error
            shapes = single["anyOf"] if "anyOf" in single else [single]
            found["content"]["application/json"]["schema"] = {"anyOf": [*shapes, ref(model)]}
        for code, description in _ERRORS.items():
            responses.setdefault(
                code, {"description": description, "content": {"application/json": {"schema": error_ref}}}
            )
        if route.request_model is not None:
            responses["415"] = {"description": _UNSUPPORTED, "content": {"application/json": {"schema": error_ref}}}
        op["responses"] = responses
        paths.setdefault(route.path, {})[route.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version, "description": _DESCRIPTION},
        "paths": paths,
        "components": {"schemas": dict(sorted(schemas.items()))},
    }


def host_operation(spec: dict[str, Any], route: Route) -> dict[str, Any]:
    """One operation of ``spec`` for a host framework's own OpenAPI, schemas inlined.

    A FastAPI host's ``/docs`` then shows what ``openapi/openapi.json`` says, with no ``$ref``
    pointing into components the host does not have.
    """
    operation = spec["paths"][route.path][route.method.lower()]
    docs = {key: operation[key] for key in ("parameters", "requestBody", "responses") if key in operation}
    return _inline(docs, spec["components"]["schemas"])


def _inline(node: Any, schemas: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            return _inline(schemas[ref.rsplit("/", 1)[1]], schemas)
        return {key: _inline(value, schemas) for key, value in node.items()}
    if isinstance(node, list):
        return [_inline(value, schemas) for value in node]
    return node


def render() -> str:
    return json.dumps(build_openapi(), indent=2, sort_keys=False) + "\n"


if __name__ == "__main__":
    print(render(), end="")

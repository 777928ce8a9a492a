"""The checked-in OpenAPI document: current with the route table, and a valid OpenAPI 3.1 document."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from context_engine.limits import INGEST_MANY_MAX
from routing_core import ROUTES
from routing_core.openapi import build_openapi, render

CHECKED_IN = Path(__file__).resolve().parent.parent / "openapi" / "openapi.json"
REGENERATE = "python -m routing_core.openapi > openapi/openapi.json"
METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return json.loads(CHECKED_IN.read_text(encoding="utf-8"))


def test_checked_in_document_matches_the_route_table() -> None:
    assert CHECKED_IN.read_text(encoding="utf-8") == render(), (
        f"openapi/openapi.json is out of date with routing_core; regenerate it with `{REGENERATE}`"
    )


def test_every_route_is_documented(spec: dict[str, Any]) -> None:
    for route in ROUTES:
        op = spec["paths"].get(route.path, {}).get(route.method.lower())
        assert op is not None, f"{route.method} {route.path} is missing; regenerate with `{REGENERATE}`"
        assert op["operationId"] == route.handler and op["summary"] == route.summary
        assert str(route.success_status) in op["responses"]
        if route.request_model is not None:
            content = op["requestBody"]["content"]
            single = {"$ref": f"#/components/schemas/{route.request_model.__name__}"}
            if route.list_item_model is None:
                assert content["application/json"]["schema"] == single
            else:  # the single body, or a list of entries
                one, listed = content["application/json"]["schema"]["oneOf"]
                assert one == single and listed["type"] == "array" and listed["maxItems"] == INGEST_MANY_MAX
                assert listed["items"] == {"$ref": f"#/components/schemas/{route.list_item_model.__name__}"}
            assert ("multipart/form-data" in content) == route.multipart
        declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "query"}
        assert declared == {name for name, _, _ in route.query_params}
    documented = {(method.upper(), path) for path, item in spec["paths"].items() for method in item}
    assert documented == {(r.method, r.path) for r in ROUTES}, "the document lists an operation with no route"


def test_every_failure_documents_the_error_contract(spec: dict[str, Any]) -> None:
    for path, item in spec["paths"].items():
        for method, op in item.items():
            for status in ("400", "401", "404", "413", "500"):
                schema = op["responses"][status]["content"]["application/json"]["schema"]
                error_ref = {"$ref": "#/components/schemas/ErrorBody"}
                # a list body refused whole: the error contract beside its items, as a second shape
                beside = {"anyOf": [error_ref, {"$ref": "#/components/schemas/IngestListFailed"}]}
                assert schema in (error_ref, beside), (method, path, status)
    error = spec["components"]["schemas"]["ErrorBody"]
    assert error["required"] == ["error"]


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [ref for value in node.values() for ref in _refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _refs(value)]
    return []


def _validate_structure(spec: dict[str, Any]) -> None:
    """What the OpenAPI 3.1 schema requires of this document, checked by hand."""
    assert spec["openapi"].startswith("3.1."), spec["openapi"]
    assert isinstance(spec["info"]["title"], str) and isinstance(spec["info"]["version"], str)
    assert set(spec) <= {"openapi", "info", "jsonSchemaDialect", "servers", "paths", "webhooks", "components"}
    operation_ids: list[str] = []
    for path, item in spec["paths"].items():
        assert path.startswith("/"), path
        template_params = set(re.findall(r"\{(\w+)\}", path))
        assert set(item) <= METHODS, (path, set(item) - METHODS)
        for method, op in item.items():
            operation_ids.append(op["operationId"])
            params = op.get("parameters", [])
            assert len({(p["name"], p["in"]) for p in params}) == len(params), (method, path, "duplicate parameter")
            for param in params:
                assert param["in"] in {"query", "header", "path", "cookie"}, param
                assert "schema" in param or "content" in param, param
                if param["in"] == "path":
                    assert param["required"] is True, param
            assert {p["name"] for p in params if p["in"] == "path"} == template_params, (method, path)
            if "requestBody" in op:
                assert op["requestBody"]["content"], (method, path)
            assert op["responses"], (method, path)
            for status, response in op["responses"].items():
                assert re.fullmatch(r"[1-5]\d\d|[1-5]XX|default", status), status
                assert isinstance(response["description"], str), (method, path, status)
    assert len(operation_ids) == len(set(operation_ids)), "operationId values must be unique"
    schemas = spec.get("components", {}).get("schemas", {})
    for name in schemas:
        assert re.fullmatch(r"[A-Za-z0-9._-]+", name), name
    for ref in _refs(spec):
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.removeprefix("#/components/schemas/") in schemas, f"unresolved $ref {ref}"


def test_document_is_valid_openapi_3_1(spec: dict[str, Any]) -> None:
    _validate_structure(spec)
    try:
        from openapi_spec_validator import validate
    except ImportError:  # not a dependency; the structural checks above stand in for it
        return
    validate(spec)


def test_structural_checks_catch_a_broken_document() -> None:
    broken = build_openapi()
    broken["paths"]["/documents/{document_id}"]["get"]["parameters"] = []
    with pytest.raises(AssertionError):
        _validate_structure(broken)
    dangling = build_openapi()
    dangling["components"]["schemas"].pop("ErrorBody")
    with pytest.raises(AssertionError, match="unresolved"):
        _validate_structure(dangling)


def test_fastapi_host_openapi_documents_the_mounted_routes() -> None:
    """A FastAPI host's own /docs lists each route with its parameters and bodies, schemas inlined."""
    from fastapi import FastAPI

    from context_engine import ContextEngine, ContextEngineConfig, create_router

    engine = ContextEngine(ContextEngineConfig(database_url="postgresql://unused@localhost/unused"))  # never connects
    app = FastAPI()
    app.include_router(create_router(engine, auth=lambda r: True, principals=lambda r: []), prefix="/context")
    host = app.openapi()
    ours = build_openapi()
    for route in ROUTES:
        op = host["paths"][f"/context{route.path}"][route.method.lower()]
        assert op["summary"] == route.summary
        expected = ours["paths"][route.path][route.method.lower()]
        assert [p["name"] for p in op.get("parameters", [])] == [p["name"] for p in expected.get("parameters", [])]
        assert ("requestBody" in op) == (route.request_model is not None)
        assert set(op["responses"]) == set(expected["responses"])
    assert "/context/{path}" not in host["paths"], "the catch-all stays out of the host's document"
    assert not _refs(host["paths"]), "schemas are inlined, so nothing points into the host's components"

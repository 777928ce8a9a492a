"""Mount the routes in FastAPI: ``app.include_router(create_router(engine, ...), prefix="/context")``.

One endpoint per path and method of ``routing_core.ROUTES`` (so the host's OpenAPI lists them),
then a catch-all that hands every other path and method under the mount to the router, which
answers 404 and 405 in the JSON error contract. ``Router.handle`` is awaited on FastAPI's own
event loop; the engine keeps one connection pool per loop.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException

from adapters import _shared
from context_engine import ContextEngine
from routing_core.http import CoreRequest, CoreResponse, Upload
from routing_core.openapi import build_openapi
from routing_core.router import DEFAULT_MAX_JSON_BYTES, AuthCallable, PrincipalsCallable, Route


def create_router(
    engine: ContextEngine,
    *,
    auth: AuthCallable,
    principals: PrincipalsCallable,
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
    redaction: Any = None,
    redaction_secret_key: Any = None,
) -> APIRouter:
    """The routes as an ``APIRouter``; ``auth`` and ``principals`` receive the starlette ``Request``."""
    mount = _shared.Mount(
        engine,
        auth=auth,
        principals=principals,
        max_json_bytes=max_json_bytes,
        redaction=redaction,
        redaction_secret_key=redaction_secret_key,
    )
    api = APIRouter()
    spec = build_openapi()

    for route in mount.router.routes:
        api.add_api_route(
            route.path,
            _route_endpoint(mount, route.path),
            methods=[route.method],
            name=f"context_engine.{route.handler}",
            summary=route.summary,
            status_code=route.success_status,
            response_class=Response,
            openapi_extra=_operation_docs(spec, route),
        )

    async def catch_all(request: Request) -> Response:
        return await _serve(mount, request, _shared.rest_path(request.path_params["path"]))

    api.add_api_route(
        "/{path:path}",
        catch_all,
        methods=list(_shared.ALL_METHODS),
        name="context_engine.catch_all",
        include_in_schema=False,
        response_class=Response,
    )
    return api


def _operation_docs(spec: dict[str, Any], route: Route) -> dict[str, Any]:
    """The operation from ``routing_core.openapi`` for the host's own OpenAPI, schemas inlined.

    The endpoints take the raw request, so FastAPI cannot infer parameters or bodies itself; the
    host's ``/docs`` shows what ``openapi/openapi.json`` says, with no dangling ``$ref``.
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


def _route_endpoint(mount: _shared.Mount, template: str) -> Any:
    async def endpoint(request: Request) -> Response:
        return await _serve(mount, request, _shared.fill(template, request.path_params))

    return endpoint


async def _serve(mount: _shared.Mount, request: Request, path: str) -> Response:
    method = request.method
    core = CoreRequest(
        method=method,
        path=path,
        headers=_shared.headers(request.headers.items()),
        query=_shared.multi(request.query_params.multi_items()),
    )
    route = mount.match(method, path)
    if route is None:  # the router answers 404 or 405 without reading anything
        return _respond(await mount.router.handle(core))
    core.native = prepared = await mount.prepare_async(request, run_in_threadpool)
    if not prepared.admitted:
        return _respond(await mount.router.handle(core))

    content_type = request.headers.get("content-type")
    refused = mount.precheck(route, content_type, _shared.content_length(request.headers.get("content-length")))
    if refused is not None:
        return _respond(refused)
    if not mount.wants_form(route, content_type):
        if mount.wants_body(route):
            core.body = await request.body()
        return _respond(await mount.router.handle(core))

    try:
        form = await request.form()
    except (HTTPException, MultiPartException):
        return _respond(_shared.malformed_multipart())
    try:
        fields: list[tuple[str, str]] = []
        files: list[tuple[str, Upload]] = []
        for key, value in form.multi_items():
            if isinstance(value, UploadFile):
                name = _shared.upload_name(value.filename)
                if name is not None:
                    files.append((key, Upload(name, value.content_type, value.file, value.size)))
            else:
                fields.append((key, value))
        if not fields and not files:
            return _respond(_shared.malformed_multipart())
        core.form, core.files = _shared.last(fields), _shared.last(files)
        return _respond(await mount.router.handle(core))
    finally:
        await form.close()


def _respond(response: CoreResponse) -> Response:
    status, body, headers = _shared.encode(response)
    return Response(content=body, status_code=status, headers=headers, media_type=_shared.JSON_TYPE)


__all__ = ["create_router"]

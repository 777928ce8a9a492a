"""Mount the routes in FastAPI: ``app.include_router(create_router(engine, ...), prefix="/context")``.

One endpoint per route (so the host's OpenAPI lists them), then a catch-all that hands every other
path and method under the mount to ``routing_core``, which answers 404 and 405. Requests are served
by ``routing_core.lifecycle.serve_async`` on FastAPI's own event loop.
"""

from __future__ import annotations

from typing import Any, Unpack

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException

from context_engine import ContextEngine
from routing_core import http
from routing_core.lifecycle import AsyncRequest, Form, serve_async
from routing_core.openapi import build_openapi, host_operation
from routing_core.router import AuthCallable, MountOptions, PrincipalsCallable, Router


class _Request(AsyncRequest):
    def __init__(self, request: Request, path: str):
        query = http.multi(request.query_params.multi_items())
        super().__init__(request, request.method, path, http.header_map(request.headers.items()), query)
        self.form: FormData | None = None

    async def read_body(self) -> bytes:
        return await self.native.body()

    async def read_form(self) -> Form:
        try:
            self.form = await self.native.form()
        except (HTTPException, MultiPartException) as exc:  # starlette wraps its parser's refusal in a 400
            detail = str(getattr(exc, "detail", None) or getattr(exc, "message", None) or exc)
            too_many = detail.startswith("Too many")  # its caps on fields and files (1,000 each)
            raise (http.too_many_parts() if too_many else http.malformed_multipart()) from None
        fields, files = [], []
        for key, value in self.form.multi_items():
            if not isinstance(value, UploadFile):
                fields.append((key, value))
            elif (name := http.upload_name(value.filename)) is not None:
                files.append((key, http.Upload(name, value.content_type, value.file, value.size)))
        return fields, files

    async def run_sync(self, fn: Any, arg: Any) -> Any:
        return await run_in_threadpool(fn, arg)

    async def close(self) -> None:
        if self.form is not None:
            await self.form.close()


def create_router(
    engine: ContextEngine, *, auth: AuthCallable, principals: PrincipalsCallable, **options: Unpack[MountOptions]
) -> APIRouter:
    """The routes as an ``APIRouter``; ``auth`` and ``principals`` receive the starlette ``Request``."""
    router = Router(engine, auth=auth, principals=principals, **options)
    api, spec = APIRouter(), build_openapi()
    for route in router.routes:
        api.add_api_route(
            route.path,
            _endpoint(router, route.path),
            methods=[route.method],
            name=f"context_engine.{route.handler}",
            summary=route.summary,
            status_code=route.success_status,
            response_class=Response,
            openapi_extra=host_operation(spec, route),
        )
    catch_all = _endpoint(router, "/{path}")
    api.add_api_route(
        "/{path:path}",
        catch_all,
        methods=list(http.ALL_METHODS),
        name="context_engine.catch_all",
        include_in_schema=False,
    )
    return api


def _endpoint(router: Router, template: str) -> Any:
    async def endpoint(request: Request) -> Response:
        response = await serve_async(router, _Request(request, template.format_map(request.path_params)))
        status, body, headers = http.encode(response)
        media = http.content_type(headers)
        return Response(content=body, status_code=status, headers=headers, media_type=media)

    return endpoint


__all__ = ["create_router"]

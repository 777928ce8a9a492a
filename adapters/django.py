"""Mount the routes in Django: ``path("context/", include(create_django_urlpatterns(engine, ...)))``.

Plain sync, CSRF-exempt views (the routes are an API authenticated by the host's ``auth``, not
by a session cookie). Each runs ``Router.handle`` on the one shared background loop of
``routing_core.sync_bridge``; the host's ``auth`` and ``principals`` run first in the request
thread, where the ORM may be used. Django URL patterns do not dispatch by method, so every
method reaches the router, which answers 404 and 405 in the JSON error contract. Nothing needs
configuring beyond a minimal settings module: JSON bodies are capped by ``max_json_bytes``
rather than ``DATA_UPLOAD_MAX_MEMORY_SIZE``, uploads by ``ingest.max_file_bytes``.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import HttpRequest, HttpResponse, UnreadablePostError
from django.http.multipartparser import MultiPartParserError
from django.urls import URLPattern, path, re_path
from django.views.decorators.csrf import csrf_exempt

from adapters import _shared
from context_engine import ContextEngine
from routing_core import sync_bridge
from routing_core.http import CoreRequest, CoreResponse, Upload
from routing_core.router import DEFAULT_MAX_JSON_BYTES, AuthCallable, PrincipalsCallable


def create_django_urlpatterns(
    engine: ContextEngine,
    *,
    auth: AuthCallable,
    principals: PrincipalsCallable,
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
    redaction: Any = None,
    redaction_secret_key: Any = None,
    name: str = "context_engine",
) -> list[URLPattern]:
    """URL patterns for ``include()``; ``auth`` and ``principals`` receive Django's ``HttpRequest``."""
    mount = _shared.Mount(
        engine,
        auth=auth,
        principals=principals,
        max_json_bytes=max_json_bytes,
        redaction=redaction,
        redaction_secret_key=redaction_secret_key,
    )
    patterns: list[URLPattern] = []
    for template, _methods in mount.templates():
        route = template.lstrip("/").replace("{", "<str:").replace("}", ">")
        suffix = template.strip("/").replace("/", "_").replace("{", "").replace("}", "")
        patterns.append(path(route, _route_view(mount, template), name=f"{name}_{suffix}"))

    @csrf_exempt
    def catch_all(request: HttpRequest, rest: str) -> HttpResponse:
        return _serve(mount, request, _shared.rest_path(rest))

    patterns.append(re_path(r"^(?P<rest>.*)\Z", catch_all, name=f"{name}_catch_all"))
    return patterns


def _route_view(mount: _shared.Mount, template: str) -> Any:
    @csrf_exempt
    def view(request: HttpRequest, **params: str) -> HttpResponse:
        return _serve(mount, request, _shared.fill(template, params))

    return view


def _serve(mount: _shared.Mount, request: HttpRequest, path: str) -> HttpResponse:
    method = request.method or "GET"
    core = CoreRequest(
        method=method,
        path=path,
        headers=_shared.headers(request.headers.items()),
        query={key: list(values) for key, values in request.GET.lists()},
    )
    route = mount.match(method, path)
    if route is None:
        return _respond(sync_bridge.run(mount.router.handle(core)))
    core.native = prepared = mount.prepare_sync(request)
    if not prepared.admitted:
        return _respond(sync_bridge.run(mount.router.handle(core)))

    content_type = request.META.get("CONTENT_TYPE")
    refused = mount.precheck(route, content_type, _shared.content_length(request.META.get("CONTENT_LENGTH")))
    if refused is not None:
        return _respond(refused)
    try:
        if mount.wants_form(route, content_type):
            try:
                form, files = request.POST, request.FILES
            except RequestDataTooBig:  # DATA_UPLOAD_MAX_MEMORY_SIZE, over the form's non-file fields
                return _respond(_shared.framework_too_large())
            except (MultiPartParserError, SuspiciousOperation):
                return _respond(_shared.malformed_multipart())
            fields = [(key, value) for key, values in form.lists() for value in values]
            uploads = [
                (key, Upload(filename, upload.content_type, upload.file, upload.size))
                for key, values in files.lists()
                for upload in values
                if (filename := _shared.upload_name(upload.name)) is not None
            ]
            if not fields and not uploads:
                return _respond(_shared.malformed_multipart())
            core.form, core.files = _shared.last(fields), _shared.last(uploads)
        elif mount.wants_body(route):
            core.body = _read_body(request)
    except UnreadablePostError:
        return _respond(_shared.unreadable_body())
    return _respond(sync_bridge.run(mount.router.handle(core)))


def _read_body(request: HttpRequest) -> bytes:
    """``request.body`` (kept for the host's middleware), past Django's default 2.5 MB cap.

    The length was already checked against ``max_json_bytes``; Django's own
    ``DATA_UPLOAD_MAX_MEMORY_SIZE`` would otherwise refuse a JSON body the other mounts accept.
    """
    try:
        return request.body
    except RequestDataTooBig:
        return request.read()


def _respond(response: CoreResponse) -> HttpResponse:
    status, body, headers = _shared.encode(response)
    out = HttpResponse(body, status=status, content_type=_shared.JSON_TYPE)
    for key, value in headers.items():
        out[key] = value
    return out


__all__ = ["create_django_urlpatterns"]

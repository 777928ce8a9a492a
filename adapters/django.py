"""Mount the routes in Django: ``path("context/", include(create_django_urlpatterns(engine, ...)))``.

One CSRF-exempt catch-all view (the routes are an API authenticated by the host's ``auth``, not by
a session cookie) hands every path and method under the mount to ``routing_core``, which matches
the route and answers 404 and 405 itself. Requests are served by
``routing_core.lifecycle.serve_sync`` in Django's request thread, where the host's callables may use
the ORM; the engine runs on the shared loop of ``routing_core.sync_bridge``. JSON bodies are capped
by ``max_json_bytes`` rather than ``DATA_UPLOAD_MAX_MEMORY_SIZE``, uploads by ``ingest.max_file_bytes``.
"""

from __future__ import annotations

from typing import Unpack

from django.core.exceptions import RequestDataTooBig, SuspiciousOperation, TooManyFieldsSent, TooManyFilesSent
from django.http import HttpRequest, HttpResponse, UnreadablePostError
from django.http.multipartparser import MultiPartParserError
from django.urls import URLPattern, re_path
from django.views.decorators.csrf import csrf_exempt

from context_engine import ContextEngine
from routing_core import http
from routing_core.lifecycle import Form, SyncRequest, serve_sync
from routing_core.router import AuthCallable, MountOptions, PrincipalsCallable, Router


class _Request(SyncRequest):
    def read_body(self) -> bytes:
        """``request.body`` (kept for the host's middleware), past Django's default 2.5 MB cap.

        The declared length was already checked against ``max_json_bytes``.
        """
        try:
            return self.native.body
        except RequestDataTooBig:
            return self.native.read()
        except UnreadablePostError:
            raise http.unreadable_body() from None

    def read_form(self) -> Form:
        try:
            form, files = self.native.POST, self.native.FILES
        except RequestDataTooBig:  # DATA_UPLOAD_MAX_MEMORY_SIZE, over the form's non-file fields
            raise http.framework_too_large() from None
        except (TooManyFieldsSent, TooManyFilesSent):  # DATA_UPLOAD_MAX_NUMBER_FIELDS / _FILES
            raise http.too_many_parts() from None
        except (MultiPartParserError, SuspiciousOperation):
            raise http.malformed_multipart() from None
        except UnreadablePostError:
            raise http.unreadable_body() from None
        fields = [(key, value) for key, values in form.lists() for value in values]
        uploads = [
            (key, http.Upload(name, upload.content_type, upload.file, upload.size))
            for key, values in files.lists()
            for upload in values
            if (name := http.upload_name(upload.name)) is not None
        ]
        return fields, uploads


def create_django_urlpatterns(
    engine: ContextEngine,
    *,
    auth: AuthCallable,
    principals: PrincipalsCallable,
    name: str = "context_engine",
    **options: Unpack[MountOptions],
) -> list[URLPattern]:
    """URL patterns for ``include()``; ``auth`` and ``principals`` receive Django's ``HttpRequest``."""
    router = Router(engine, auth=auth, principals=principals, **options)

    @csrf_exempt
    def view(native: HttpRequest, rest: str) -> HttpResponse:
        query = {key: list(values) for key, values in native.GET.lists()}
        request = _Request(native, native.method or "GET", "/" + rest, http.header_map(native.headers.items()), query)
        status, body, headers = http.encode(serve_sync(router, request))
        response = HttpResponse(body, status=status, content_type=http.content_type(headers))
        for key, value in headers.items():
            response[key] = value
        return response

    return [re_path(r"^(?P<rest>[\s\S]*)\Z", view, name=f"{name}_catch_all")]


__all__ = ["create_django_urlpatterns"]

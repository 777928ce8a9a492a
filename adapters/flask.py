"""Mount the routes in Flask: ``app.register_blueprint(create_flask_blueprint(engine, ...), url_prefix="/context")``.

One catch-all view hands every path and method under the mount to ``routing_core``, which matches
the route (answering 404 and 405 itself). Requests are served by
``routing_core.lifecycle.serve_sync`` in Flask's request thread; the engine runs on the one shared
loop of ``routing_core.sync_bridge`` (a loop per request would mean connections per request).
"""

from __future__ import annotations

from typing import IO, Any, Unpack

import flask
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge
from werkzeug.formparser import FormDataParser
from werkzeug.routing import PathConverter

from context_engine import ContextEngine
from routing_core import http
from routing_core.lifecycle import Form, SyncRequest, serve_sync
from routing_core.router import AuthCallable, MountOptions, PrincipalsCallable, Router

#: URL converter registered on the host app: like ``path`` but also matching ``//`` and a leading ``/``
_REST_CONVERTER = "context_engine_rest"


class _RestConverter(PathConverter):
    regex = r"[\s\S]*?"  # any character, a newline too
    part_isolating = False  # werkzeug would infer True from a regex without "/"


class _TooManyParts(ValueError):
    pass


class _PartCounter:
    """A form body's stream that counts multipart delimiters as they are read.

    Werkzeug refuses too many parts with the same 413 as too many bytes; counting here tells the
    two apart, so a form with too many parts answers as on the other adapters.
    """

    def __init__(self, stream: IO[bytes], boundary: bytes, cap: int):
        self.stream, self.delimiter, self.cap = stream, b"--" + boundary, cap
        self.seen, self.tail = 0, b""

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        window = self.tail + data
        self.seen += window.count(self.delimiter) - self.tail.count(self.delimiter)
        self.tail = window[-(len(self.delimiter) - 1) :] if len(self.delimiter) > 1 else b""
        if self.seen - 1 > self.cap:  # the last delimiter closes the body
            raise _TooManyParts()
        return data


class _StrictFormDataParser(FormDataParser):
    """Werkzeug's parser, but a body that does not parse raises instead of reading as empty, and
    too many parts raise :class:`_TooManyParts` (the request's ``max_form_parts``)."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs["silent"] = False
        self.part_cap: int | None = kwargs.get("max_form_parts")
        kwargs["max_form_parts"] = None  # counted by _PartCounter instead
        super().__init__(*args, **kwargs)

    def _parse_multipart(
        self, stream: IO[bytes], mimetype: str, content_length: int | None, options: dict[str, str]
    ) -> Any:
        boundary = options.get("boundary", "").encode("ascii", "replace")
        if self.part_cap is None or not boundary:
            return super()._parse_multipart(stream, mimetype, content_length, options)
        counted: Any = _PartCounter(stream, boundary, self.part_cap)
        _, form, files = super()._parse_multipart(counted, mimetype, content_length, options)
        return stream, form, files


class _Request(SyncRequest):
    def read_body(self) -> bytes:
        return _reading(lambda: self.native.get_data(cache=True))

    def read_form(self) -> Form:
        self.native.form_data_parser_class = _StrictFormDataParser
        form, files = _reading(lambda: (self.native.form, self.native.files))
        uploads = [
            (key, http.Upload(name, storage.content_type, storage.stream))
            for key, storage in files.items(multi=True)
            if (name := http.upload_name(storage.filename)) is not None
        ]
        return list(form.items(multi=True)), uploads


def _reading(read: Any) -> Any:
    """Werkzeug's refusals while reading a body, as the error contract."""
    try:
        return read()
    except _TooManyParts:
        raise http.too_many_parts() from None
    except ValueError:  # the strict form parser
        raise http.malformed_multipart() from None
    except RequestEntityTooLarge:  # the host's MAX_CONTENT_LENGTH or MAX_FORM_MEMORY_SIZE
        raise http.framework_too_large() from None
    except HTTPException:
        raise http.unreadable_body() from None


def create_flask_blueprint(
    engine: ContextEngine,
    *,
    auth: AuthCallable,
    principals: PrincipalsCallable,
    name: str = "context_engine",
    **options: Unpack[MountOptions],
) -> flask.Blueprint:
    """The routes as a ``Blueprint``; ``auth`` and ``principals`` receive Flask's request object."""
    router = Router(engine, auth=auth, principals=principals, **options)

    def view(path: str) -> flask.Response:
        native = flask.request._get_current_object()  # type: ignore[attr-defined]
        query = http.multi(native.args.items(multi=True))
        request = _Request(native, native.method, "/" + path, http.header_map(native.headers.items()), query)
        status, body, headers = http.encode(serve_sync(router, request))
        media = http.content_type(headers)
        return flask.Response(body, status=status, headers=headers, content_type=media)

    bp = flask.Blueprint(name, __name__)
    def register_converter(state: flask.blueprints.BlueprintSetupState) -> None:
        state.app.url_map.converters.setdefault(_REST_CONVERTER, _RestConverter)

    bp.record_once(register_converter)
    # no automatic OPTIONS and no slash redirects: every request under the mount reaches the view
    bp.add_url_rule(
        f"/<{_REST_CONVERTER}:path>",
        endpoint="catch_all",
        view_func=view,
        methods=http.ALL_METHODS,
        provide_automatic_options=False,
        merge_slashes=False,
    )
    return bp


__all__ = ["create_flask_blueprint"]

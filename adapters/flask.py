"""Mount the routes in Flask: ``app.register_blueprint(create_flask_blueprint(engine, ...), url_prefix="/context")``.

Plain sync views: each runs ``Router.handle`` on the one shared background loop of
``routing_core.sync_bridge`` (the engine's pool belongs to a loop, so a loop per request would
mean connections per request). One URL rule per path of ``routing_core.ROUTES``, then a
catch-all, so 404 and 405 under the mount come from the router in the JSON error contract.
"""

from __future__ import annotations

from typing import Any

import flask
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge
from werkzeug.formparser import FormDataParser
from werkzeug.routing import PathConverter

from adapters import _shared
from context_engine import ContextEngine
from routing_core import sync_bridge
from routing_core.http import CoreRequest, CoreResponse, Upload
from routing_core.router import DEFAULT_MAX_JSON_BYTES, AuthCallable, PrincipalsCallable

#: URL converter registered on the host app: like ``path`` but also matching ``//`` and a leading ``/``
_REST_CONVERTER = "context_engine_rest"


class _RestConverter(PathConverter):
    regex = ".*?"
    part_isolating = False  # werkzeug would infer True from a regex without "/"


class _StrictFormDataParser(FormDataParser):
    """Werkzeug's parser, but a body that does not parse raises instead of reading as empty."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs["silent"] = False
        super().__init__(*args, **kwargs)


def create_flask_blueprint(
    engine: ContextEngine,
    *,
    auth: AuthCallable,
    principals: PrincipalsCallable,
    name: str = "context_engine",
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
    redaction: Any = None,
    redaction_secret_key: Any = None,
) -> flask.Blueprint:
    """The routes as a ``Blueprint``; ``auth`` and ``principals`` receive Flask's request object."""
    mount = _shared.Mount(
        engine,
        auth=auth,
        principals=principals,
        max_json_bytes=max_json_bytes,
        redaction=redaction,
        redaction_secret_key=redaction_secret_key,
    )
    bp = flask.Blueprint(name, __name__)
    bp.record_once(lambda state: state.app.url_map.converters.setdefault(_REST_CONVERTER, _RestConverter))
    # no automatic OPTIONS and no slash redirects: every request under the mount reaches a view
    rule_options: dict[str, Any] = {"provide_automatic_options": False, "merge_slashes": False}

    for template, methods in mount.templates():
        endpoint = template.strip("/").replace("/", "_").replace("{", "").replace("}", "")
        bp.add_url_rule(
            template.replace("{", "<").replace("}", ">"),
            endpoint=endpoint,
            view_func=_route_view(mount, template),
            methods=methods,
            **rule_options,
        )

    def catch_all(path: str) -> flask.Response:
        return _serve(mount, _shared.rest_path(path))

    bp.add_url_rule(
        f"/<{_REST_CONVERTER}:path>",
        endpoint="catch_all",
        view_func=catch_all,
        methods=_shared.ALL_METHODS,
        **rule_options,
    )
    return bp


def _route_view(mount: _shared.Mount, template: str) -> Any:
    def view(**params: str) -> flask.Response:
        return _serve(mount, _shared.fill(template, params))

    return view


def _serve(mount: _shared.Mount, path: str) -> flask.Response:
    request = flask.request._get_current_object()  # type: ignore[attr-defined]
    method = request.method
    core = CoreRequest(
        method=method,
        path=path,
        headers=_shared.headers(request.headers.items()),
        query=_shared.multi(request.args.items(multi=True)),
    )
    route = mount.match(method, path)
    if route is None:
        return _respond(sync_bridge.run(mount.router.handle(core)))
    core.native = prepared = mount.prepare_sync(request)
    if not prepared.admitted:
        return _respond(sync_bridge.run(mount.router.handle(core)))

    refused = mount.precheck(route, request.content_type, request.content_length)
    if refused is not None:
        return _respond(refused)
    try:
        if mount.wants_form(route, request.content_type):
            request.form_data_parser_class = _StrictFormDataParser
            try:
                form, files = request.form, request.files
            except ValueError:
                return _respond(_shared.malformed_multipart())
            uploads: list[tuple[str, Upload]] = []
            for key, storage in files.items(multi=True):
                filename = _shared.upload_name(storage.filename)
                if filename is not None:
                    uploads.append((key, Upload(filename, storage.content_type, storage.stream)))
            fields = list(form.items(multi=True))
            if not fields and not uploads:
                return _respond(_shared.malformed_multipart())
            core.form, core.files = _shared.last(fields), _shared.last(uploads)
        elif mount.wants_body(route):
            core.body = request.get_data(cache=True)
    except RequestEntityTooLarge:  # the host's MAX_CONTENT_LENGTH or MAX_FORM_MEMORY_SIZE
        return _respond(_shared.framework_too_large())
    except HTTPException:  # any other refusal werkzeug raises while reading the body
        return _respond(_shared.unreadable_body())
    return _respond(sync_bridge.run(mount.router.handle(core)))


def _respond(response: CoreResponse) -> flask.Response:
    status, body, headers = _shared.encode(response)
    return flask.Response(body, status=status, headers=headers, mimetype=_shared.JSON_TYPE)


__all__ = ["create_flask_blueprint"]

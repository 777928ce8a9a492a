"""Thin mounts of the routes in FastAPI, Flask and Django; all behaviour lives in ``routing_core``.

Each adapter only translates: it subclasses ``routing_core.lifecycle.SyncRequest`` or
``AsyncRequest`` with its framework's way of reading headers, the body and a multipart form (and
its refusals), and writes the encoded ``CoreResponse`` back. The sequence of a request (match,
auth, caps, body, dispatch, errors, JSON encoding) is ``routing_core.lifecycle``'s alone, so the
three mounts answer byte-for-byte alike.

- ``adapters.fastapi.create_router`` -> ``APIRouter``; ``app.include_router(router, prefix="/context")``
- ``adapters.flask.create_flask_blueprint`` -> ``Blueprint``; ``app.register_blueprint(bp, url_prefix="/context")``
- ``adapters.django.create_django_urlpatterns`` -> URL patterns;
  ``path("context/", include(create_django_urlpatterns(...)))``

Each is also importable from ``context_engine`` itself (resolved lazily, so importing the engine
imports no web framework). Importing one adapter imports only its own framework.
"""

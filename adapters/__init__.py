"""Thin mounts of the routes in FastAPI, Flask and Django; all behaviour lives in ``routing_core``.

Each adapter only translates: its framework's request into a ``routing_core.CoreRequest`` and the
``CoreResponse`` back. ``adapters._shared`` pins the few translation choices a framework would
otherwise make its own way (URL matching, when a body is read, body caps, malformed multipart, the
thread the host's callables run in, JSON encoding), so the three mounts answer byte-for-byte alike.

- ``adapters.fastapi.create_router`` -> ``APIRouter``; ``app.include_router(router, prefix="/context")``
- ``adapters.flask.create_flask_blueprint`` -> ``Blueprint``; ``app.register_blueprint(bp, url_prefix="/context")``
- ``adapters.django.create_django_urlpatterns`` -> URL patterns;
  ``path("context/", include(create_django_urlpatterns(...)))``

Each is also importable from ``context_engine`` itself (resolved lazily, so importing the engine
imports no web framework). Importing one adapter imports only its own framework.
"""

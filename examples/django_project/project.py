"""A whole Django project in one file: settings, URLs and the WSGI application.

Run it from this directory (the engine starts an embedded PostgreSQL on first use;
``CE_DATABASE_URL`` points it at your own server instead)::

    CONTEXT_API_TOKEN=change-me python manage.py runserver 8000

    curl -s localhost:8000/context/search -H 'Authorization: Bearer change-me' \\
         -H 'X-Principals: group:hr' -H 'Content-Type: application/json' -d '{"query": "holidays"}'

or serve ``project:application`` with any WSGI server.
"""

from __future__ import annotations

import atexit
import hmac
import os

import django
from django.conf import settings

#: the project's settings; nothing here is specific to context-engine
SETTINGS = {
    "DEBUG": os.environ.get("DJANGO_DEBUG") == "1",
    "SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY", "example-only-replace-me"),
    "ALLOWED_HOSTS": ["localhost", "127.0.0.1", "[::1]", "testserver"],
    "ROOT_URLCONF": __name__,
    "INSTALLED_APPS": [],
    "MIDDLEWARE": [
        "django.middleware.common.CommonMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",  # the routes are CSRF-exempt API views
    ],
    "USE_TZ": True,
}

if not settings.configured:
    settings.configure(**SETTINGS)
    django.setup()

from django.core.wsgi import get_wsgi_application  # noqa: E402 - needs the settings above
from django.http import HttpRequest  # noqa: E402
from django.urls import include, path  # noqa: E402

from context_engine import ContextEngine, ContextEngineConfig, create_django_urlpatterns  # noqa: E402
from routing_core import sync_bridge  # noqa: E402

engine = ContextEngine(ContextEngineConfig.from_env())


# --- The host's side. REPLACE both callables with your own authentication and authorisation. ---
def auth(request: HttpRequest) -> bool:
    """Example only: one shared bearer token from ``CONTEXT_API_TOKEN``; unset refuses everyone.

    It runs in the request thread, so ``request.user`` and the ORM may be used here.
    """
    token = os.environ.get("CONTEXT_API_TOKEN", "")
    given = request.headers.get("Authorization", "")
    return bool(token) and hmac.compare_digest(given.encode(), f"Bearer {token}".encode())


def principals(request: HttpRequest) -> list[str]:
    """Example only: groups from an ``X-Principals`` header.

    Any client can send any header, so a real host derives the principals from the user it has
    authenticated (e.g. ``[f"group:{g.name}" for g in request.user.groups.all()]``).
    """
    raw = request.headers.get("X-Principals", "")
    return [p.strip() for p in raw.split(",") if p.strip()]


urlpatterns = [
    path("context/", include(create_django_urlpatterns(engine, auth=auth, principals=principals))),
]

application = get_wsgi_application()


def close_engine() -> None:
    """The engine runs on the adapters' shared loop; close it there when the process exits."""
    sync_bridge.run(engine.aclose())


atexit.register(close_engine)

"""A Flask app serving the routes under ``/context``.

Run it (the engine starts an embedded PostgreSQL on first use; ``CE_DATABASE_URL`` points it at
your own server instead)::

    CONTEXT_API_TOKEN=change-me python examples/flask_app.py

    curl -s localhost:8000/context/search -H 'Authorization: Bearer change-me' \\
         -H 'X-Principals: group:hr' -H 'Content-Type: application/json' -d '{"query": "holidays"}'

It listens on port 8000 (``PORT`` picks another). Ctrl-C or a plain ``kill`` stops it cleanly: the
exit hook below closes the engine and so stops the embedded PostgreSQL (unless another process uses it).
"""

from __future__ import annotations

import atexit
import hmac
import os

import flask

from context_engine import ContextEngine, ContextEngineConfig, create_flask_blueprint
from routing_core import sync_bridge

engine = ContextEngine(ContextEngineConfig.from_env())


# --- The host's side. REPLACE both callables with your own authentication and authorisation. ---
def auth(request: flask.Request) -> bool:
    """Example only: one shared bearer token from ``CONTEXT_API_TOKEN``; unset refuses everyone."""
    token = os.environ.get("CONTEXT_API_TOKEN", "")
    given = request.headers.get("Authorization", "")
    return bool(token) and hmac.compare_digest(given.encode(), f"Bearer {token}".encode())


def principals(request: flask.Request) -> list[str]:
    """Example only: groups from an ``X-Principals`` header.

    Any client can send any header, so a real host derives the principals from the user it has
    authenticated (their groups, tenant, roles), never from what the client claims.
    """
    raw = request.headers.get("X-Principals", "")
    return [p.strip() for p in raw.split(",") if p.strip()]


app = flask.Flask(__name__)
app.register_blueprint(create_flask_blueprint(engine, auth=auth, principals=principals), url_prefix="/context")


def close_engine() -> None:
    """Flask has no shutdown hook; the engine runs on the adapters' shared loop, so close it there."""
    sync_bridge.run(engine.aclose())


atexit.register(close_engine)


if __name__ == "__main__":
    import signal

    # a plain ``kill`` stops the dev server the way Ctrl-C does, so the exit hook above still runs
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    app.run(host="127.0.0.1", port=int(os.environ.get("PORT", "8000")))

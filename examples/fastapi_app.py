"""A FastAPI app serving the routes under ``/context``.

Run it (the engine starts an embedded PostgreSQL on first use; ``CE_DATABASE_URL`` points it at
your own server instead)::

    CONTEXT_API_TOKEN=change-me python examples/fastapi_app.py

    curl -s localhost:8000/context/search -H 'Authorization: Bearer change-me' \\
         -H 'X-Principals: group:hr' -H 'Content-Type: application/json' -d '{"query": "holidays"}'

It listens on port 8000 (``PORT`` picks another). Ctrl-C or a plain ``kill`` stops it cleanly: the
lifespan below closes the engine and so stops the embedded PostgreSQL (unless another process uses it).
"""

from __future__ import annotations

import hmac
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request

from context_engine import ContextEngine, ContextEngineConfig, create_router

engine = ContextEngine(ContextEngineConfig.from_env())


# --- The host's side. REPLACE both callables with your own authentication and authorisation. ---
def auth(request: Request) -> bool:
    """Example only: one shared bearer token from ``CONTEXT_API_TOKEN``; unset refuses everyone."""
    token = os.environ.get("CONTEXT_API_TOKEN", "")
    given = request.headers.get("Authorization", "")
    return bool(token) and hmac.compare_digest(given.encode(), f"Bearer {token}".encode())


def principals(request: Request) -> list[str]:
    """Example only: groups from an ``X-Principals`` header.

    Any client can send any header, so a real host derives the principals from the user it has
    authenticated (their groups, tenant, roles), never from what the client claims.
    """
    raw = request.headers.get("X-Principals", "")
    return [p.strip() for p in raw.split(",") if p.strip()]


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield
    await engine.aclose()  # closes the pool on this loop and the embedded server handle


def _app(**settings: object) -> FastAPI:
    """FastAPI with ``/docs`` and ``/redoc`` served from local files (the ``docs`` extra), never a CDN.

    Without the extra, the interactive pages are off and ``/openapi.json`` still describes the routes.
    """
    try:
        from fastapi_offline import FastAPIOffline
    except ImportError:
        return FastAPI(docs_url=None, redoc_url=None, **settings)  # type: ignore[arg-type]
    # no validator badge: it would send the schema to an outside service
    return FastAPIOffline(swagger_ui_parameters={"validatorUrl": None}, **settings)


app = _app(title="context-engine example", lifespan=lifespan)
app.include_router(create_router(engine, auth=auth, principals=principals), prefix="/context")


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8000")))  # stops cleanly on SIGTERM too

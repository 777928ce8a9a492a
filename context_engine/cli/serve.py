"""``context-engine serve``: the REST routes on uvicorn (FastAPI), one engine for the process.

The one command that imports a web framework and an adapter: the library below it has none.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator
from typing import Any

from context_engine.cli.settings import config_for
from context_engine.config import ContextEngineConfig


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("serve", help="serve the REST routes with uvicorn (FastAPI)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--database-url", help="PostgreSQL URL; omit for the embedded server")
    parser.add_argument(
        "--trusted",
        action="store_true",
        help="treat every caller as TRUSTED (skips ACLs; for local experiments only)",
    )
    parser.add_argument(
        "--shutdown-seconds",
        type=float,
        default=5.0,
        help="on SIGTERM/Ctrl-C, how long requests still running may finish before they are cancelled "
        "(an ingest cut short stays resumable; default 5)",
    )
    return parser


def build_app(config: ContextEngineConfig, *, trusted: bool = False) -> Any:
    """The FastAPI app ``serve`` runs: the routes at the root, one engine for the process."""
    from contextlib import asynccontextmanager

    from fastapi import FastAPI

    from adapters.fastapi import create_router
    from context_engine.engine import ContextEngine
    from context_engine.principals import TRUSTED

    engine = ContextEngine(config)

    def allow_all(request: Any) -> bool:
        return True  # the dev server has no authentication: bind it to localhost

    def header_principals(request: Any) -> Any:
        if trusted:
            return TRUSTED
        raw = request.headers.get("x-principals", "")
        return [p.strip() for p in raw.split(",") if p.strip()]

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await engine.aclose()

    app = _app_with_local_docs(title="context-engine", lifespan=lifespan)
    app.include_router(create_router(engine, auth=allow_all, principals=header_principals))
    app.state.engine = engine
    return app


DOCS_MISSING = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>context-engine: no interactive docs</title></head>
<body><p>The interactive API docs are not installed. They are served from local files, never a CDN:
<code>pip install "pg-context-engine[docs]"</code> and restart the server.</p>
<p>The OpenAPI schema is at <a href="openapi.json">openapi.json</a>.</p></body></html>
"""


def _app_with_local_docs(**settings: Any) -> Any:
    """A FastAPI app whose ``/docs`` and ``/redoc`` load Swagger UI and ReDoc from this server.

    FastAPI's own pages fetch their scripts from a CDN and show nothing offline; the assets come
    from the ``docs`` extra instead, and without it those pages say how to get them.
    """
    from fastapi import FastAPI
    from fastapi.responses import HTMLResponse

    try:
        from fastapi_offline import FastAPIOffline
    except ImportError:
        app = FastAPI(docs_url=None, redoc_url=None, **settings)

        @app.get("/docs", include_in_schema=False)
        @app.get("/redoc", include_in_schema=False)
        async def docs_missing() -> HTMLResponse:
            return HTMLResponse(DOCS_MISSING, status_code=404)

        return app
    # no validator badge: it would send the schema to an outside service
    return FastAPIOffline(swagger_ui_parameters={"validatorUrl": None}, **settings)


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn
    except ImportError:
        print('error: serving needs the fastapi extra: pip install "pg-context-engine[fastapi]"', file=sys.stderr)
        return 1
    config = config_for(args.database_url)
    app = build_app(config, trusted=args.trusted)
    where = "the embedded PostgreSQL server" if config.database_url is None else "the configured database"
    if args.trusted:
        who = "every caller is TRUSTED (no ACL filtering). Drop --trusted to filter by the X-Principals header."
    else:
        who = (
            "principals come from the X-Principals request header (comma-separated, e.g. "
            "'X-Principals: group:hr'); without it a caller is anonymous and sees only documents with no ACL. "
            "Use --trusted to skip ACLs, or mount the routes in your own app with your own auth and principals."
        )
    print(f"context-engine serving on http://{args.host}:{args.port} using {where}.", file=sys.stderr)
    print(f"Principals: {who}", file=sys.stderr)
    print("No authentication is applied by this dev server; keep it on localhost.", file=sys.stderr)
    if threading.current_thread() is threading.main_thread():
        # uvicorn shuts down gracefully on SIGTERM and SIGINT only; a closed terminal (SIGHUP) would
        # end the process on the spot, leaving the embedded server running, so it becomes a SIGTERM
        signal.signal(signal.SIGHUP, lambda signum, frame: signal.raise_signal(signal.SIGTERM))
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level=os.environ.get("CE_LOG_LEVEL", "info"),
        # a long ingest must not keep a stopping server up: past this it is cancelled (resumable)
        timeout_graceful_shutdown=args.shutdown_seconds,
    )
    return 0

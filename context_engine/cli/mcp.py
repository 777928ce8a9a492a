"""``context-engine mcp``: serve one database's knowledge tool over MCP streamable HTTP.

Every caller is anonymous (sees only documents with an empty ACL) and the ceiling is UNSCOPED (every
source); both are said on start. A host that needs real callers mounts ``create_mcp_app`` itself.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from context_engine.cli.settings import config_for


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``mcp`` on the CLI's subcommands."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "mcp", help="serve the knowledge tool over MCP streamable HTTP (anonymous callers, whole corpus)"
    )
    parser.add_argument("--database-url", help="PostgreSQL URL; omit for the embedded server")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=None,
        help='a Host header to answer, "name:port" or "name:*" (repeatable); default: the loopback names',
    )
    return parser


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from context_engine.mcp.app import LOOPBACK_HOSTS, create_mcp_app
    except ImportError:
        print('error: serving MCP needs the mcp extra: pip install "pg-context-engine[mcp]"', file=sys.stderr)
        return 2
    from context_engine.engine import ContextEngine
    from context_engine.storage.scope import UNSCOPED

    config = config_for(args.database_url)
    engine = ContextEngine(config)

    # every other Host header is refused (DNS rebinding); a server bound elsewhere names its hosts
    hosts = list(LOOPBACK_HOSTS) + list(args.allowed_host or [])
    app = create_mcp_app(engine, principals=[], scope=UNSCOPED, allowed_hosts=hosts)
    where = "the embedded PostgreSQL server" if config.database_url is None else "the configured database"
    print(f"context-engine MCP server on http://{args.host}:{args.port}/mcp using {where}.", file=sys.stderr)
    print(
        "Principals: anonymous for every caller (only documents with an empty ACL are visible). "
        "Scope: UNSCOPED (every source).",
        file=sys.stderr,
    )
    print("No authentication is applied; keep it on localhost.", file=sys.stderr, flush=True)
    try:
        with _stops_unwind():
            uvicorn.run(app, host=args.host, port=args.port, log_level=os.environ.get("CE_LOG_LEVEL", "warning"))
    finally:
        asyncio.run(engine.aclose())  # releases the embedded server this process started
    return 0


@contextlib.contextmanager
def _stops_unwind() -> Iterator[None]:
    """A plain ``kill`` (or a closed terminal) ends the server through the ``finally`` that closes the engine.

    uvicorn shuts down on SIGTERM, then raises it again under the handler it found; Python's default
    would end the process there, before the engine closes and the embedded server it holds is
    released. As Ctrl-C's handler it unwinds instead. SIGHUP, which uvicorn ignores, becomes a SIGTERM.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers
        return
    previous = {
        signal.SIGTERM: signal.signal(signal.SIGTERM, signal.default_int_handler),
        signal.SIGHUP: signal.signal(signal.SIGHUP, lambda signum, frame: signal.raise_signal(signal.SIGTERM)),
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

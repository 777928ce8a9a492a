"""``context-engine``: serve, migrate and ingest from the command line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

from context_engine import cli_inspect, skill
from context_engine.config import ContextEngineConfig
from context_engine.ingest import batches_cli
from context_engine.mcp import cli as mcp_cli
from context_engine.tools import cli as tools_cli

DESCRIPTION = """\
Permission-aware hybrid retrieval on PostgreSQL.

With no --database-url (and no CE_DATABASE_URL) every command uses the embedded PostgreSQL
server in your user data directory and the local embedding model: no keys, no setup.
"""


def _config(database_url: str | None) -> ContextEngineConfig:
    """The settings from ``CE_*`` variables, with ``--database-url`` over ``CE_DATABASE_URL``."""
    return ContextEngineConfig(database_url=database_url) if database_url else ContextEngineConfig()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="context-engine", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser("serve", help="serve the REST routes with uvicorn (FastAPI)")
    serve.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    serve.add_argument("--database-url", help="PostgreSQL URL; omit for the embedded server")
    serve.add_argument(
        "--trusted",
        action="store_true",
        help="treat every caller as TRUSTED (skips ACLs; for local experiments only)",
    )
    serve.add_argument(
        "--shutdown-seconds",
        type=float,
        default=5.0,
        help="on SIGTERM/Ctrl-C, how long requests still running may finish before they are cancelled "
        "(an ingest cut short stays resumable; default 5)",
    )

    mig = sub.add_parser("migrate", help="create or update the schema (idempotent, safe to re-run)")
    mig.add_argument("--database-url", help="PostgreSQL URL; omit for the embedded server")
    mig.add_argument("--dim", type=int, help="embedding width, locked on first run (default: the model's)")
    mig.add_argument(
        "--text-search-config",
        choices=["english", "simple"],
        default=None,
        help="full-text configuration, locked on first run (default: search.text_search_config)",
    )
    mig.add_argument("--graph", action="store_true", help="also create the graph tables (graph mode)")
    mig.add_argument(
        "--trigram",
        action="store_true",
        help="also build the trigram leg's index (done anyway when search.weights.trigram is above 0)",
    )
    mig.add_argument(
        "--citus",
        action="store_true",
        help="distribute the schema on a Citus coordinator (done anyway when the citus extension is "
        "installed; with this flag a database without it is refused)",
    )

    ing = sub.add_parser("ingest", help="ingest files and folders")
    ing.add_argument("paths", nargs="+", type=Path, help="files or folders (folders are walked)")
    ing.add_argument("--database-url", help="PostgreSQL URL; omit for the embedded server")
    ing.add_argument("--source-id", default="default", help="the source (namespace) to file under")
    ing.add_argument("--acl", default="", help="comma-separated principals; empty = visible to everyone")
    ing.add_argument("--bulk", action="store_true", help="load new documents in bulk (binary COPY)")
    ing.add_argument("--keep-indexes", action="store_true", help="with --bulk: keep the search indexes during the load")

    vac = sub.add_parser(
        "vacuum-revisions", help="remove history no revision from --keep-after on can see (bounds its growth)"
    )
    vac.add_argument("--database-url", help="PostgreSQL URL; omit for the embedded server")
    vac.add_argument(
        "--keep-after", type=int, required=True, help="the oldest revision that stays readable (as_of below it expires)"
    )

    ev = sub.add_parser(
        "eval",
        help="measure retrieval quality on BEIR-format data (each leg, fused, and a BM25 baseline)",
        description=(
            "Ingest a BEIR-format folder (corpus.jsonl[.gz], queries.jsonl[.gz], qrels/<split>.tsv) through the "
            "engine with your settings (CE_* variables), run every judged query through search, and print "
            "nDCG@10, Recall@100, MRR@10 and latency for each leg alone, the fused ranking and BM25 computed "
            "beside them. Without --database-url a throwaway embedded server is used."
        ),
    )
    ev.add_argument("--data", required=True, type=Path, help="the BEIR-format folder")
    ev.add_argument("--database-url", help="PostgreSQL URL; the corpus goes into its own source, removed afterwards")
    ev.add_argument("--split", default="test", help="which qrels/<split>.tsv to evaluate (default test)")
    ev.add_argument("--top-k", type=int, default=100, help="chunks per search, ranked into documents (default 100)")
    ev.add_argument(
        "--dense-baseline",
        action="store_true",
        help="also run exact dense search with your model over whole documents (embeds the corpus again)",
    )
    ev.add_argument("--keep", action="store_true", help="keep the evaluation source in --database-url afterwards")

    exp = sub.add_parser(
        "check-acl-exposure",
        help="measure what a bare ACL-scoped index query loses on your data (read-only, no model called)",
        description=(
            "For the ACL values in your stored chunks (most restrictive first), use stored chunk vectors as queries "
            "and compare what a bare scoped query on the HNSW index returns and what this library returns, both "
            "scored against an exact search computed inside Postgres. Read-only: nothing is migrated or written."
        ),
    )
    exp.add_argument("--database-url", help="PostgreSQL URL; omit for the embedded server")
    exp.add_argument("--top-k", type=int, default=10, help="rows per query (default 10)")
    exp.add_argument("--queries", type=int, default=20, help="stored vectors used as queries (default 20)")
    exp.add_argument("--max-acls", type=int, default=20, help="ACL values checked, smallest first (default 20)")
    exp.add_argument("--threshold", type=int, help="the library's exact/approximate crossover (default: config)")
    cli_inspect.add_parsers(sub)
    skill.add_parser(sub)
    mcp_cli.add_parser(sub)
    tools_cli.add_parser(sub)
    batches_cli.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        if args.command == "serve":
            return _serve(args)  # uvicorn shuts down gracefully on SIGTERM itself
        if args.command == "mcp":
            return mcp_cli.run(args)  # uvicorn too
        with _stop_signals_as_ctrl_c():
            if args.command == "migrate":
                return asyncio.run(_migrate(args))
            if args.command == "ingest":
                return asyncio.run(_ingest(args))
            if args.command == "vacuum-revisions":
                return asyncio.run(_vacuum_revisions(args))
            if args.command == "eval":
                return asyncio.run(_eval(args))
            if args.command == "check-acl-exposure":
                return asyncio.run(_check_acl_exposure(args))
            if args.command == "install-skill":
                return skill.run(args)
            if args.command == "tools":
                return tools_cli.run(args)
            if args.command == "batches":
                return batches_cli.run(args)
            if args.command in cli_inspect.COMMANDS:
                return asyncio.run(cli_inspect.run(args))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        message = one_line_error(exc)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        return 1
    parser.print_help()
    return 2


def one_line_error(exc: BaseException) -> str | None:
    """What the command line prints for a failure it can explain (``None``: a bug, shown in full)."""
    from context_engine.errors import ContextEngineError

    if isinstance(exc, ContextEngineError):
        return exc.message  # one line, or the line and the statements a DBA runs
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        return (
            f"{exc.name} is not installed, and this command needs it: install the extra that brings it "
            '(pip install "pg-context-engine[all]" for every one)'
        )
    if isinstance(exc, ValueError):
        return str(exc)
    return None


#: ``kill`` and a closed terminal: Python's default for both ends the process on the spot, skipping every cleanup
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _stop_signals_as_ctrl_c() -> Iterator[None]:
    """A plain ``kill`` (or a closed terminal) ends a command the way Ctrl-C does.

    The engine then closes and the embedded server is released, instead of being left running.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers; a caller running us elsewhere keeps its own
        return
    previous = {signum: signal.signal(signum, signal.default_int_handler) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


# ---------------------------------------------------------------------- serve
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


def _serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn
    except ImportError:
        print('error: serving needs the fastapi extra: pip install "pg-context-engine[fastapi]"', file=sys.stderr)
        return 1
    config = _config(args.database_url)
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


# ---------------------------------------------------------------------- migrate
async def _migrate(args: argparse.Namespace) -> int:
    from context_engine.embeddings.factory import build_embedder
    from context_engine.storage.database import Database
    from context_engine.storage.migrate import migrate

    config = _config(args.database_url)
    dim = args.dim or config.embedding.dim or build_embedder(config.embedding).dim
    db = Database(config)
    try:
        report = await migrate(
            await db.engine(),
            dim=dim,
            text_search_config=args.text_search_config or config.search.text_search_config,
            graph=args.graph,
            trigram=args.trigram or config.fusion.trigram_enabled,
            halfvec=config.storage.hnsw_halfvec,
            citus=True if args.citus else None,
        )
    finally:
        await db.aclose()
    applied = ", ".join(report.applied) if report.applied else "nothing to apply (already up to date)"
    layout = "; distributed (Citus)" if report.citus else ""
    print(f"migrated: {applied}; dim={report.dim}; text search config={report.text_search_config}{layout}")
    return 0


async def _vacuum_revisions(args: argparse.Namespace) -> int:
    from context_engine.revisions.retention import vacuum
    from context_engine.storage.database import Database

    db = Database(_config(args.database_url))
    try:
        report = await vacuum(await db.engine(), args.keep_after)
    finally:
        await db.aclose()
    print(
        f"vacuumed: {report['versions_removed']} versions and {report['chunks_removed']} chunks removed; "
        f"oldest readable revision {report['horizon']}"
    )
    return 0


# ---------------------------------------------------------------------- ingest
_SKIP = {".git", ".venv", "__pycache__", "node_modules"}


def named_files(paths: Sequence[Path]) -> list[tuple[Path, str]]:
    """Each file to ingest with its document name: the path relative to the folder given, or the file's name.

    The name is what identifies a document, so it must not depend on how the path was typed
    (``/abs/dir`` and ``dir`` name ``dir/notes.csv`` the same: ``notes.csv``). Two files that
    would share a name are refused before anything is ingested.
    """
    files: list[tuple[Path, str]] = []
    for path in paths:
        if path.is_dir():
            for root, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if d not in _SKIP and not d.startswith("."))
                for name in sorted(n for n in names if not n.startswith(".")):
                    found = Path(root) / name
                    files.append((found, found.relative_to(path).as_posix()))
        elif path.is_file():
            files.append((path, path.name))
        else:
            raise ValueError(f"no such file or folder: {path}")
    named: dict[str, Path] = {}
    for found, name in files:
        earlier = named.setdefault(name, found)
        if earlier.resolve() != found.resolve():
            raise ValueError(f"{earlier} and {found} would both be named {name!r}; ingest their common folder instead")
    return [(found, name) for name, found in named.items()]  # the same file given twice is ingested once


async def _ingest(args: argparse.Namespace) -> int:
    from context_engine.cli_progress import ProgressDisplay
    from context_engine.engine import ContextEngine
    from context_engine.hooks import Hooks

    files = named_files(args.paths)
    acl = [p.strip() for p in args.acl.split(",") if p.strip()]
    if args.bulk:
        from context_engine.ingest.bulk_cli import ingest_files_in_bulk

        config = _config(args.database_url)
        return await ingest_files_in_bulk(
            config, files, source_id=args.source_id, acl=acl, build_index=not args.keep_indexes
        )
    counts = {"completed": 0, "skipped": 0, "failed": 0}
    failures: list[str] = []
    display = ProgressDisplay(sys.stderr, len(files))
    hooks = Hooks(on_progress=display.on_progress)
    async with ContextEngine(_config(args.database_url), hooks=hooks) as engine:
        for i, (path, name) in enumerate(files):
            display.start_file(i, name)
            try:
                report = await engine.ingest(file=path, name=name, source_id=args.source_id, acl=acl)
            except Exception as exc:  # one refused file never stops the batch
                counts["failed"] += 1
                failures.append(f"{name}: {exc}")
                display.finish_file("failed")
                continue
            doc = report.documents[0]
            counts[doc.status if doc.status in counts else "failed"] += 1
            if doc.status == "failed":
                failures.append(f"{name}: {doc.failure_reason}: {doc.error}")
            display.finish_file(doc.status)
    display.close()
    print(
        f"ingested {len(files)} files: {counts['completed']} completed, {counts['skipped']} skipped, "
        f"{counts['failed']} failed"
    )
    for line in failures:
        print(f"  failed {line}")
    return 0 if counts["failed"] == 0 else 1


# ---------------------------------------------------------------------- eval
async def _eval(args: argparse.Namespace) -> int:
    from context_engine.cli_progress import ProgressDisplay
    from context_engine.evaluation import format_table, run_eval

    if not args.data.is_dir():
        raise ValueError(f"no such folder: {args.data}")
    baselines = ["bm25", "dense", "bm25+dense"] if args.dense_baseline else ["bm25"]
    config = ContextEngineConfig.from_env()

    display = ProgressDisplay(sys.stderr, 0)

    def progress(stage: str, done: int, total: int) -> None:
        display.stage(stage, done, total)
        if done == total:
            display.close()

    report = await run_eval(
        args.data,
        args.database_url,
        config=config,
        split=args.split,
        top_k=args.top_k,
        baselines=baselines,
        keep=args.keep,
        progress=progress,
    )
    print(format_table(report))
    return 0


# ---------------------------------------------------------------------- check-acl-exposure
async def _check_acl_exposure(args: argparse.Namespace) -> int:
    from context_engine.acl_exposure import check_exposure, format_report, read_only_engine
    from context_engine.storage.database import Database

    config = _config(args.database_url)
    threshold = config.storage.ann_exact_threshold if args.threshold is None else args.threshold
    server = Database(config)  # only for the URL: starts the embedded server when no URL is given
    try:
        db = read_only_engine(await server.url())
        try:
            report = await check_exposure(
                db,
                top_k=args.top_k,
                queries=args.queries,
                max_acls=args.max_acls,
                threshold=threshold,
                halfvec=config.storage.hnsw_halfvec,
            )
        finally:
            await db.dispose()
    finally:
        await server.aclose()
    print(format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The ``context-engine`` parser and the dispatch of every subcommand, and the small commands
(``migrate``, ``vacuum-revisions``, ``eval``, ``check-acl-exposure``); the larger ones have a module each."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from context_engine.cli import batches, ingest, inspect_store, mcp, serve, skill, tools
from context_engine.cli.settings import config_for
from context_engine.config import ContextEngineConfig

DESCRIPTION = """\
Permission-aware hybrid retrieval on PostgreSQL.

With no --database-url (and no CE_DATABASE_URL) every command uses the embedded PostgreSQL
server in your user data directory and the local embedding model: no keys, no setup.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="context-engine", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve.add_parser(sub)
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
        "--document-fts",
        action="store_true",
        help="also build the document full-text leg's chunk indexes (done anyway when its weight is above 0)",
    )
    mig.add_argument(
        "--citus",
        action="store_true",
        help="distribute the schema on a Citus coordinator (done anyway when the citus extension is "
        "installed; with this flag a database without it is refused)",
    )

    ingest.add_parser(sub)

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
    inspect_store.add_parsers(sub)
    skill.add_parser(sub)
    mcp.add_parser(sub)
    tools.add_parser(sub)
    batches.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        if args.command == "serve":
            return serve.run(args)  # uvicorn shuts down gracefully on SIGTERM itself
        if args.command == "mcp":
            return mcp.run(args)  # uvicorn too
        with _stop_signals_as_ctrl_c():
            if args.command == "migrate":
                return asyncio.run(_migrate(args))
            if args.command == "ingest":
                return asyncio.run(ingest.run(args))
            if args.command == "vacuum-revisions":
                return asyncio.run(_vacuum_revisions(args))
            if args.command == "eval":
                return asyncio.run(_eval(args))
            if args.command == "check-acl-exposure":
                return asyncio.run(_check_acl_exposure(args))
            if args.command == "install-skill":
                return skill.run(args)
            if args.command == "tools":
                return tools.run(args)
            if args.command == "batches":
                return batches.run(args)
            if args.command in inspect_store.COMMANDS:
                return asyncio.run(inspect_store.run(args))
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


# ---------------------------------------------------------------------- migrate
async def _migrate(args: argparse.Namespace) -> int:
    from context_engine.embeddings.factory import build_embedder
    from context_engine.storage.database import Database
    from context_engine.storage.migrate import migrate

    config = config_for(args.database_url)
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
            document_fts=args.document_fts or config.fusion.document_fts_enabled,
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

    db = Database(config_for(args.database_url))
    try:
        report = await vacuum(await db.engine(), args.keep_after)
    finally:
        await db.aclose()
    print(
        f"vacuumed: {report['versions_removed']} versions and {report['chunks_removed']} chunks removed; "
        f"oldest readable revision {report['horizon']}"
    )
    return 0


# ---------------------------------------------------------------------- eval
async def _eval(args: argparse.Namespace) -> int:
    from context_engine.cli.progress import ProgressDisplay
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

    config = config_for(args.database_url)
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

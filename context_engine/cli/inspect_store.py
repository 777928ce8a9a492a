"""``search``, ``stats``, ``get`` and ``check-database``: look at a store from the shell.

The first three read as a caller, so what they print is what that caller may see: ``--principals``
(comma-separated, as ``ingest --acl``), ``--trusted`` (every document, as ``serve --trusted``), or
neither (anonymous: documents with an empty ACL only).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from context_engine.cli.settings import config_for
from context_engine.principals import TRUSTED, Principals

COMMANDS = ("search", "stats", "get", "check-database")
_URL_HELP = "PostgreSQL URL; omit for the embedded server (or CE_DATABASE_URL)"


def _caller_flags(parser: argparse.ArgumentParser) -> None:
    who = parser.add_mutually_exclusive_group()
    who.add_argument(
        "--principals",
        default="",
        help="comma-separated principals to read as (e.g. group:hr,user:42); omitted: anonymous, "
        "who sees only documents with an empty ACL",
    )
    who.add_argument("--trusted", action="store_true", help="read as TRUSTED: every document, no ACL filtering")
    parser.add_argument("--database-url", help=_URL_HELP)
    parser.add_argument("--json", action="store_true", help="print the engine's JSON answer instead of text")


def add_parsers(sub: Any) -> None:
    search = sub.add_parser("search", help="search the store as a caller and print the best passages")
    search.add_argument("query", help="the search text")
    search.add_argument("--top-k", type=int, default=10, help="passages to return (default 10)")
    search.add_argument("--source-id", action="append", help="only this source (repeat for several)")
    _caller_flags(search)

    stats = sub.add_parser("stats", help="count the documents and chunks a caller may see")
    stats.add_argument("--source-id", action="append", help="only this source (repeat for several)")
    _caller_flags(stats)

    get = sub.add_parser("get", help="print one document (its metadata and text) as a caller sees it")
    get.add_argument("document_id", metavar="ID", help="the document id ingest printed or search returned")
    get.add_argument("--no-text", action="store_true", help="metadata only")
    _caller_flags(get)

    check = sub.add_parser(
        "check-database",
        help="say whether migrate can run on this database as this role, and what a DBA must run if not",
        description=(
            "Read-only: reports the server version, the role's privileges and the three extensions "
            "(vector, pg_trgm, unaccent), and prints the statements a superuser runs for whatever is missing. "
            "Exits 0 when migrate can run, 1 otherwise."
        ),
    )
    check.add_argument("--database-url", help=_URL_HELP)


def caller(args: argparse.Namespace) -> Principals:
    """The principals the flags name: TRUSTED, a list, or ``[]`` (anonymous)."""
    if args.trusted:
        return TRUSTED
    return [p.strip() for p in args.principals.split(",") if p.strip()]


async def run(args: argparse.Namespace) -> int:
    if args.command == "check-database":
        return await _check_database(args)
    from context_engine.engine import ContextEngine

    async with ContextEngine(config_for(args.database_url)) as engine:
        if args.command == "search":
            result = await engine.search(
                args.query, principals=caller(args), top_k=args.top_k, source_ids=args.source_id
            )
            print(result.model_dump_json(indent=2) if args.json else format_hits(result.hits))
        elif args.command == "stats":
            stats = await engine.stats(principals=caller(args), source_ids=args.source_id)
            print(stats.model_dump_json(indent=2) if args.json else format_stats(stats.model_dump()))
        else:
            doc = await engine.get_document(args.document_id, principals=caller(args), include_text=not args.no_text)
            print(doc.model_dump_json(indent=2) if args.json else format_document(doc.model_dump(mode="json")))
    return 0


def format_hits(hits: list[Any]) -> str:
    if not hits:
        return "no passages found (for this caller: see --principals / --trusted)"
    lines = []
    for rank, hit in enumerate(hits, 1):
        where = f" [{hit.section}]" if hit.section else ""
        page = f" p.{hit.page}" if hit.page is not None else ""
        snippet = " ".join(hit.chunk_text.split())
        snippet = snippet if len(snippet) <= 200 else snippet[:197] + "..."
        lines.append(f"{rank:>2}. {hit.score:.4f}  {hit.document_name}{where}{page}  (document {hit.document_id})")
        lines.append(f"    {snippet}")
    return "\n".join(lines)


def format_stats(stats: dict[str, Any]) -> str:
    lines = [f"documents {stats['documents']}, chunks {stats['chunks']}, store revision {stats['revision']}"]
    if stats["by_status"]:
        lines.append("by status: " + ", ".join(f"{k} {v}" for k, v in sorted(stats["by_status"].items())))
    if stats["sources"]:
        lines.append("by source: " + ", ".join(f"{k} {v}" for k, v in sorted(stats["sources"].items())))
    return "\n".join(lines)


def format_document(doc: dict[str, Any]) -> str:
    text = doc.pop("text", None)
    head = json.dumps({k: v for k, v in doc.items() if v not in (None, {}, [])}, indent=2, default=str)
    return head if text is None else f"{head}\n\n{text}"


async def _check_database(args: argparse.Namespace) -> int:
    from context_engine.storage.database import Database
    from context_engine.storage.migrate import wanted_revisions
    from context_engine.storage.readiness import check_readiness, format_readiness

    db = Database(config_for(args.database_url))
    try:
        async with (await db.engine()).connect() as conn:
            found = await check_readiness(conn, wanted_revisions(set()))
    finally:
        await db.aclose()
    print(format_readiness(found))
    return 0 if found.ready else 1

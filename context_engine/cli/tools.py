"""``context-engine tools add|list|delete|reader-role``: operators manage stored tools.

A tool's config (its URL, headers, credentials) is read from a JSON file (or ``-`` for stdin),
never from a command-line argument, so secrets stay out of shell history and process listings.
The config is encrypted under ``CE_SECRET_KEY`` as with ``register_tool``. ``reader-role``
creates the least-privilege role a db tool must connect as.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from context_engine.cli.settings import config_for
from context_engine.config import ContextEngineConfig
from context_engine.errors import ContextEngineError
from context_engine.principals import TRUSTED
from context_engine.tools import kinds


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``tools`` (with ``add``, ``list``, ``delete`` and ``reader-role``) to the CLI's subcommands."""
    stored = kinds.names()
    tools = subparsers.add_parser("tools", help=f"register, list and delete governed tools ({', '.join(stored)})")
    actions = tools.add_subparsers(dest="tools_command", metavar="ACTION")

    add = actions.add_parser("add", help="register a tool; its config comes from a JSON file")
    add.add_argument("name", help="the tool's name (letters, digits, '_'); called as <kind>_<name>")
    add.add_argument(
        "--kind",
        choices=stored,
        required=True,
        help="; ".join(f"{n}: {s.summary}" for n in stored if (s := kinds.get(n)) is not None).replace("%", "%%"),
    )
    add.add_argument(
        "--config-file",
        required=True,
        help="JSON object with the tool's config (url, headers, credentials...); '-' reads stdin",
    )
    add.add_argument("--description", default="", help="what the tool does, as a model will read it")
    add.add_argument("--acl", default="", help="comma-separated principals who may see it; empty = everyone")
    add.add_argument("--requires-approval", action="store_true", help="gate every call behind a human approval")
    add.add_argument("--database-url", help="PostgreSQL URL; omit for the embedded server")

    ls = actions.add_parser("list", help="list every stored and function tool (never their configs)")
    ls.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ls.add_argument("--database-url", help="PostgreSQL URL; omit for the embedded server")

    delete = actions.add_parser("delete", help="delete a stored tool by its tool_id")
    delete.add_argument("tool_id")
    delete.add_argument("--database-url", help="PostgreSQL URL; omit for the embedded server")

    reader = actions.add_parser(
        "reader-role",
        help="create the least-privilege login role a db tool connects as, and print its database_url",
        description="Create a login role that may only read the chosen tables of one database: no superuser, "
        "no membership, no privilege on the engine's ce_ tables (the check db tools run is run before the "
        "commit). Prints the database_url to put in the db tool's config.",
    )
    reader.add_argument("name", help="the role to create")
    reader.add_argument(
        "--database-url",
        help="a URL that may create roles, on the database the tool will read; omit for the embedded server",
    )
    reader.add_argument("--schema", action="append", help="schema it may read (repeatable; default public)")
    reader.add_argument("--table", action="append", help="only this table or view (schema.table; repeatable)")
    reader.add_argument("--password-file", help="read the role's password from this file (default: a random one)")
    reader.add_argument("--print", action="store_true", help="print the statements instead of running them")
    tools.set_defaults(tools_parser=tools)
    return tools


def run(args: argparse.Namespace) -> int:
    """Run the ``tools`` action in ``args``; 0 on success, 1 on a refused request, 2 on bad usage."""
    action = getattr(args, "tools_command", None)
    if action is None:
        args.tools_parser.print_help()
        return 2
    try:
        return asyncio.run(_ACTIONS[action](args))
    except (ContextEngineError, ValidationError, ValueError, OSError) as exc:
        print(f"error: {_describe(exc)}", file=sys.stderr)
        return 1


def _describe(exc: Exception) -> str:
    if isinstance(exc, ContextEngineError):
        return f"{exc.code}: {exc.message}"
    if isinstance(exc, ValidationError):
        # the offending field and rule, never the input itself (it may hold a credential)
        first = exc.errors()[0]
        return f"invalid tool: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    if isinstance(exc, OSError):
        return f"could not read the config file ({exc.strerror or type(exc).__name__})"
    return str(exc)


def _engine(database_url: str | None) -> Any:
    from context_engine.engine import ContextEngine

    return ContextEngine(config_for(database_url))


def _read_config(source: str) -> dict[str, Any]:
    text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the config file is not valid JSON (line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise ValueError("the config file must hold one JSON object")
    return data


async def _add(args: argparse.Namespace) -> int:
    from context_engine.tools.models import ToolConfig

    tool = ToolConfig(
        name=args.name,
        kind=args.kind,
        description=args.description,
        config=_read_config(args.config_file),
        acl=[a.strip() for a in args.acl.split(",") if a.strip()],
        requires_approval=args.requires_approval,
    )
    async with _engine(args.database_url) as engine:
        entry = await engine.register_tool(tool)
    print(f"registered {entry['name']} (tool_id {entry['tool_id']})")
    return 0


async def _list(args: argparse.Namespace) -> int:
    async with _engine(args.database_url) as engine:
        tools = await engine.list_tools(principals=TRUSTED)
    if args.json:
        print(json.dumps(tools, indent=2, default=str))
        return 0
    if not tools:
        print("no tools registered")
        return 0
    rows = [
        (
            t["tool_id"] or "-",
            t["name"],
            t["kind"],
            "yes" if t["requires_approval"] else "no",
            ",".join(t["acl"]) or "*",
        )
        for t in tools
    ]
    header = ("TOOL_ID", "NAME", "KIND", "APPROVAL", "ACL")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return 0


async def _delete(args: argparse.Namespace) -> int:
    async with _engine(args.database_url) as engine:
        await engine.delete_tool(args.tool_id, principals=TRUSTED)
    print(f"deleted {args.tool_id}")
    return 0


async def _reader_role(args: argparse.Namespace) -> int:
    import psycopg

    from context_engine.tools import reader_role

    password = _password(args.password_file) if args.password_file else reader_role.new_password()
    async with _admin_url(args.database_url) as admin_url:
        try:
            async with await psycopg.AsyncConnection.connect(reader_role.libpq_url(admin_url)) as conn:
                role = await reader_role.plan(
                    conn, admin_url, args.name, password, schemas=args.schema or ["public"], tables=args.table
                )
                if args.print:
                    for statement in role.statements:
                        print(statement.as_string(conn) + ";")
                    return 0
                await reader_role.create(conn, role)
        except psycopg.Error as exc:
            # the operator's own server speaking: its primary message and SQLSTATE, no DETAIL
            primary = getattr(exc.diag, "message_primary", None) or type(exc).__name__
            print(f"error: {primary} (SQLSTATE {exc.sqlstate})", file=sys.stderr)
            return 1
    read = ", ".join(f"{s}.{t}" for s, t in role.tables) or "no tables yet (grant SELECT as you add them)"
    print(f"created role {role.name!r}; it may read: {read}")
    print(f"database_url for the db tool's config: {role.url}")
    return 0


def _password(source: str) -> str:
    password = Path(source).read_text(encoding="utf-8").strip()
    if not password:
        raise ValueError("the password file is empty")
    return password


@asynccontextmanager
async def _admin_url(given: str | None) -> AsyncIterator[str]:
    """``given``, else the configured ``database_url``, else the embedded server's (held meanwhile)."""
    from context_engine.config import database_url_text
    from context_engine.storage import embedded

    config = ContextEngineConfig()
    named = given or database_url_text(config)
    if named:
        yield named
        return
    pgdata, url = await asyncio.to_thread(embedded.acquire, config.storage.data_dir)
    try:
        yield url
    finally:
        await asyncio.to_thread(embedded.release, pgdata)


_ACTIONS = {"add": _add, "list": _list, "delete": _delete, "reader-role": _reader_role}

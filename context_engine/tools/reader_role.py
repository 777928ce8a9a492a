"""Create the least-privilege login role a db tool should connect as.

The role gets CONNECT on one database, USAGE on the chosen schemas and SELECT on their tables and
views, none of the engine's ``ce_`` tables among them; it is no superuser, creates nothing,
belongs to no role, and reads in a read-only transaction by default. Everything runs in one
transaction that ends with the same check a db tool's registration runs, so a role that would be
refused (say ``PUBLIC`` was granted something on a ``ce_`` table) is never committed.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
from psycopg import sql

from context_engine.errors import InvalidRequest
from context_engine.tools import db_role

_TABLES = """
SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = ANY(%(schemas)s) AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND c.relname NOT LIKE %(prefix)s
ORDER BY 1, 2
"""


@dataclass(frozen=True)
class ReaderRole:
    """The statements that create the role, and the URL a db tool connects with."""

    name: str
    statements: list[sql.Composed]
    url: str
    tables: list[tuple[str, str]]


def new_password() -> str:
    """A random password that needs no quoting in a URL."""
    return secrets.token_urlsafe(24)


async def plan(
    conn: psycopg.AsyncConnection[Any],
    admin_url: str,
    name: str,
    password: str,
    *,
    schemas: list[str],
    tables: list[str] | None = None,
) -> ReaderRole:
    """The statements for role ``name`` on ``conn``'s database (nothing is run yet)."""
    if not name or len(name) > 63:
        raise InvalidRequest("the role name must be 1 to 63 characters")
    async with conn.cursor() as cur:
        await cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,))
        if await cur.fetchone() is not None:
            raise InvalidRequest(f"role {name!r} already exists; choose another name or drop it first")
        await cur.execute("SELECT current_database()")
        database = str((await cur.fetchone())[0])  # type: ignore[index]
        await cur.execute(_TABLES, {"schemas": schemas, "prefix": db_role.check_params()["prefix"]})
        found = [(str(s), str(t)) for s, t in await cur.fetchall()]
    chosen = _chosen(found, tables, schemas)
    role = sql.Identifier(name)
    statements: list[sql.Composed] = [
        sql.SQL(
            "CREATE ROLE {} LOGIN PASSWORD {} NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS"
        ).format(role, sql.Literal(password)),
        sql.SQL("ALTER ROLE {} SET default_transaction_read_only = on").format(role),
        sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(database), role),
    ]
    statements += [sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(s), role) for s in schemas]
    if chosen:
        names = sql.SQL(", ").join(sql.Identifier(s, t) for s, t in chosen)
        statements.append(sql.SQL("GRANT SELECT ON {} TO {}").format(names, role))
    return ReaderRole(name=name, statements=statements, url=reader_url(admin_url, name, password), tables=chosen)


def _chosen(found: list[tuple[str, str]], tables: list[str] | None, schemas: list[str]) -> list[tuple[str, str]]:
    if tables is None:
        return found
    chosen: list[tuple[str, str]] = []
    for table in tables:
        schema, _, relname = table.rpartition(".")
        matches = [f for f in found if f[1] == relname and (f[0] == schema if schema else True)]
        if relname.startswith(db_role.ENGINE_PREFIX):
            raise InvalidRequest(f"{table!r} is one of the engine's tables: a db tool's role may not read it")
        if not matches:
            raise InvalidRequest(f"no table or view {table!r} in schema(s) {', '.join(schemas)}")
        chosen += [m for m in matches if m not in chosen]
    return chosen


async def create(conn: psycopg.AsyncConnection[Any], role: ReaderRole) -> None:
    """Run ``role``'s statements in one transaction, committed only if the role passes the check."""
    async with conn.transaction(), conn.cursor() as cur:
        for statement in role.statements:
            await cur.execute(statement)
        await cur.execute(db_role.CHECK_SQL, db_role.check_params(role.name))
        findings = db_role.RoleFindings.of_row(await cur.fetchone())
        if not findings.least_privilege:
            raise InvalidRequest(findings.refusal(), code="tool_role_refused")


def libpq_url(url: str) -> str:
    """``url`` as libpq reads it: a ``postgresql+psycopg://`` (SQLAlchemy) URL loses its driver."""
    parts = urlsplit(url)
    scheme = parts.scheme.split("+", 1)[0]
    if scheme not in ("postgresql", "postgres"):
        raise InvalidRequest("the database URL must be a postgresql:// URL")
    return urlunsplit(("postgresql", *parts[1:]))


def reader_url(admin_url: str, name: str, password: str) -> str:
    """``admin_url`` with ``name`` and ``password`` as its credentials (host, database and options kept)."""
    parts = urlsplit(libpq_url(admin_url))
    host = parts.netloc.rpartition("@")[2]
    netloc = f"{quote(name, safe='')}:{quote(password, safe='')}@{host}"
    return urlunsplit(("postgresql", netloc, parts.path, parts.query, parts.fragment))

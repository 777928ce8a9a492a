"""Is this PostgreSQL ready for ``migrate``, as the role in the URL? What is missing, and what a DBA runs.

On a server you do not administer the role ``migrate`` signs in as is usually the database's owner,
not a superuser. It can create ``pg_trgm`` and ``unaccent`` itself (both are *trusted* extensions,
which a role with CREATE on the database may create), but not ``vector``, which only a superuser
may create. Every check here is read-only; :func:`statements_for_dba` is what to hand over.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from context_engine.storage.extensions import MIN_PGVECTOR, REQUIRED, version_tuple


def quote_ident(name: str) -> str:
    """An SQL identifier, double-quoted (the statements are printed for a person to run, never executed here)."""
    return '"' + name.replace('"', '""') + '"'


@dataclass
class Extension:
    name: str
    #: the installed version, ``None`` when not installed in this database
    installed: str | None
    #: the version ``CREATE EXTENSION`` would install, ``None`` when the server does not offer it
    available: str | None
    #: a trusted extension may be created by a non-superuser with CREATE on the database
    trusted: bool


@dataclass
class Readiness:
    """What was found, what is missing, and the statements that fix what a superuser must fix."""

    server_version: str
    database: str
    role: str
    superuser: bool
    create_on_database: bool
    create_on_schema: bool
    schema: str | None
    extensions: list[Extension]
    #: revisions not yet applied (all of them on a fresh database)
    pending_revisions: int
    missing: list[str] = field(default_factory=list)
    statements: list[str] = field(default_factory=list)
    #: what no statement fixes (an extension the server lacks, a pgvector too old)
    server_changes: list[str] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return not self.missing


async def check_readiness(conn: AsyncConnection, revisions: list[str]) -> Readiness:
    """Read the role, its privileges and the extensions; decide what ``migrate`` would lack."""
    who = (
        await conn.execute(
            text(
                "SELECT current_setting('server_version') AS version, current_database() AS database, "
                "current_user AS role, COALESCE((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false) "
                "AS superuser, has_database_privilege(current_database(), 'CREATE') AS create_db, "
                "current_schema() AS schema, "
                "COALESCE(has_schema_privilege(current_schema(), 'CREATE'), false) AS create_schema"
            )
        )
    ).one()
    rows = (
        await conn.execute(
            text(
                "SELECT n.name, e.extversion AS installed, a.default_version AS available, "
                "       COALESCE((SELECT bool_or(v.trusted) FROM pg_available_extension_versions v "
                "                 WHERE v.name = n.name), false) AS trusted "
                "FROM unnest(CAST(:names AS text[])) AS n(name) "
                "LEFT JOIN pg_available_extensions a ON a.name = n.name "
                "LEFT JOIN pg_extension e ON e.extname = n.name"
            ),
            {"names": list(REQUIRED)},
        )
    ).all()
    extensions = [Extension(r.name, r.installed, r.available, bool(r.trusted)) for r in rows]
    applied: set[str] = set()
    if await conn.scalar(text("SELECT to_regclass('ce_schema_migrations') IS NOT NULL")):
        applied = set((await conn.execute(text("SELECT id FROM ce_schema_migrations"))).scalars())
    found = Readiness(
        server_version=str(who.version),
        database=str(who.database),
        role=str(who.role),
        superuser=bool(who.superuser),
        create_on_database=bool(who.create_db),
        create_on_schema=bool(who.create_schema),
        schema=who.schema,
        extensions=extensions,
        pending_revisions=len([r for r in revisions if r not in applied]),
    )
    _decide(found)
    return found


def _decide(found: Readiness) -> None:
    """Fill ``missing``, ``statements`` and ``server_changes`` from what was read."""
    for ext in found.extensions:
        if ext.installed is not None:
            if version_tuple(ext.installed) < MIN_PGVECTOR and ext.name == "vector":
                found.missing.append(f"pgvector {ext.installed} is installed; 0.8.0 or newer is needed")
                found.statements.append("ALTER EXTENSION vector UPDATE;")
            continue
        if ext.available is None:
            found.missing.append(f"extension {ext.name} is not offered by this server")
            found.server_changes.append(
                f"install {ext.name} on the server (e.g. the postgresql-<major>-pgvector package for vector) "
                "or enable it in your managed service's console"
            )
            continue
        may_create = found.superuser or (ext.trusted and found.create_on_database)
        if not may_create:
            why = "only a superuser may create it" if not ext.trusted else "the role lacks CREATE on the database"
            found.missing.append(f"extension {ext.name} is not installed and {found.role} cannot create it ({why})")
            found.statements.append(f"CREATE EXTENSION IF NOT EXISTS {ext.name};")
    if found.pending_revisions and not found.create_on_schema:
        schema = found.schema or "public"
        found.missing.append(
            f"{found.role} cannot create tables in schema {schema} ({found.pending_revisions} revisions to apply)"
        )
        found.statements.append(f"GRANT USAGE, CREATE ON SCHEMA {quote_ident(schema)} TO {quote_ident(found.role)};")


def statements_for_dba(found: Readiness) -> str:
    """The statements a superuser runs, connected to this database, so ``migrate`` succeeds as this role."""
    lines = [f"-- as a superuser, connected to database {quote_ident(found.database)}:"]
    lines.extend(found.statements)
    lines.extend(f"-- on the server: {change}" for change in found.server_changes)
    return "\n".join(lines)


def format_readiness(found: Readiness) -> str:
    """The report ``context-engine check-database`` prints."""
    lines = [
        f"PostgreSQL {found.server_version}, database {found.database}, role {found.role}"
        + (" (superuser)" if found.superuser else ""),
        f"  CREATE on the database: {'yes' if found.create_on_database else 'no'}; "
        f"CREATE on schema {found.schema or '(none on the search_path)'}: {'yes' if found.create_on_schema else 'no'}",
    ]
    for ext in found.extensions:
        if ext.installed is not None:
            state = f"installed ({ext.installed})"
        elif ext.available is None:
            state = "not offered by this server"
        else:
            state = f"not installed (the server offers {ext.available}{', trusted' if ext.trusted else ''})"
        lines.append(f"  extension {ext.name}: {state}")
    lines.append(f"  schema revisions to apply: {found.pending_revisions}")
    if found.ready:
        lines.append("ready: `context-engine migrate` can run as this role")
    else:
        lines.append("missing:")
        lines.extend(f"  - {item}" for item in found.missing)
        lines.append("")
        lines.append(statements_for_dba(found))
    return "\n".join(lines)

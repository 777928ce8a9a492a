"""Checks that the server's extensions will work at query time, made before anything is migrated.

Managed Postgres services differ in two ways that otherwise surface only when a search runs:

- the installed (or installable) pgvector may predate iterative index scans (0.8.0), which the
  vector leg's planner sets per query (``hnsw.iterative_scan``);
- an extension may already live in a schema of its own (Supabase uses ``extensions``).
  ``CREATE EXTENSION IF NOT EXISTS`` then succeeds without doing anything, while ``vector``,
  ``word_similarity``, ``<%`` and ``unaccent`` (whose dictionary is also looked up on the search
  path) resolve only if that schema is on the role's ``search_path``.

Both are refused here with the statement that fixes them, instead of a failure at query time.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from context_engine.errors import ContextEngineError

REQUIRED = ("vector", "pg_trgm", "unaccent")
#: iterative index scans (``hnsw.iterative_scan``) arrived in pgvector 0.8.0
MIN_PGVECTOR = (0, 8, 0)


class DatabaseUnsuitable(ContextEngineError):
    """The server lacks something the search SQL needs; ``code`` says which check failed."""

    code = "database_unsuitable"
    status = 500


def version_tuple(version: str) -> tuple[int, ...]:
    """``"0.8.1"`` -> ``(0, 8, 1)``; a non-numeric part ends the tuple."""
    parts: list[int] = []
    for part in version.split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


async def check_extensions(conn: AsyncConnection) -> None:
    """Refuse a server where a required extension is missing, too old or off the search path."""
    rows = (
        await conn.execute(
            text(
                "SELECT a.name, a.default_version, e.extversion, n.nspname, "
                "       n.nspname = ANY (current_schemas(false)) AS on_path "
                "FROM pg_available_extensions a "
                "LEFT JOIN pg_extension e ON e.extname = a.name "
                "LEFT JOIN pg_namespace n ON n.oid = e.extnamespace "
                "WHERE a.name = ANY (:names)"
            ),
            {"names": list(REQUIRED)},
        )
    ).all()
    found = {row.name: row for row in rows}
    missing = [name for name in REQUIRED if name not in found]
    if missing:
        raise DatabaseUnsuitable(
            f"the PostgreSQL server does not offer the extension(s) {', '.join(missing)} "
            "(absent from pg_available_extensions); install them on the server, or enable them in your "
            "managed service's console, then run migrate again",
            code="extension_unavailable",
            details={"extensions": missing},
        )
    vector = found["vector"]
    version = vector.extversion or vector.default_version
    if version_tuple(version) < MIN_PGVECTOR:
        wanted = ".".join(str(p) for p in MIN_PGVECTOR)
        fix = "ALTER EXTENSION vector UPDATE" if vector.extversion else "upgrade pgvector on the server"
        raise DatabaseUnsuitable(
            f"pgvector {version} is {'installed' if vector.extversion else 'what this server offers'}; "
            f"context-engine needs {wanted} or newer (iterative index scans, hnsw.iterative_scan). "
            f"Run {fix}, then migrate again",
            code="pgvector_too_old",
            details={"version": version, "required": wanted},
        )
    off_path = sorted((row.name, row.nspname) for row in rows if row.extversion and not row.on_path)
    if off_path:
        schemas = sorted({schema for _, schema in off_path})
        where = ", ".join(f"{name} in schema {schema}" for name, schema in off_path)
        path = await conn.scalar(text("SHOW search_path"))
        new_path = ", ".join([path, *schemas]) if path else ", ".join(schemas)
        raise DatabaseUnsuitable(
            f"installed extensions live outside this role's search_path ({path}): {where}. Their types, functions "
            "and operators (vector, word_similarity, <%, unaccent) would not resolve when searching. Add the "
            f"schema to the search path, e.g. ALTER ROLE CURRENT_USER SET search_path = {new_path} (or ALTER "
            "DATABASE ... SET search_path), reconnect, and run migrate again",
            code="extension_not_on_search_path",
            details={"extensions": [name for name, _ in off_path], "schemas": schemas},
        )

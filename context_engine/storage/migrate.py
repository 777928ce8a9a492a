"""Ordered, idempotent schema revisions with a locked embedding width.

Each revision file runs in its own transaction, so a failure part-way leaves the earlier
revisions applied and nothing of the failed one; running ``migrate`` again is the repair.
A session-level advisory lock serialises concurrent runs (two processes starting at once).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.errors import ConfigError, DimensionMismatch

_LOCK_ID = 0x43455F4D  # "CE_M"
_TEXT_CONFIGS = {"english", "simple"}


def migrations_dir() -> Path:
    """The SQL files: packaged inside the wheel, or the repository's ``migrations/``."""
    packaged = Path(__file__).resolve().parent.parent / "_migrations"
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[2] / "migrations"
    if checkout.is_dir():
        return checkout
    raise ConfigError("migration files not found (neither packaged nor in a checkout)")


def revision_files() -> list[Path]:
    return sorted(p for p in migrations_dir().glob("[0-9][0-9][0-9][0-9]_*.sql"))


@dataclass
class MigrationReport:
    applied: list[str] = field(default_factory=list)
    dim: int = 0
    text_search_config: str = "english"


async def _meta(conn, key: str) -> str | None:  # type: ignore[no-untyped-def]
    exists = await conn.scalar(text("SELECT to_regclass('ce_meta') IS NOT NULL"))
    if not exists:
        return None
    return await conn.scalar(text("SELECT value FROM ce_meta WHERE key = :k"), {"k": key})


async def migrate(engine: AsyncEngine, *, dim: int, text_search_config: str = "english") -> MigrationReport:
    """Bring the schema up to date; refuse a ``dim`` other than the one locked on first run."""
    if not isinstance(dim, int) or isinstance(dim, bool) or not 1 <= dim <= 16000:
        raise ConfigError(f"--dim must be an integer between 1 and 16000, got {dim!r}")
    if text_search_config not in _TEXT_CONFIGS:
        raise ConfigError(f"text search configuration must be one of {sorted(_TEXT_CONFIGS)}")
    report = MigrationReport(dim=dim, text_search_config=text_search_config)
    async with engine.connect() as conn:
        await conn.execute(text("SELECT pg_advisory_lock(:id)"), {"id": _LOCK_ID})
        await conn.commit()
        try:
            locked_dim = await _meta(conn, "embedding_dim")
            if locked_dim is not None and int(locked_dim) != dim:
                raise DimensionMismatch(
                    f"this database is locked to embedding dimension {locked_dim}; "
                    f"refusing dimension {dim}. Use a model of width {locked_dim}, "
                    "or migrate a fresh database."
                )
            locked_cfg = await _meta(conn, "text_search_config")
            if locked_cfg is not None:
                report.text_search_config = locked_cfg
            await conn.execute(
                text(
                    "CREATE TABLE IF NOT EXISTS ce_schema_migrations ("
                    " id text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
                )
            )
            await conn.commit()
            done = set((await conn.execute(text("SELECT id FROM ce_schema_migrations"))).scalars())
            await conn.commit()
            for path in revision_files():
                if path.stem in done:
                    continue
                sql = path.read_text(encoding="utf-8").replace("{dim}", str(dim))
                async with conn.begin():
                    for statement in _split(sql):
                        await conn.exec_driver_sql(statement)
                    await conn.execute(text("INSERT INTO ce_schema_migrations (id) VALUES (:id)"), {"id": path.stem})
                    await conn.execute(
                        text(
                            "INSERT INTO ce_meta (key, value) VALUES ('embedding_dim', :d), "
                            "('text_search_config', :c) ON CONFLICT (key) DO NOTHING"
                        ),
                        {"d": str(dim), "c": report.text_search_config},
                    )
                report.applied.append(path.stem)
        finally:
            await conn.execute(text("SELECT pg_advisory_unlock(:id)"), {"id": _LOCK_ID})
            await conn.commit()
    return report


def _split(sql: str) -> list[str]:
    """Split a revision file into statements (no procedural bodies in our files)."""
    without_comments = re.sub(r"--[^\n]*", "", sql)
    return [s.strip() for s in without_comments.split(";") if s.strip()]

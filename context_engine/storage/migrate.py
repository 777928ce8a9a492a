"""Ordered, idempotent schema revisions with a locked embedding width.

A revision file's statements run in transactions, except ``... CONCURRENTLY`` statements, which
Postgres refuses inside one: every index added after the initial schema is written as
``CREATE INDEX CONCURRENTLY`` so that ``migrate`` never locks writers out
(:mod:`context_engine.storage.concurrent_index`). A file is recorded as applied only once all of
its steps succeeded, and every statement in it is idempotent, so a failure part-way leaves the
earlier revisions applied and running ``migrate`` again is the repair. A file without concurrent
statements is still exactly one transaction.

A session-level advisory lock serialises concurrent runs. It is taken by polling
``pg_try_advisory_lock`` outside any transaction: a second run blocked inside
``pg_advisory_lock`` would hold a snapshot, and the first run's concurrent build waits for every
older snapshot to go away, which would deadlock the two.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine.interfaces import IsolationLevel
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from context_engine.errors import ConfigError, ContextEngineError, DimensionMismatch
from context_engine.storage import concurrent_index
from context_engine.storage.concurrent_index import Announce
from context_engine.storage.extensions import DatabaseUnsuitable, check_extensions
from context_engine.storage.readiness import check_readiness, statements_for_dba

_LOCK_ID = 0x43455F4D  # "CE_M"
_LOCK_POLL_SECONDS = 0.2
_TEXT_CONFIGS = {"english", "simple"}
#: revisions applied only when asked for, by the name of the flag that asks (``migrate(graph=True)``,
#: ``migrate(trigram=True)``); once applied they are repaired like any other
OPTIONAL_REVISIONS = {
    "0011_graph": "graph",
    "0016_trigram_index": "trigram",
    "0026_hnsw_halfvec": "halfvec",
    "0027_document_fts_indexes": "document_fts",
}
#: optional revisions that a run not asking for them undoes once applied, with the file in ``undo/``
#: of the same name (a setting that chooses between two schemas, not one that only adds to it)
UNDO_DIR = "undo"
REVERSIBLE = {"0026_hnsw_halfvec"}


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


#: the folder of the Citus overlay: revisions applied after the numbered ones on a Citus coordinator,
#: recorded as ``citus/<stem>``
CITUS_DIR = "citus"


def citus_files() -> list[Path]:
    return sorted(p for p in (migrations_dir() / CITUS_DIR).glob("[0-9][0-9][0-9][0-9]_*.sql"))


async def citus_installed(conn: AsyncConnection) -> bool:
    """Whether this database is a Citus coordinator's (the citus extension is installed in it)."""
    return bool(await conn.scalar(text("SELECT count(*) FROM pg_extension WHERE extname = 'citus'")))


class MigrationFailed(ContextEngineError):
    """A revision's statement failed; the revisions before it stay applied and re-running repeats it."""

    code = "migration_failed"
    status = 500


@dataclass
class MigrationReport:
    applied: list[str] = field(default_factory=list)
    dim: int = 0
    text_search_config: str = "english"
    #: indexes built (or rebuilt after an interrupted build) by this run, in order
    indexes_built: list[str] = field(default_factory=list)
    #: the database is a Citus coordinator's, and the schema is the distributed one
    citus: bool = False
    #: reversible revisions this run undid (their setting is off), in order
    undone: list[str] = field(default_factory=list)


def print_to_stderr(line: str) -> None:
    """The default announcer: one line per index build, so a long wait reads as a wait."""
    print(line, file=sys.stderr, flush=True)


async def _meta(conn: AsyncConnection, key: str) -> str | None:
    exists = await conn.scalar(text("SELECT to_regclass('ce_meta') IS NOT NULL"))
    if not exists:
        return None
    return await conn.scalar(text("SELECT value FROM ce_meta WHERE key = :k"), {"k": key})


async def migrate(
    engine: AsyncEngine,
    *,
    dim: int,
    text_search_config: str = "english",
    announce: Announce | None = None,
    graph: bool = False,
    trigram: bool = False,
    halfvec: bool = True,
    document_fts: bool = False,
    citus: bool | None = None,
) -> MigrationReport:
    """Bring the schema up to date; refuse a ``dim`` other than the one locked on first run.

    ``announce`` receives one line per index built (default: stderr). ``graph=True`` also applies
    the graph tables and ``trigram=True`` the trigram leg's index (:data:`OPTIONAL_REVISIONS`), which
    a plain run leaves out; ``document_fts=True`` the document full-text leg's two chunk indexes
    (built only for that leg, so a store that does not run it keeps its writes as cheap).
    ``halfvec=True`` (the default, as ``storage.hnsw_halfvec``) replaces the float4 HNSW index by one
    over ``embedding::halfvec``; a run with ``halfvec=False`` undoes that (:data:`REVERSIBLE`), so the
    index always matches the setting.

    On a Citus coordinator (``citus=None``: whenever the citus extension is installed in the
    database; ``citus=True`` refuses a database without it) the files of ``migrations/citus/``
    follow the numbered ones and distribute the schema (docs/scaling.md).
    """
    flags = (("graph", graph), ("trigram", trigram), ("halfvec", halfvec), ("document_fts", document_fts))
    requested = {name for name, asked in flags if asked}
    if not isinstance(dim, int) or isinstance(dim, bool) or not 1 <= dim <= 16000:
        raise ConfigError(f"--dim must be an integer between 1 and 16000, got {dim!r}")
    if text_search_config not in _TEXT_CONFIGS:
        raise ConfigError(f"text search configuration must be one of {sorted(_TEXT_CONFIGS)}")
    report = MigrationReport(dim=dim, text_search_config=text_search_config)
    say = announce or print_to_stderr
    async with engine.connect() as conn:
        default_level = conn.default_isolation_level
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await _lock(conn)
        try:
            await check_extensions(conn)
            on_citus = await citus_installed(conn)
            if citus and not on_citus:
                raise DatabaseUnsuitable(
                    "migrate --citus needs the citus extension in this database (CREATE EXTENSION citus, "
                    "on a coordinator whose workers are added)",
                    code="citus_missing",
                )
            await require_readiness(conn, wanted_revisions(requested))
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
            done = set((await conn.execute(text("SELECT id FROM ce_schema_migrations"))).scalars())
            runner = _Runner(conn, default_level, say, report)
            for path in revision_files():
                steps = _steps(path.read_text(encoding="utf-8").replace("{dim}", str(dim)))
                if path.stem in done and path.stem in REVERSIBLE and OPTIONAL_REVISIONS[path.stem] not in requested:
                    undo = path.parent / UNDO_DIR / path.name
                    await runner.undo(path.stem, _steps(undo.read_text(encoding="utf-8").replace("{dim}", str(dim))))
                elif path.stem in done:
                    await runner.repair(steps)
                elif path.stem in OPTIONAL_REVISIONS and OPTIONAL_REVISIONS[path.stem] not in requested:
                    continue  # an optional revision nobody asked for
                else:
                    await runner.apply(path.stem, steps)
            if on_citus:
                for path in citus_files():
                    revision = f"{CITUS_DIR}/{path.stem}"
                    steps = _steps(path.read_text(encoding="utf-8").replace("{dim}", str(dim)))
                    if revision in done:
                        await runner.repair(steps)
                    else:
                        await runner.apply(revision, steps)
            report.citus = on_citus
        finally:
            await conn.execute(text("SELECT pg_advisory_unlock(:id)"), {"id": _LOCK_ID})
    return report


def wanted_revisions(requested: set[str]) -> list[str]:
    """The revisions a run applies: every file but the optional ones nobody asked for."""
    return [
        p.stem
        for p in revision_files()
        if p.stem not in OPTIONAL_REVISIONS or OPTIONAL_REVISIONS[p.stem] in requested
    ]


async def require_readiness(conn: AsyncConnection, revisions: list[str]) -> None:
    """Refuse, before any statement runs, a role that lacks what the revisions need, with the statements
    a superuser runs to grant it (instead of ``permission denied to create extension "vector"`` part-way)."""
    found = await check_readiness(conn, revisions)
    if found.ready:
        return
    raise DatabaseUnsuitable(
        f"migrate cannot run as role {found.role}: {'; '.join(found.missing)}. "
        f"Ask a superuser to run these, then run migrate again:\n{statements_for_dba(found)}",
        code="database_privileges_missing",
        details={"missing": found.missing, "statements": found.statements},
    )


async def _lock(conn: AsyncConnection) -> None:
    """Take the session-level migration lock, waiting without holding a snapshot."""
    while True:
        if await conn.scalar(text("SELECT pg_try_advisory_lock(:id)"), {"id": _LOCK_ID}):
            return
        await asyncio.sleep(_LOCK_POLL_SECONDS)


@dataclass
class _Step:
    """Consecutive statements that share one transaction, or one statement that must run alone."""

    statements: list[str]
    concurrent: bool


@dataclass
class _Runner:
    conn: AsyncConnection
    transaction_level: IsolationLevel | None
    announce: Announce
    report: MigrationReport

    async def apply(self, revision: str, steps: list[_Step]) -> None:
        """Run every step, then record the revision (in the last step's transaction when it has one)."""
        last_in_transaction = bool(steps) and not steps[-1].concurrent
        for number, step in enumerate(steps, start=1):
            if step.concurrent:
                await self._concurrent(step.statements[0])
                continue
            try:
                async with self._transaction():
                    for statement in step.statements:
                        await self.conn.exec_driver_sql(statement)
                    if number == len(steps):
                        await self._record(revision)
            except DBAPIError as exc:
                raise MigrationFailed(
                    f"revision {revision} failed ({concurrent_index.server_reason(exc)}); the revisions before it "
                    "are applied and it is not recorded: fix the cause and run migrate again",
                    details={"revision": revision},
                ) from exc
        if not last_in_transaction:
            async with self._transaction():
                await self._record(revision)
        self.report.applied.append(revision)

    async def undo(self, revision: str, steps: list[_Step]) -> None:
        """Run a revision's undo file, then forget the revision (so asking for it again applies it)."""
        for step in steps:
            if step.concurrent:
                await self._concurrent(step.statements[0])
                continue
            async with self._transaction():
                for statement in step.statements:
                    await self.conn.exec_driver_sql(statement)
        async with self._transaction():
            await self.conn.execute(text("DELETE FROM ce_schema_migrations WHERE id = :id"), {"id": revision})
        self.report.undone.append(revision)

    async def repair(self, steps: list[_Step]) -> None:
        """Rebuild any index of an applied revision that an interrupted build left invalid."""
        for step in steps:
            built = concurrent_index.parse_build(step.statements[0]) if step.concurrent else None
            if built is not None and await concurrent_index.index_validity(self.conn, built.index) is False:
                if await concurrent_index.build(self.conn, built, self.announce):
                    self.report.indexes_built.append(built.index)

    async def _concurrent(self, statement: str) -> None:
        built = concurrent_index.parse_build(statement)
        if built is None:  # DROP INDEX / REINDEX ... CONCURRENTLY: idempotent as written
            await self.conn.exec_driver_sql(statement)
        elif await concurrent_index.build(self.conn, built, self.announce):
            self.report.indexes_built.append(built.index)

    async def _record(self, revision: str) -> None:
        await self.conn.execute(text("INSERT INTO ce_schema_migrations (id) VALUES (:id)"), {"id": revision})
        await self.conn.execute(
            text(
                "INSERT INTO ce_meta (key, value) VALUES ('embedding_dim', :d), "
                "('text_search_config', :c) ON CONFLICT (key) DO NOTHING"
            ),
            {"d": str(self.report.dim), "c": self.report.text_search_config},
        )

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[None]:
        """One real transaction on the migration's connection, which is otherwise in autocommit."""
        await self.conn.commit()  # ends SQLAlchemy's autobegun (and, in autocommit, empty) transaction
        await self.conn.execution_options(isolation_level=self.transaction_level)
        try:
            async with self.conn.begin():
                yield
        finally:
            await self.conn.execution_options(isolation_level="AUTOCOMMIT")


def _steps(sql: str) -> list[_Step]:
    """Group a revision's statements: runs of ordinary ones share a transaction, concurrent ones stand alone."""
    steps: list[_Step] = []
    for statement in _split(sql):
        if concurrent_index.is_concurrent(statement):
            steps.append(_Step([statement], concurrent=True))
        elif steps and not steps[-1].concurrent:
            steps[-1].statements.append(statement)
        else:
            steps.append(_Step([statement], concurrent=False))
    return steps


def _split(sql: str) -> list[str]:
    """Split a revision file into statements (no procedural bodies in our files)."""
    without_comments = re.sub(r"--[^\n]*", "", sql)
    return [s.strip() for s in without_comments.split(";") if s.strip()]

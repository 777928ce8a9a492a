"""Shared fixtures: one real embedded PostgreSQL per test session, a fresh database per test."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import psycopg
import pytest
from psycopg import sql
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from context_engine import TRUSTED, ContextEngine, ContextEngineConfig
from context_engine.storage import embedded
from context_engine.storage.database import Database, to_driver_url
from context_engine.storage.migrate import migrate
from tests import scratch

scratch.choose()  # before anything here makes a temporary file

# A shell without job control starts a background job (`make test &`, a second copy of the suite)
# with SIGINT ignored, and an ignored signal stays ignored in every process the tests then start:
# the tests that press Ctrl-C on a host would see it do nothing. A terminal's foreground job has
# the default, so the tests' processes get it back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def server_dir() -> Path:
    """A fresh directory for an embedded server, outside pytest's tmp root.

    pytest resets its per-user tmp root to mode 0700 whenever a session starts, which would
    lock the server's own system user out of a data directory kept there.
    """
    return Path(tempfile.mkdtemp(prefix="ce-test-"))


def copy_data_directory(pgdata: Path, base: Path) -> None:
    """A copy of ``pgdata`` (a stopped server's data directory) as ``base/pgdata``, modes and owners kept
    (the server's log is left behind).

    An embedded server run by root runs as the wheel's own system user, which must own its files.
    """
    target = base / "pgdata"
    shutil.copytree(pgdata, target, symlinks=True, ignore=lambda _dir, _names: ["log"] if _dir == str(pgdata) else [])
    if os.geteuid() == 0:
        for directory, _dirs, files in os.walk(target):
            for path in (directory, *(os.path.join(directory, name) for name in files)):
                source = pgdata / os.path.relpath(path, target)
                owner = source.lstat()
                os.lchown(path, owner.st_uid, owner.st_gid)


@pytest.fixture(scope="session")
def stopped_pgdata() -> Iterator[Path]:
    """A data directory an embedded server was started in once and stopped (its holder released it).

    Tests of the embedded server's processes copy it (:func:`copy_data_directory`) instead of each
    running initdb, which flushes every file it writes (seconds on a machine whose disk is busy).
    A copy is what a host finds on its second start: the same initialised files, nothing running,
    no holder listed. The first start in an empty directory is still the session server's, and
    each file's ``fresh_base`` tests'.
    """
    base = server_dir()
    pgdata, _url = embedded.acquire(base)
    embedded.release(pgdata)
    try:
        yield pgdata
    finally:
        embedded.remove(base)


@pytest.fixture(scope="session")
def migrated_pgdata() -> Iterator[Path]:
    """As :func:`stopped_pgdata`, after an engine on the default settings migrated its database.

    What an example server finds on its second start: its own first start migrated the schema.
    """
    base = server_dir()

    async def first_start() -> None:
        engine = ContextEngine(ContextEngineConfig(storage={"data_dir": str(base)}))  # type: ignore[arg-type]
        try:
            await engine.stats(principals=TRUSTED)
        finally:
            await engine.aclose()

    # on a thread of its own: a fixture may be set up while the session's event loop runs
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, first_start()).result()
    pgdata = base / "pgdata"
    assert embedded.holders(pgdata) == [] and embedded.running_postmaster(pgdata) is None
    try:
        yield pgdata
    finally:
        embedded.remove(base)


#: Why: the session's server holds throwaway databases, so it need not survive a crash of the machine.
#: Without a flush to disk at each commit (and each database created or dropped) a test's writes wait
#: on no disk shared with everything else the machine runs. A killed postmaster still recovers: the
#: operating system keeps what was written. Set with ALTER SYSTEM, so the server's own settings
#: (embedded.SERVER_SETTINGS, which tests/test_embedded_settings.py checks) are untouched.
THROWAWAY_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


@pytest.fixture(scope="session")
def pg_base_url() -> Iterator[str]:
    """The embedded server's URL (database ``postgres``), started once for the session.

    ``CE_TEST_DATABASE_URL`` runs the suite against that server instead (``make test-citus`` points it
    at a Citus coordinator whose ``template1`` makes every new database a Citus one).
    """
    given = os.environ.get("CE_TEST_DATABASE_URL")
    if given:
        yield given
        return
    base = server_dir()
    _pgdata, url = embedded.acquire(base)
    with psycopg.connect(url, autocommit=True) as conn:
        for name, value in THROWAWAY_SETTINGS.items():
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))
        conn.execute("SELECT pg_reload_conf()")
    try:
        yield url
    finally:
        embedded.remove(base)  # stops the server whoever holds it, then deletes its directory


def _with_database(base_url: str, name: str) -> str:
    head, _, query = base_url.partition("?")
    root = head.rsplit("/", 1)[0]
    return f"{root}/{name}" + (f"?{query}" if query else "")


#: the local model's width: the schema the default engine migrates to
DEFAULT_DIM = 384


class Schema(NamedTuple):
    """What one ``migrate`` run is asked for: the width, the text-search configuration, the optional revisions."""

    dim: int = DEFAULT_DIM
    text_search_config: str = "english"
    trigram: bool = False
    graph: bool = False
    #: ``storage.hnsw_halfvec``'s default, so the engine's own migrate finds nothing to swap
    halfvec: bool = ContextEngineConfig().storage.hnsw_halfvec


class Templates:
    """Migrated template databases on the session's server, one per :class:`Schema`, made on first use.

    Migrating a fresh database runs every revision (seconds under load); copying a migrated one with
    ``CREATE DATABASE ... TEMPLATE`` is a file copy. The engine's own migrate still runs on the copy
    (auto_migrate), finds every revision applied and checks the width it is locked to, as it does on
    any migrated database; the runs from an empty database are tests/test_migrate*.py's.
    """

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self._names: dict[Schema, str] = {}
        self._lock = threading.Lock()

    def name(self, schema: Schema) -> str:
        with self._lock:
            if schema not in self._names:
                self._names[schema] = self._make(schema)
            return self._names[schema]

    def _make(self, schema: Schema) -> str:
        name = f"tpl_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.base_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        config = ContextEngineConfig(database_url=_with_database(self.base_url, name))

        async def run() -> None:
            db = Database(config)
            try:
                await migrate(await db.engine(), announce=lambda _line: None, **schema._asdict())
            finally:
                await db.aclose()

        # on a thread of its own: a fixture may be set up while the session's event loop runs
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, run()).result()
        with psycopg.connect(self.base_url, autocommit=True) as conn:
            # no connections (autovacuum's included): a copy needs the template to itself
            conn.execute(sql.SQL("ALTER DATABASE {} WITH IS_TEMPLATE true ALLOW_CONNECTIONS false").format(
                sql.Identifier(name)))
        return name

    def copy(self, schema: Schema, name: str) -> None:
        """Create database ``name`` as a copy of the migrated template for ``schema``."""
        statement = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(self.name(schema)))
        give_up = time.monotonic() + 600
        with psycopg.connect(self.base_url, autocommit=True) as conn:
            while True:
                try:
                    conn.execute(statement)
                    return
                except psycopg.errors.ObjectInUse:  # a backend still leaving the template: wait it out
                    if time.monotonic() > give_up:
                        raise
                    time.sleep(0.05)


@pytest.fixture(scope="session")
def schema_templates(pg_base_url: str) -> Templates:
    """The session's migrated template databases (see :class:`Templates`)."""
    return Templates(pg_base_url)


@pytest.fixture
def migrated_schema() -> Schema:
    """The schema a test's ``database_url`` is migrated to before the test: the default engine's.

    Requesting it (directly or through a fixture such as :func:`engine`) makes ``database_url`` a copy
    of a migrated template instead of an empty database; a module overrides it for another width.
    The marker ``@pytest.mark.migrated(dim=8, ...)`` does the same for the tests it marks.
    """
    return Schema()


def _wanted_schema(request: pytest.FixtureRequest) -> Schema | None:
    marker = request.node.get_closest_marker("migrated")
    if marker is not None:
        return Schema(*marker.args, **marker.kwargs)  # the marker's arguments are Schema's
    if "migrated_schema" in request.fixturenames:
        schema = request.getfixturevalue("migrated_schema")
        assert isinstance(schema, Schema)
        return schema
    return None


@pytest.fixture
def database_url(pg_base_url: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A new database for one test (dropped afterwards): empty, or migrated when the test asks
    (``migrated_schema`` in its fixtures, or the ``migrated`` marker)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    # a server of the caller's own (CE_TEST_DATABASE_URL, e.g. a Citus coordinator) gets empty databases
    # the engine migrates itself: a template copy would not copy a cluster's shards
    schema = None if os.environ.get("CE_TEST_DATABASE_URL") else _wanted_schema(request)
    if schema is None:
        with psycopg.connect(pg_base_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    else:
        request.getfixturevalue("schema_templates").copy(schema, name)
    try:
        yield _with_database(pg_base_url, name)
    finally:
        with psycopg.connect(pg_base_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def make_config(database_url: str, **overrides: object) -> ContextEngineConfig:
    data: dict[str, object] = {"database_url": database_url, "storage": {"auto_migrate": True}}
    data.update(overrides)
    return ContextEngineConfig(**data)  # type: ignore[arg-type]


@pytest.fixture
async def own_pool(database_url: str) -> AsyncIterator[AsyncEngine]:
    """A pool of the test's own on its database, for calls below the engine (a leg, a migration, an oracle)."""
    db = create_async_engine(to_driver_url(database_url), pool_size=2)
    try:
        yield db
    finally:
        await db.dispose()


@pytest.fixture
async def engine(database_url: str, migrated_schema: Schema) -> AsyncIterator[ContextEngine]:
    """An engine on a fresh database (a copy of the migrated template) with the default local embedding model."""
    async with ContextEngine(make_config(database_url)) as eng:
        yield eng


#: modules whose tests start servers or processes of their own (a standalone PostgreSQL, an example app,
#: the compute worker, a CLI run): each takes seconds, so ``make test-fast`` leaves them to ``make test``
SLOW_MODULES = frozenset(
    {
        "test_cli",
        "test_compute_action",
        "test_compute_sandbox",
        "test_embedded_lifecycle",
        "test_embedded_settings",
        "test_eval_lifecycle",
        "test_example_shutdown",
        "test_faults",
        "test_graph_entities",
        "test_local_embedder",
        "test_managed_postgres",
        "test_mcp_app",
        "test_migrate",
        "test_own_postgres",
        "test_read_replicas",
        "test_runtime_imports",
        "test_tokens",
        "test_tools_mcp",
    }
)


#: the modules that ran 15 s or longer in a whole-suite run (2026-12-03, 15-75 s), longest first. The
#: workers take whole modules in collection order (``--dist loadfile --no-loadscope-reorder``), so
#: these go first and the short ones fill in after them: left to the end, one 24 s module kept one
#: worker busy while the other sat idle. A stale entry costs only that balance.
LONG_MODULES = (
    "test_example_shutdown",
    "test_concurrency",
    "test_attack_schemathesis",
    "test_embedded_lifecycle",
    "test_compute_action",
    "test_faults",
    "test_cli",
    "test_graph_engine",
    "test_own_postgres",
    "test_revisions_property",
    "test_reference_snippets",
    "test_bulk_ingest",
    "test_integration_langchain",
    "test_tools_db",
    "test_acl_planner",
    "test_planner_slices",
    "test_local_embedder",
    "test_write_turns",
    "test_tools_mcp_oauth",
    "test_vision",
    "test_read_replicas",
    "test_tokens",
    "test_examples_frameworks",
    "test_conformance",
    "test_migrate",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that reaches the session's PostgreSQL (through any fixture) ``database``,
    and every test of :data:`SLOW_MODULES` ``slow``; put the :data:`LONG_MODULES` first.

    ``make test-fast`` deselects both for the edit-test loop; ``make test`` runs everything.
    """
    first = {name: rank for rank, name in enumerate(LONG_MODULES)}
    items.sort(key=lambda item: first.get(item.path.stem, len(first)))  # stable: the rest keep their order
    for item in items:
        if "pg_base_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.database)
        if item.path.stem in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)

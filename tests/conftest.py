"""Shared fixtures: one real embedded PostgreSQL per test session, a fresh database per test."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest

from context_engine import ContextEngine, ContextEngineConfig
from context_engine.storage import embedded


def server_dir() -> Path:
    """A fresh directory for an embedded server, outside pytest's tmp root.

    pytest resets its per-user tmp root to mode 0700 whenever a session starts, which would
    lock the server's own system user out of a data directory kept there.
    """
    return Path(tempfile.mkdtemp(prefix="ce-test-"))


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
    try:
        yield url
    finally:
        embedded.remove(base)  # stops the server whoever holds it, then deletes its directory


def _with_database(base_url: str, name: str) -> str:
    head, _, query = base_url.partition("?")
    root = head.rsplit("/", 1)[0]
    return f"{root}/{name}" + (f"?{query}" if query else "")


@pytest.fixture
def database_url(pg_base_url: str) -> Iterator[str]:
    """A new, empty database for one test (dropped afterwards)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_base_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_database(pg_base_url, name)
    finally:
        with psycopg.connect(pg_base_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def make_config(database_url: str, **overrides: object) -> ContextEngineConfig:
    data: dict[str, object] = {"database_url": database_url, "storage": {"auto_migrate": True}}
    data.update(overrides)
    return ContextEngineConfig(**data)  # type: ignore[arg-type]


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[ContextEngine]:
    """An engine on a fresh database with the default local embedding model."""
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
        "test_graph_extract",
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that reaches the session's PostgreSQL (through any fixture) ``database``,
    and every test of :data:`SLOW_MODULES` ``slow``.

    ``make test-fast`` deselects both for the edit-test loop; ``make test`` runs everything.
    """
    for item in items:
        if "pg_base_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.database)
        if item.path.stem in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)

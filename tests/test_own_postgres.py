"""Your own PostgreSQL: a standalone server, a database owned by a role that is not a superuser.

``check-database`` says what that role lacks and prints the statements for a DBA; ``migrate`` refuses
with the same statements before running anything; once a superuser ran them, migrate, ingest and
search work as the owner. Connection failures say what happened and where, never the password.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from context_engine import TRUSTED, ContextEngine, ContextEngineConfig
from context_engine.errors import ConfigError, DatabaseRefused, StorageUnavailable
from context_engine.storage.extensions import DatabaseUnsuitable
from tests.standalone_pg import Standalone, free_port, standalone_server
from tests.waiting import HANG_GUARD

ROOT = Path(__file__).resolve().parents[1]
OWNER_PASSWORD = "owner-pw-7f3a"


@pytest.fixture(scope="module")
def server() -> Iterator[Standalone]:
    with standalone_server() as started:
        yield started


@pytest.fixture
def owned(server: Standalone) -> Iterator[str]:
    """A fresh database owned by a fresh non-superuser role; the role's URL."""
    tag = uuid.uuid4().hex[:10]
    role, database = f"owner_{tag}", f"app_{tag}"
    server.admin(f"CREATE ROLE {role} LOGIN PASSWORD '{OWNER_PASSWORD}'")
    server.admin(f"CREATE DATABASE {database} OWNER {role}")
    try:
        yield server.url(user=role, password=OWNER_PASSWORD, database=database)
    finally:
        server.admin(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        server.admin(f"DROP ROLE IF EXISTS {role}")


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CE_")}
    return subprocess.run(
        [sys.executable, "-m", "context_engine.cli", *args],
        cwd=ROOT,
        env={**clean, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
    )


def _database(url: str) -> str:
    return url.rsplit("/", 1)[1]


def test_check_database_names_what_the_owner_lacks_and_prints_the_statements(owned: str) -> None:
    run = cli("check-database", "--database-url", owned)
    assert run.returncode == 1, run.stderr
    out = run.stdout
    assert "extension vector: not installed" in out
    assert "only a superuser may create it" in out
    assert "CREATE EXTENSION IF NOT EXISTS vector;" in out
    # the owner may create the trusted two itself: no statement asks a DBA for them
    assert "CREATE EXTENSION IF NOT EXISTS pg_trgm;" not in out
    assert "CREATE EXTENSION IF NOT EXISTS unaccent;" not in out
    assert f'connected to database "{_database(owned)}"' in out
    assert OWNER_PASSWORD not in out + run.stderr


def test_migrate_as_the_owner_refuses_with_the_statements_then_works_once_they_ran(
    server: Standalone, owned: str
) -> None:
    run = cli("migrate", "--database-url", owned)
    assert run.returncode == 1
    assert "Traceback" not in run.stderr and "permission denied" not in run.stderr
    assert run.stderr.startswith("error: migrate cannot run as role owner_")
    assert "CREATE EXTENSION IF NOT EXISTS vector;" in run.stderr
    assert OWNER_PASSWORD not in run.stderr
    # nothing was half-written: not even the migrations table
    with psycopg.connect(owned) as conn:
        assert conn.execute("SELECT to_regclass('ce_schema_migrations')").fetchone() == (None,)

    server.admin("CREATE EXTENSION IF NOT EXISTS vector", database=_database(owned))  # what the DBA runs
    assert cli("check-database", "--database-url", owned).returncode == 0
    migrated = cli("migrate", "--database-url", owned)
    assert migrated.returncode == 0, migrated.stderr
    assert cli("check-database", "--database-url", owned).stdout.rstrip().endswith("can run as this role")


async def test_the_owner_ingests_and_searches_after_the_dba_statements(server: Standalone, owned: str) -> None:
    server.admin("CREATE EXTENSION IF NOT EXISTS vector", database=_database(owned))
    config = ContextEngineConfig(database_url=owned, storage={"auto_migrate": True})
    async with ContextEngine(config) as engine:
        await engine.ingest(text="Forklift batteries are charged overnight in bay four.", name="bay")
        hits = (await engine.search("forklift batteries", principals=TRUSTED)).hits
    assert hits and hits[0].document_name == "bay"


async def test_a_wrong_password_says_authentication_failed_and_where(server: Standalone) -> None:
    wrong = server.url(password="not-the-password-123")
    async with ContextEngine(ContextEngineConfig(database_url=wrong)) as engine:
        with pytest.raises(DatabaseRefused) as caught:
            await engine.stats(principals=TRUSTED)
    message = str(caught.value)
    assert caught.value.code == "database_authentication_failed"
    assert f"{server.host}:{server.port}" in message and "authentication failed" in message
    assert "not-the-password-123" not in message and "retry shortly" not in message

    run = cli("migrate", "--database-url", wrong)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert run.stderr.count("\n") == 1 and f"{server.host}:{server.port}" in run.stderr
    assert "not-the-password-123" not in run.stderr


async def test_a_closed_port_says_unreachable_and_where() -> None:
    port = free_port()  # nothing listens on it
    url = f"postgresql://someone:hunter2-secret@127.0.0.1:{port}/app"
    async with ContextEngine(ContextEngineConfig(database_url=url)) as engine:
        with pytest.raises(StorageUnavailable) as caught:
            await engine.stats(principals=TRUSTED)
    assert f"127.0.0.1:{port}" in str(caught.value) and "could not be reached" in str(caught.value)
    assert "hunter2-secret" not in str(caught.value)
    run = cli("stats", "--database-url", url)
    assert run.returncode == 1 and "Traceback" not in run.stderr and run.stderr.count("\n") == 1
    assert f"127.0.0.1:{port}" in run.stderr and "hunter2-secret" not in run.stderr


def test_an_unsupported_url_scheme_is_refused_when_the_engine_is_built() -> None:
    with pytest.raises(ConfigError) as caught:
        ContextEngine(ContextEngineConfig(database_url="mysql://app:s3cret-pw@db.example:3306/app"))
    assert caught.value.code == "unsupported_database_url"
    assert "mysql://" in str(caught.value) and "s3cret-pw" not in str(caught.value)
    run = cli("migrate", "--database-url", "mysql://app:s3cret-pw@db.example:3306/app")
    assert run.returncode == 1 and "Traceback" not in run.stderr and run.stderr.count("\n") == 1
    assert "unsupported URL scheme mysql://" in run.stderr and "s3cret-pw" not in run.stderr


def test_a_misspelt_variable_is_refused_by_every_constructor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CE_DATABSE_URL", "postgresql://x@localhost/app")
    for build in (ContextEngineConfig, ContextEngineConfig.from_env, lambda: ContextEngineConfig(search={})):
        with pytest.raises(ConfigError, match=r"CE_DATABSE_URL .*did you mean CE_DATABASE_URL"):
            build()
    run = cli("stats", env={"CE_DATABSE_URL": "postgresql://x@localhost/app"})
    assert run.returncode == 1 and "Traceback" not in run.stderr and run.stderr.count("\n") == 1
    assert "CE_DATABSE_URL" in run.stderr


def test_a_mount_function_without_its_framework_names_the_extra() -> None:
    probe = (
        "import sys\n"
        "sys.modules['fastapi'] = None  # as if the fastapi extra were not installed\n"
        "import context_engine\n"
        "try:\n"
        "    context_engine.create_router\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=HANG_GUARD,
    )
    assert run.stdout.startswith("MissingExtra create_router needs the fastapi extra"), run.stderr
    assert 'pip install "pg-context-engine[fastapi]"' in run.stdout


def test_migrate_refusal_is_also_an_exception_from_the_library(owned: str) -> None:
    import asyncio

    from sqlalchemy.ext.asyncio import create_async_engine

    from context_engine.storage.database import to_driver_url
    from context_engine.storage.migrate import migrate

    async def attempt() -> None:
        sql = create_async_engine(to_driver_url(owned))
        try:
            await migrate(sql, dim=384, announce=lambda line: None)
        finally:
            await sql.dispose()

    with pytest.raises(DatabaseUnsuitable) as caught:
        asyncio.run(attempt())
    assert caught.value.code == "database_privileges_missing"
    assert caught.value.details["statements"] == ["CREATE EXTENSION IF NOT EXISTS vector;"]

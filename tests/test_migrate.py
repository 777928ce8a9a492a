"""Migrations: idempotent, dimension-locked, repairable, runnable from the CLI."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import psycopg
import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from context_engine.cli import main as cli_main
from context_engine.errors import DimensionMismatch
from context_engine.storage.database import to_driver_url
from context_engine.storage.migrate import migrate
from tests.conftest import server_dir


def _indexes(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename LIKE 'ce_%'")}


async def test_migrate_is_idempotent_and_locks_dim(database_url: str) -> None:
    sql = create_async_engine(to_driver_url(database_url))
    try:
        first = await migrate(sql, dim=8)
        assert first.applied == ["0001_initial"] or first.applied[0] == "0001_initial"
        again = await migrate(sql, dim=8)
        assert again.applied == []
        with pytest.raises(DimensionMismatch, match="locked to embedding dimension 8"):
            await migrate(sql, dim=16)
    finally:
        await sql.dispose()
    names = _indexes(database_url)
    for expected in ("ix_ce_chunks_embedding_half", "ix_ce_chunks_tsv", "ix_ce_chunks_acl"):
        assert expected in names
    assert "ix_ce_chunks_trgm" not in names  # built only for the trigram leg (test below)
    with psycopg.connect(database_url) as conn:
        extensions = {r[0] for r in conn.execute("SELECT extname FROM pg_extension")}
        method = conn.execute(
            "SELECT am.amname FROM pg_class c JOIN pg_am am ON am.oid = c.relam "
            "WHERE c.relname = 'ix_ce_chunks_embedding_half'"
        ).fetchone()
        options = conn.execute(
            "SELECT reloptions FROM pg_class WHERE relname = 'ix_ce_chunks_embedding_half'"
        ).fetchone()
    assert {"vector", "pg_trgm", "unaccent"} <= extensions
    assert method == ("hnsw",)
    # migration 0006's denser graph (benchmarks/README.md, "ACL recall"), kept by 0026's half-precision one
    assert options is not None and set(options[0]) == {"m=24", "ef_construction=200"}


async def test_rerun_repairs_a_half_applied_schema(database_url: str) -> None:
    """Simulate a run that died after creating some objects: the next run completes it."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute("CREATE TABLE ce_meta (key text PRIMARY KEY, value text NOT NULL)")
    sql = create_async_engine(to_driver_url(database_url))
    try:
        report = await migrate(sql, dim=4)
    finally:
        await sql.dispose()
    assert "0001_initial" in report.applied
    assert "ix_ce_chunks_embedding_half" in _indexes(database_url)


def test_cli_migrate(database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["migrate", "--database-url", database_url, "--dim", "12"]) == 0
    assert "0001_initial" in capsys.readouterr().out
    assert cli_main(["migrate", "--database-url", database_url, "--dim", "12"]) == 0
    assert "already up to date" in capsys.readouterr().out
    assert cli_main(["migrate", "--database-url", database_url, "--dim", "13"]) == 1
    assert "refusing dimension 13" in capsys.readouterr().err


def test_two_processes_start_the_embedded_server_at_once() -> None:
    """Both processes get a working server in the same data directory, and both can query."""
    script = textwrap.dedent(
        """
        import asyncio, sys
        from context_engine import ContextEngine, ContextEngineConfig, TRUSTED
        async def main():
            config = ContextEngineConfig(storage={"data_dir": sys.argv[1]}, fusion={"weights": {"vector": 0.0}})
            async with ContextEngine(config) as engine:
                await engine.ingest(text="shared server " + sys.argv[2], name=sys.argv[2])
                hits = (await engine.search("shared", principals=TRUSTED)).hits
                print("ok", len(hits))
        asyncio.run(main())
        """
    )
    base = server_dir()
    try:
        procs = [
            subprocess.Popen([sys.executable, "-c", script, str(base), f"p{i}"], stdout=subprocess.PIPE, text=True)
            for i in range(2)
        ]
        outputs = [p.communicate(timeout=180)[0] for p in procs]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert all(out.startswith("ok") for out in outputs)


async def test_the_trigram_index_is_built_only_when_asked(database_url: str) -> None:
    """Migration 0014 drops the trigram leg's index; the optional 0016 builds it when asked, once."""
    sql = create_async_engine(to_driver_url(database_url))
    try:
        plain = await migrate(sql, dim=8)
        assert "0014_trigram_on_demand" in plain.applied and "0016_trigram_index" not in plain.applied
        assert "ix_ce_chunks_trgm" not in _indexes(database_url)
        asked = await migrate(sql, dim=8, trigram=True)
        assert asked.applied == ["0016_trigram_index"]
        assert "ix_ce_chunks_trgm" in _indexes(database_url)
        assert (await migrate(sql, dim=8)).applied == []  # applied once, then kept
        assert "ix_ce_chunks_trgm" in _indexes(database_url)
    finally:
        await sql.dispose()


def test_cli_migrate_trigram(database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["migrate", "--database-url", database_url, "--dim", "12", "--trigram"]) == 0
    assert "0016_trigram_index" in capsys.readouterr().out
    assert "ix_ce_chunks_trgm" in _indexes(database_url)


async def test_citus_is_refused_where_the_extension_is_missing(database_url: str) -> None:
    """``migrate --citus`` on one PostgreSQL refuses before any revision runs; a plain run stays single-node."""
    from context_engine.storage.extensions import DatabaseUnsuitable

    engine = create_async_engine(to_driver_url(database_url))
    try:
        with pytest.raises(DatabaseUnsuitable) as refused:
            await migrate(engine, dim=8, citus=True)
        assert refused.value.code == "citus_missing"
        with psycopg.connect(database_url) as conn:
            assert conn.execute("SELECT to_regclass('ce_schema_migrations')").fetchone() == (None,)
        report = await migrate(engine, dim=8)
        assert report.citus is False and not any(r.startswith("citus/") for r in report.applied)
    finally:
        await engine.dispose()

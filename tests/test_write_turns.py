"""Versions of one document are never lost: concurrent writers take turns, and keys answer for their own.

Writers race one ``(source_id, name)`` from two engines (two pools, so two lock connections, as two
processes would have) with random texts, each with its own idempotency key; a writer whose turn did
not come within ``ingest.write_wait_seconds`` is told to retry, and retries with the same key until it
is admitted. Then every key is sent again and must replay its own answer.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from context_engine import TRUSTED, ContextEngine
from context_engine.models import DocumentReport
from tests.conftest import make_config
from tests.fakes.word_embedder import WordEmbedder

WORDS = ["kinase", "ribosome", "protein", "cell", "tumour", "membrane", "enzyme", "signal"]
#: enough attempts for every writer to get a turn even with no wait at all
MAX_ATTEMPTS = 400

writer = st.tuples(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6), st.integers(0, 1))


async def _until_admitted(eng: ContextEngine, body: str, name: str, key: str) -> tuple[DocumentReport, int]:
    """Send the same call until it is admitted; the report and how many busy answers came first."""
    for attempt in range(MAX_ATTEMPTS):
        report = (await eng.ingest(text=body, name=name, idempotency_key=key)).documents[0]
        if not (report.status == "skipped" and report.skip_reason == "in_progress"):
            return report, attempt
        await asyncio.sleep(0.01)
    raise AssertionError(f"key {key} was never admitted")


async def _check(url: str, writers: list[tuple[list[str], int]], wait: float) -> None:
    name = f"doc-{uuid.uuid4().hex[:8]}"
    embedder = WordEmbedder()
    config = make_config(url, ingest={"write_wait_seconds": wait})
    async with ContextEngine(config, embedder=embedder) as one, ContextEngine(config, embedder=embedder) as two:
        engines = [one, two]
        bodies = [f"Notes on {' '.join(words)}." for words, _ in writers]
        keys = [f"k{i}-{uuid.uuid4().hex[:8]}" for i in range(len(writers))]
        outcomes = await asyncio.gather(
            *(_until_admitted(engines[w[1]], bodies[i], name, keys[i]) for i, w in enumerate(writers))
        )
        reports = [r for r, _ in outcomes]
        assert all(r.status in ("completed", "skipped") for r in reports), [r.status for r in reports]
        assert all(r.status == "completed" or r.skip_reason == "unchanged" for r in reports)
        doc_ids = {r.document_id for r in reports}
        assert len(doc_ids) == 1 and None not in doc_ids
        doc_id = str(next(iter(doc_ids)))

        versions = await one.document_versions(doc_id, principals=TRUSTED)
        # revisions strictly increase with the version number, each version closing where the next opens
        assert [v.version for v in versions] == list(range(1, len(versions) + 1))
        froms = [v.valid_from for v in versions]
        assert froms == sorted(set(froms))
        assert [v.valid_to for v in versions] == [*froms[1:], None]
        # every admitted write is in the history, and the history holds nothing else
        written = sorted(r.version for r in reports if r.status == "completed")
        assert written == [v.version for v in versions]
        # each key's version holds that writer's own text
        for body, report in zip(bodies, reports, strict=True):
            assert report.version is not None
            stored = await one.get_document(doc_id, principals=TRUSTED, version=report.version)
            assert stored.text == body
        # the final content is the last one admitted
        current = await one.get_document(doc_id, principals=TRUSTED)
        last = max((r for r in reports if r.status == "completed"), key=lambda r: r.revision or 0)
        assert current.version == last.version
        assert current.text == bodies[reports.index(last)]

        # every key sent again replays its own answer and writes nothing
        before = await one.revision()
        for i, (_, side) in enumerate(writers):
            again = (await engines[1 - side].ingest(text=bodies[i], name=name, idempotency_key=keys[i])).documents[0]
            assert (again.document_id, again.version, again.status) == (doc_id, reports[i].version, reports[i].status)
        assert await one.revision() == before
        db = await one._ready()
        async with db.connect() as conn:
            pending = await conn.scalar(text("SELECT count(*) FROM ce_idempotency_keys WHERE state <> 'done'"))
            chunks_missing = await conn.scalar(text("SELECT count(*) FROM ce_chunks WHERE embedding IS NULL"))
        assert (pending, chunks_missing) == (0, 0)


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(writers=st.lists(writer, min_size=2, max_size=8), wait=st.sampled_from([0.0, 0.02, 10.0]))
def test_concurrent_writers_of_one_document_lose_no_version(
    database_url: str, writers: list[tuple[list[str], int]], wait: float
) -> None:
    asyncio.run(_check(database_url, writers, wait))


async def test_twenty_concurrent_new_versions_are_all_stored_in_turn(database_url: str) -> None:
    """The issue's case: 20 concurrent ingests of one existing name, each its own key: 20 versions."""
    async with ContextEngine(make_config(database_url), embedder=WordEmbedder()) as eng:
        first = (await eng.ingest(text="Version zero of the notes.", name="notes.md")).documents[0]
        reports = await asyncio.gather(
            *(
                eng.ingest(text=f"Version {i} of the notes.", name="notes.md", idempotency_key=f"v{i}")
                for i in range(20)
            )
        )
        statuses = [r.documents[0].status for r in reports]
        assert statuses == ["completed"] * 20
        versions = await eng.document_versions(str(first.document_id), principals=TRUSTED)
        assert len(versions) == 21
        assert sorted(r.documents[0].version or 0 for r in reports) == list(range(2, 22))


async def test_a_writer_whose_turn_does_not_come_is_told_to_retry_and_spends_no_key(database_url: str) -> None:
    """The wait runs out: ``skipped`` / ``in_progress``, no key recorded; the same call later stores."""
    from context_engine.storage import repository as repo
    from context_engine.storage import session_locks

    config = make_config(database_url, ingest={"write_wait_seconds": 0.2})
    async with (
        ContextEngine(config, embedder=WordEmbedder()) as eng,
        ContextEngine(config, embedder=WordEmbedder()) as other,
    ):
        # another process's run owns the document (its identity lock is held on its lock connection)
        locks = session_locks.locks_for(await other._ready())
        held = await locks.acquire(session_locks.document_key(repo.identity_key("default", "held.md")), 1.0)
        assert held is not None
        busy = (await eng.ingest(text="Held text.", name="held.md", idempotency_key="once")).documents[0]
        assert (busy.status, busy.skip_reason) == ("skipped", "in_progress")
        db = await eng._ready()
        async with db.connect() as conn:
            assert await conn.scalar(text("SELECT count(*) FROM ce_idempotency_keys")) == 0
            assert await conn.scalar(text("SELECT count(*) FROM ce_documents")) == 0
        await locks.release(held)
        stored = (await eng.ingest(text="Held text.", name="held.md", idempotency_key="once")).documents[0]
        assert stored.status == "completed" and stored.version == 1


async def test_the_route_answers_409_document_busy_with_retry_after(database_url: str) -> None:
    """Over HTTP the busy answer is a retryable 409 with ``Retry-After``, then the same request stores."""
    import fastapi
    import httpx

    from adapters.fastapi import create_router
    from context_engine.storage import repository as repo
    from context_engine.storage import session_locks
    config = make_config(database_url, ingest={"write_wait_seconds": 0.2})
    async with (
        ContextEngine(config, embedder=WordEmbedder()) as eng,
        ContextEngine(config, embedder=WordEmbedder()) as other,
    ):
        app = fastapi.FastAPI()
        app.include_router(create_router(eng, auth=lambda request: True, principals=lambda request: TRUSTED))
        locks = session_locks.locks_for(await other._ready())
        held = await locks.acquire(session_locks.document_key(repo.identity_key("default", "r.md")), 1.0)
        assert held is not None
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            body: dict[str, Any] = {"text": "Route text.", "name": "r.md"}
            busy = await client.post("/documents", json=body, headers={"Idempotency-Key": "r1"})
            assert busy.status_code == 409
            assert busy.json()["error"]["code"] == "document_busy"
            assert int(busy.headers["retry-after"]) >= 1
            await locks.release(held)
            ok = await client.post("/documents", json=body, headers={"Idempotency-Key": "r1"})
            assert ok.status_code == 201 and ok.json()["documents"][0]["status"] == "completed"

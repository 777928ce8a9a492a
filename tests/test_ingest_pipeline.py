"""The embedding pipeline over real HTTP: stored before embedded, resumable, paid once, raced."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import text

from context_engine import TRUSTED, ContextEngine, IngestTooLarge
from context_engine.hooks import Hooks, ProgressEvent, UsageEvent
from tests.conftest import make_config
from tests.fakes.http_server import (  # noqa: F401
    FakeHTTPServer,
    Target,
    fake_embedding,
    fake_http_server,
    fake_openai_embeddings,
)
from tests.waiting import HANG_GUARD, until_async

DIM = 8


def _inputs(server: FakeHTTPServer) -> list[list[str]]:
    return [r.json()["input"] for r in server.requests_to("/v1/embeddings") if r.json()]


def _config(database_url: str, server: FakeHTTPServer, **embedding: Any) -> Any:
    return make_config(database_url, embedding=fake_embedding(server, DIM, **{"max_concurrency": 1, **embedding}))


@pytest.fixture
async def remote_engine(database_url: str, fake_http_server: FakeHTTPServer) -> AsyncIterator[ContextEngine]:  # noqa: F811
    fake_http_server.route("POST", "/v1/embeddings", fake_openai_embeddings(DIM))
    async with ContextEngine(_config(database_url, fake_http_server, max_batch_items=4)) as engine:
        yield engine


def _sections(n: int, changed: int | None = None) -> str:
    """A document whose every section is its own chunk."""
    parts = []
    for i in range(n):
        body = f"Paragraph {i} describes topic number {i} in plain words."
        if i == changed:
            body = f"Paragraph {i} now says something entirely different about item {i}."
        parts.append(f"# Section {i}\n\n{body}")
    return "\n\n".join(parts)


async def test_failure_mid_document_is_resumable_and_no_batch_is_paid_twice(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    ok = fake_openai_embeddings(DIM)
    state = {"calls": 0, "broken": True}

    def flaky(body: Any, headers: dict[str, str], target: Target) -> Any:
        state["calls"] += 1
        if state["broken"] and state["calls"] == 3:
            return 503, {}, {"error": {"message": "upstream overloaded"}}
        return ok(body, headers, target)

    fake_http_server.route("POST", "/v1/embeddings", flaky)
    async with ContextEngine(_config(database_url, fake_http_server, max_batch_items=4)) as engine:
        report = (await engine.ingest(text=_sections(12), name="long")).documents[0]
        assert report.status == "embedding"
        assert report.failure_reason == "provider_unavailable"
        doc = await engine.get_document(report.document_id, principals=TRUSTED)
        assert doc.status == "embedding"
        progress = doc.meta["embedding_progress"]
        assert (progress["done"], progress["total"]) == (8, 12)
        # the text legs already see every chunk, the vector leg only the embedded ones
        usage = (await engine.search("topic", principals=TRUSTED, top_k=3)).usage
        assert usage["leg_hits"]["fts"] == 12 and usage["leg_hits"]["vector"] == 8

        state["broken"] = False
        resumed = (await engine.resume_embeddings(report.document_id)).documents[0]
        assert resumed.status == "completed"
        doc = await engine.get_document(report.document_id, principals=TRUSTED)
        assert doc.status == "completed" and doc.failure_reason is None and doc.error is None

    batches = [b for b in _inputs(fake_http_server) if b != ["topic"]]  # drop the search's query embedding
    refused = batches[2]
    accepted = batches[:2] + batches[3:]
    accepted_texts = [t for batch in accepted for t in batch]
    # every chunk was paid for exactly once; the refused batch was the only one sent again
    assert len(accepted_texts) == len(set(accepted_texts)) == 12
    assert sorted(batches[3]) == sorted(refused)


async def test_reingest_pays_only_for_the_changed_chunk(
    remote_engine: ContextEngine,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    first = (await remote_engine.ingest(text=_sections(100), name="handbook")).documents[0]
    assert first.status == "completed" and first.chunks == 100
    fake_http_server.clear()
    second = (await remote_engine.ingest(text=_sections(100, changed=37), name="handbook")).documents[0]
    assert second.status == "completed" and second.version == 2
    assert _inputs(fake_http_server) == [[second_text(37)]]
    db = await remote_engine.database()
    async with db.connect() as conn:
        missing = await conn.scalar(
            text(
                "SELECT count(*) FROM ce_chunks WHERE document_id = CAST(:d AS uuid) AND valid_to IS NULL "
                "AND embedding IS NULL"
            ),
            {"d": first.document_id},
        )
    assert missing == 0


def second_text(i: int) -> str:
    return f"Paragraph {i} now says something entirely different about item {i}."


async def test_batch_rejected_for_size_is_halved(database_url: str, fake_http_server: FakeHTTPServer) -> None:  # noqa: F811
    ok = fake_openai_embeddings(DIM)

    def small_batches_only(body: Any, headers: dict[str, str], target: Target) -> Any:
        if len(body["input"]) > 2:
            return 400, {}, {"error": {"message": "too many inputs in the batch"}}
        return ok(body, headers, target)

    fake_http_server.route("POST", "/v1/embeddings", small_batches_only)
    events: list[UsageEvent] = []
    async with ContextEngine(
        _config(database_url, fake_http_server, max_batch_items=8), hooks=Hooks(on_usage=events.append)
    ) as engine:
        report = (await engine.ingest(text=_sections(8), name="doc")).documents[0]
    assert report.status == "completed"
    batches = _inputs(fake_http_server)
    assert len(batches[0]) == 8  # the planned batch, refused
    accepted = [t for b in batches if len(b) <= 2 for t in b]
    assert len(accepted) == len(set(accepted)) == 8
    assert events[0].detail["halvings"] >= 1
    assert events[0].detail["embedded"] == 8


async def test_racing_ingests_of_one_text_take_turns_and_write_it_once(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    ok = fake_openai_embeddings(DIM)

    def slow(body: Any, headers: dict[str, str], target: Target) -> Any:
        time.sleep(0.3)
        return ok(body, headers, target)

    fake_http_server.route("POST", "/v1/embeddings", slow)
    async with ContextEngine(_config(database_url, fake_http_server, max_batch_items=2)) as engine:
        a, b = await asyncio.gather(
            engine.ingest(text=_sections(6), name="same"), engine.ingest(text=_sections(6), name="same")
        )
        statuses = sorted([a.documents[0].status, b.documents[0].status])
        assert statuses == ["completed", "skipped"], (a, b)
        # the second waited for the first run to finish, then found the same text stored
        second = a.documents[0] if a.documents[0].status == "skipped" else b.documents[0]
        assert second.skip_reason == "unchanged"
        db = await engine.database()
        async with db.connect() as conn:
            docs = await conn.scalar(text("SELECT count(*) FROM ce_documents"))
            versions = await conn.scalar(text("SELECT count(*) FROM ce_document_versions"))
            chunks = await conn.scalar(text("SELECT count(*) FROM ce_chunks"))
    assert (docs, versions, chunks) == (1, 1, 6)


async def test_progress_and_usage_hooks(remote_engine: ContextEngine) -> None:
    progress: list[ProgressEvent] = []
    usage: list[UsageEvent] = []
    remote_engine.hooks = Hooks(on_progress=progress.append, on_usage=usage.append)
    await remote_engine.ingest(text=_sections(9), name="doc")
    seen = [(e.stage, e.state) for e in progress]
    assert seen[0] == ("extract", "started")
    assert ("extract", "done") in seen and ("chunk", "done") in seen
    assert seen[-1] == ("embed", "done")
    assert [e.detail["done"] for e in progress if e.state == "progress"] == [4, 8, 9]
    assert usage[0].kind == "ingest"
    assert usage[0].detail["mode"] == "hybrid" and "mode_reason" in usage[0].detail
    assert "pages_source" in usage[0].detail


async def test_hook_errors_never_fail_an_ingest(remote_engine: ContextEngine) -> None:
    def boom(_event: object) -> None:
        raise RuntimeError("observer bug")

    remote_engine.hooks = Hooks(on_progress=boom, on_usage=boom)
    report = (await remote_engine.ingest(text=_sections(2), name="doc")).documents[0]
    assert report.status == "completed"


async def test_rejected_provider_failure_and_later_success_clears_it(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    ok = fake_openai_embeddings(DIM)
    state = {"reject": True}

    def gate(body: Any, headers: dict[str, str], target: Target) -> Any:
        if state["reject"]:
            return 401, {}, {"error": {"message": "invalid api key test-key"}}
        return ok(body, headers, target)

    fake_http_server.route("POST", "/v1/embeddings", gate)
    async with ContextEngine(_config(database_url, fake_http_server)) as engine:
        report = (await engine.ingest(text=_sections(2), name="doc")).documents[0]
        assert report.failure_reason == "provider_rejected"
        assert "test-key" not in (report.error or "")
        anon = await engine.get_document(report.document_id, principals=[])
        assert anon.error is None and anon.failure_message
        state["reject"] = False
        await engine.resume_embeddings()
        doc = await engine.get_document(report.document_id, principals=TRUSTED)
        assert doc.status == "completed" and doc.failure_reason is None and doc.failure_message is None


async def test_sweep_skips_a_run_that_is_still_moving(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    ok = fake_openai_embeddings(DIM)
    release = threading.Event()

    def held(body: Any, headers: dict[str, str], target: Target) -> Any:
        release.wait(HANG_GUARD)
        return ok(body, headers, target)

    fake_http_server.route("POST", "/v1/embeddings", held)
    async with ContextEngine(_config(database_url, fake_http_server)) as engine:
        running = asyncio.create_task(engine.ingest(text=_sections(3), name="doc"))
        # wait until the run has stored its chunks and is embedding
        await until_async(lambda: fake_http_server.requests, "the run calling the model")
        sweep = await engine.resume_embeddings()
        release.set()
        finished = await running
    assert [d.skip_reason for d in sweep.documents] == ["in_progress"]
    assert finished.documents[0].status == "completed"


async def test_intake_caps_refuse_before_writing(database_url: str, tmp_path: Any) -> None:
    config = make_config(database_url, ingest={"max_file_bytes": 100, "max_rows": 3})
    async with ContextEngine(config) as engine:
        big = tmp_path / "big.txt"
        big.write_text("x" * 101)
        with pytest.raises(IngestTooLarge) as refused:
            await engine.ingest(file=big)
        assert (refused.value.knob, refused.value.limit, refused.value.actual) == ("ingest.max_file_bytes", 100, 101)
        rows = tmp_path / "rows.csv"
        rows.write_text("a,b\n1,2\n3,4\n5,6\n7,8\n")
        with pytest.raises(IngestTooLarge) as too_many:
            await engine.ingest(file=rows)
        assert (too_many.value.knob, too_many.value.limit, too_many.value.actual) == ("ingest.max_rows", 3, 4)
        assert (await engine.stats(principals=TRUSTED)).documents == 0
        assert await engine.revision() == 0


async def test_stored_text_is_the_chunks_joined_and_follows_each_version(engine: ContextEngine) -> None:
    """The database assembles the document text from its chunk rows (the process never joins it)."""
    sections = "\n\n".join(f"# Part {i}\n\n" + f"Sentence {i} about part {i}. " * 60 for i in range(4))
    first = (await engine.ingest(text=sections, name="parts.md")).documents[0]
    assert first.chunks is not None and first.chunks > 2
    sql = await engine.database()
    async with sql.connect() as conn:
        texts = (
            await conn.execute(
                text(
                    "SELECT text FROM ce_chunks WHERE document_id = CAST(:d AS uuid) AND valid_to IS NULL "
                    "ORDER BY position"
                ),
                {"d": first.document_id},
            )
        ).scalars()
        joined = "\n\n".join(texts)
    assert first.document_id is not None
    doc = await engine.get_document(first.document_id, principals=TRUSTED)
    assert doc.text == joined
    second = (await engine.ingest(text="# Only\n\nA much shorter second version.", name="parts.md")).documents[0]
    assert second.version == 2
    doc = await engine.get_document(first.document_id, principals=TRUSTED)
    assert doc.text == "A much shorter second version."


async def _stored_chunks(engine: ContextEngine, document_id: str) -> list[tuple[int, str, str | None, bool]]:
    sql = await engine.database()
    async with sql.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT position, text, section, embedding IS NOT NULL FROM ce_chunks "
                "WHERE document_id = CAST(:d AS uuid) AND valid_to IS NULL ORDER BY position"
            ),
            {"d": document_id},
        )
        return [(int(r[0]), r[1], r[2], bool(r[3])) for r in rows]


async def test_a_document_over_hold_chunks_is_written_in_a_second_pass_and_embedded_in_pages(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    fake_http_server.route("POST", "/v1/embeddings", fake_openai_embeddings(DIM))
    config = _config(database_url, fake_http_server, max_batch_items=4)
    streaming = config.model_copy(update={"ingest": config.ingest.model_copy(update={"hold_chunks": 3})})
    async with ContextEngine(streaming) as small, ContextEngine(config) as held:
        streamed = (await small.ingest(text=_sections(12), name="big")).documents[0]
        assert streamed.status == "completed" and streamed.chunks == 12
        # pages of 3 pending chunks, each embedded in one batch (under the batch cap of 4)
        sizes = [len(batch) for batch in _inputs(fake_http_server)]
        assert sizes == [3, 3, 3, 3]
        assert sorted(t for batch in _inputs(fake_http_server) for t in batch) == sorted(
            f"Paragraph {i} describes topic number {i} in plain words." for i in range(12)
        )
        # the same chunks, text and content hash as a document held whole
        whole = (await held.ingest(text=_sections(12), name="whole")).documents[0]
        assert streamed.document_id is not None and whole.document_id is not None
        assert await _stored_chunks(small, streamed.document_id) == await _stored_chunks(held, whole.document_id)
        doc_streamed = await small.get_document(streamed.document_id, principals=TRUSTED)
        doc_whole = await held.get_document(whole.document_id, principals=TRUSTED)
        assert doc_streamed.text == doc_whole.text
        assert doc_streamed.meta["embedding_progress"] == doc_whole.meta["embedding_progress"]
        # unchanged content is still recognised, and one changed section costs one input
        fake_http_server.clear()
        again = (await small.ingest(text=_sections(12), name="big")).documents[0]
        assert (again.status, again.skip_reason) == ("skipped", "unchanged")
        assert _inputs(fake_http_server) == []
        changed = (await small.ingest(text=_sections(12, changed=5), name="big")).documents[0]
        assert changed.status == "completed" and changed.version == 2
        assert _inputs(fake_http_server) == [[second_text(5)]]
        doc = await small.get_document(streamed.document_id, principals=TRUSTED)
        # the document's own counts: all 12 chunks, the 11 reused ones counted done with the new one
        progress = doc.meta["embedding_progress"]
        assert (progress["done"], progress["total"]) == (12, 12)


async def test_a_file_that_changes_between_the_two_passes_is_refused_and_nothing_is_written(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
    tmp_path: Any,
) -> None:
    fake_http_server.route("POST", "/v1/embeddings", fake_openai_embeddings(DIM))
    config = _config(database_url, fake_http_server, max_batch_items=4)
    path = tmp_path / "notes.md"
    path.write_text(_sections(12))

    def rewrite(event: ProgressEvent) -> None:
        if (event.stage, event.state) == ("chunk", "done"):  # after the first pass, before the write
            path.write_text(_sections(12, changed=7))

    config = config.model_copy(update={"ingest": config.ingest.model_copy(update={"hold_chunks": 3})})
    async with ContextEngine(config, hooks=Hooks(on_progress=rewrite)) as engine:
        report = (await engine.ingest(file=path)).documents[0]
        assert report.status == "failed"
        assert report.failure_reason == "chunk_set_changed"
        assert report.document_id is not None
        assert await _stored_chunks(engine, report.document_id) == []
        assert _inputs(fake_http_server) == []
        # read again once the file holds still, it goes in whole
        engine.hooks = Hooks()
        retry = (await engine.ingest(file=path)).documents[0]
        assert retry.status == "completed" and retry.chunks == 12

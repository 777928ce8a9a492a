"""Bounded work per document and per list: chunk and text caps, identical list entries done once.

The embedding provider is a fake OpenAI-compatible server on 127.0.0.1, so the tests can count what
was paid for.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

from context_engine import ContextEngine
from context_engine.config import ContextEngineConfig
from context_engine.errors import IngestTooLarge
from context_engine.ingest.chunker import Chunk
from context_engine.ingest.pipeline import Stopped, prepare, stoppable
from tests.conftest import make_config
from tests.fakes.http_server import FakeHTTPServer, fake_embedding, fake_http_server, fake_openai_embeddings  # noqa: F401

DIM = 8


def _config(database_url: str, server: FakeHTTPServer, **ingest: Any) -> ContextEngineConfig:
    return make_config(database_url, embedding=fake_embedding(server, DIM), ingest=ingest)


def _inputs(server: FakeHTTPServer) -> list[str]:
    return [t for r in server.requests if r.path.endswith("/embeddings") for t in r.json()["input"]]


def _sections(n: int, tag: str = "") -> str:
    return "\n\n".join(f"# Part {tag}{i}\n\nLine {tag}{i} lists crate {i}." for i in range(n))


async def _count(engine: ContextEngine, sql: str) -> int:
    db = await engine._ready()
    async with db.connect() as conn:
        return int(await conn.scalar(text(sql)) or 0)


def test_the_defaults_bound_every_document() -> None:
    ingest = ContextEngineConfig().ingest
    assert ingest.max_rows is not None and ingest.max_chunks is not None and ingest.max_extracted_chars is not None


async def test_a_document_over_the_chunk_or_text_cap_is_refused_before_anything_is_stored(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    fake_http_server.route("POST", "/v1/embeddings", fake_openai_embeddings(DIM))
    config = _config(database_url, fake_http_server, max_chunks=5, max_extracted_chars=400)
    async with ContextEngine(config) as engine:
        with pytest.raises(IngestTooLarge) as chunks:
            await engine.ingest(text=_sections(6), name="six.md")
        assert chunks.value.knob == "ingest.max_chunks" and chunks.value.status == 413
        with pytest.raises(IngestTooLarge) as chars:
            await engine.ingest(text="word " * 200, name="long.md")
        assert chars.value.knob == "ingest.max_extracted_chars"
        assert (await engine.ingest(text=_sections(5), name="five.md")).documents[0].status == "completed"
        assert await _count(engine, "SELECT count(*) FROM ce_documents") == 1


async def test_a_thousand_identical_entries_are_stored_once_and_answered_as_such(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    fake_http_server.route("POST", "/v1/embeddings", fake_openai_embeddings(DIM))
    async with ContextEngine(_config(database_url, fake_http_server)) as engine:
        report = await engine.ingest_many([{"text": "0"}] * 1000)
        first, *rest = [item.report for item in report.items]
        assert first is not None and first.status == "completed"
        assert all(r is not None and (r.status, r.skip_reason) == ("skipped", "unchanged") for r in rest)
        assert {r.document_id for r in rest if r is not None} == {first.document_id}
        assert report.totals["completed"] == 1 and report.totals["skipped"] == 999
        assert _inputs(fake_http_server) == ["0"]
        assert await _count(engine, "SELECT count(*) FROM ce_documents") == 1
        assert await _count(engine, "SELECT count(*) FROM ce_document_versions") == 1


async def test_a_lists_total_work_is_capped_like_one_document(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    fake_http_server.route("POST", "/v1/embeddings", fake_openai_embeddings(DIM))
    async with ContextEngine(_config(database_url, fake_http_server, max_chunks=5)) as engine:
        entries = [{"text": _sections(2, tag), "name": f"{tag}.md"} for tag in ("a", "b", "c")]
        report = await engine.ingest_many(entries)
        outcomes = [(i.report.status if i.report else i.error.code if i.error else None) for i in report.items]
        assert outcomes == ["completed", "completed", "too_large"]
        refused = report.items[2].error
        assert refused is not None and refused.status == 413 and "ingest.max_chunks" in refused.message
        assert await _count(engine, "SELECT count(*) FROM ce_documents") == 2


def _endless() -> Iterator[Chunk]:
    i = 0
    while True:
        i += 1
        yield Chunk(text=f"chunk {i}", section=None, page=None, kind="text", meta={})


async def test_a_cancelled_first_pass_stops_its_thread() -> None:
    """A stopping process waits for its worker threads: the first pass must end when its caller gives up."""
    ended = threading.Event()

    def work(stop: threading.Event) -> Any:
        try:
            return prepare(("text/plain", {}, _endless()), lambda s: 1, stop=stop)
        except Stopped:
            ended.set()
            raise

    task = asyncio.create_task(stoppable(work))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    deadline = time.monotonic() + 30
    while not ended.is_set():
        assert time.monotonic() < deadline, "the first pass kept running after its caller was cancelled"
        await asyncio.sleep(0.01)

"""A large document's embedding never starves a small one: requests are served in turns across runs.

The provider is a fake OpenAI-compatible server on 127.0.0.1 that records the order of the texts it
is asked to embed. A large document is embedded a few chunks per request; a one-line ingest started
meanwhile must be served within one turn of each run, long before the large one finishes.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from context_engine import TRUSTED, ContextEngine
from context_engine.ingest.fair_share import FairGate
from tests.conftest import make_config
from tests.fakes.http_server import (  # noqa: F401
    FakeHTTPServer,
    Target,
    fake_embedding,
    fake_http_server,
    fake_openai_embeddings,
)

DIM = 8


def _config(database_url: str, server: FakeHTTPServer) -> Any:
    embedding = fake_embedding(server, DIM, max_batch_items=2, max_concurrency=4, max_inflight=2)
    return make_config(database_url, embedding=embedding)


async def test_a_one_line_ingest_is_served_while_a_large_document_embeds(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    ok = fake_openai_embeddings(DIM)
    served: list[list[str]] = []

    def slow(body: Any, headers: dict[str, str], target: Target) -> Any:
        time.sleep(0.02)
        served.append(list(body["input"]))
        return ok(body, headers, target)

    fake_http_server.route("POST", "/v1/embeddings", slow)
    big = "\n\n".join(f"# Part {i}\n\nLedger line {i} lists crate {i}." for i in range(400))
    async with ContextEngine(_config(database_url, fake_http_server)) as engine:
        large = asyncio.create_task(engine.ingest(text=big, name="large.md"))
        try:
            deadline = time.monotonic() + 60
            while len(served) < 10:  # the large document is embedding, many requests still to go
                assert time.monotonic() < deadline, "the large document never started embedding"
                await asyncio.sleep(0.01)
            small = (await engine.ingest(text="One short line.", name="small.md")).documents[0]
            assert small.status == "completed"
            # served among the large run's requests, far ahead of the ~190 it still had queued
            position = next(i for i, batch in enumerate(served) if "One short line." in batch)
            assert position < 100, position
            assert not large.done()
            report = (await large).documents[0]
        finally:
            if not large.done():
                large.cancel()
                await asyncio.gather(large, return_exceptions=True)
        assert report.status == "completed"
        doc = await engine.get_document(report.document_id, principals=TRUSTED, include_text=False)
        assert doc.meta["embedding_progress"]["done"] == 400


async def test_turns_go_round_robin_across_owners() -> None:
    """The gate itself: with one slot, a freed turn goes to the next owner, not the next request."""
    gate = FairGate(1)
    order: list[str] = []
    release = asyncio.Event()

    async def request(owner: str, hold: bool = False) -> None:
        async with gate.turn(owner):
            order.append(owner)
            if hold:
                await release.wait()

    first = asyncio.create_task(request("big", hold=True))
    await asyncio.sleep(0)
    waiting = [asyncio.create_task(request("big")) for _ in range(5)]
    await asyncio.sleep(0)
    waiting.append(asyncio.create_task(request("small")))
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(first, *waiting)
    # the small request went second, after the one in flight, ahead of the large run's five queued ones
    assert order[:3] == ["big", "big", "small"]
    assert order.count("big") == 6 and gate.in_flight == 0

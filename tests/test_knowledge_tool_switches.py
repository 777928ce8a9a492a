"""The knowledge tool's switches and smaller truths: ``redirect_aggregates_to_compute`` (search,
query_meta and map_reduce over spreadsheets only go to compute unless it is off),
``filename_search``, ``ingest.progress_batches``, and a stored failure code outside the
vocabulary shown as ``unknown`` on every reading door. Real PostgreSQL, a scripted model over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from context_engine import TRUSTED, UNSCOPED, ContextEngine, call_knowledge_tool
from context_engine.hooks import Hooks, ProgressEvent
from context_engine.models import FAILURE_MESSAGES
from tests.conftest import make_config
from tests.fakes import FakeHTTPServer, json_reply
from tests.knowledge_fakes import completion

# the tests' databases start migrated (a copy of the session's template; see tests/conftest.py)
pytestmark = pytest.mark.migrated()

SALES = b"region,amount\nnorth,10\nsouth,20\neast,5\n"
AGGREGATE = "what is the total amount across regions"


@pytest.fixture
def server() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer() as fake:
        fake.route("POST", "/v1/chat/completions", json_reply(200, completion('{"fields": []}')))
        yield fake


def config(database_url: str, server: FakeHTTPServer, **overrides: Any) -> Any:
    llm = {"provider": "custom", "base_url": server.url("/v1"), "model": "m", "max_retries": 0, "timeout": 30}
    return make_config(database_url, llm=llm, **overrides)


async def ask(engine: ContextEngine, **args: Any) -> dict[str, Any]:
    return await call_knowledge_tool(engine, principals=TRUSTED, scope=UNSCOPED, **args)


async def test_an_aggregate_query_meta_over_spreadsheets_goes_to_compute(
    database_url: str, server: FakeHTTPServer
) -> None:
    async with ContextEngine(config(database_url, server)) as engine:
        await engine.ingest(file=SALES, name="sales.csv", source_id="fin")
        meta = await ask(engine, action="query_meta", query=AGGREGATE)
        searched = await ask(engine, action="search", query=AGGREGATE)
    for refused in (meta, searched):
        assert refused["success"] is False and refused["next_action"]["action"] == "compute"
        assert refused["next_action"]["suggestion"]["frame_key"]
    assert server.requests_to("/v1/chat/completions") == []  # refused before any model call


async def test_with_the_redirect_off_the_same_questions_are_answered(database_url: str, server: FakeHTTPServer) -> None:
    async with ContextEngine(config(database_url, server, redirect_aggregates_to_compute=False)) as engine:
        await engine.ingest(file=SALES, name="sales.csv", source_id="fin")
        meta = await ask(engine, action="query_meta", query=AGGREGATE)
        searched = await ask(engine, action="search", query=AGGREGATE)
    assert meta["success"] is True and "next_action" not in meta
    assert searched["success"] is True and searched["hits"]


async def test_filename_search_can_be_turned_off(database_url: str, server: FakeHTTPServer) -> None:
    question = "what is in leave-policy.txt"
    for switch, expected in ((True, ["filename"]), (False, [])):
        async with ContextEngine(config(database_url, server, filename_search=switch)) as engine:
            await engine.ingest(text="Annual leave accrues monthly.", name="leave-policy.txt", source_id="hr")
            answer = await ask(engine, action="search", query=question)
        assert answer["success"] is True
        assert [h["matched_by"] for h in answer["hits"] if h.get("matched_by") == "filename"][:1] == expected


@pytest.mark.parametrize("switch", [True, False])
async def test_progress_batches_switch(database_url: str, switch: bool) -> None:
    events: list[ProgressEvent] = []
    cfg = make_config(database_url, ingest={"progress_batches": switch})
    async with ContextEngine(cfg) as engine:
        engine.hooks = Hooks(on_progress=events.append)
        await engine.ingest(text="\n\n".join(f"Section {i}. " + "words " * 60 for i in range(6)), name="doc")
    states = {(e.stage, e.state) for e in events}
    assert ("embed", "done") in states and ("extract", "started") in states
    assert (("embed", "progress") in states) is switch


async def test_a_failure_code_outside_the_vocabulary_reads_unknown(engine: ContextEngine, database_url: str) -> None:
    report = await engine.ingest(text="Some text to fail later.", name="odd.txt", source_id="s")
    doc = report.documents[0].document_id
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE ce_documents SET status = 'failed', failure_reason = 'disk_on_fire' WHERE id = %s",
                     (doc,))  # fmt: skip
    listed = (await ask(engine, action="list"))["documents"]
    got = (await ask(engine, action="get_doc", document_id=doc))["document"]
    stored = await engine.get_document(doc, principals=TRUSTED, include_text=False)
    assert [d["failure_reason"] for d in listed] == ["unknown"]
    assert got["failure_reason"] == "unknown" and got["failure_message"] == FAILURE_MESSAGES["unknown"]
    assert stored.failure_reason == "unknown" and stored.failure_message == FAILURE_MESSAGES["unknown"]

"""``ingest(batch=True)`` end to end: the real embedded PostgreSQL and a fake OpenAI-compatible batch
service on 127.0.0.1 (``/files`` upload, ``/batches`` create and poll, the output file).

The fake answers each job's first poll ``in_progress`` and its second ``completed``, listing the
replies in reverse order, so a document is only finished by a second poll and pairing by position
(never by line order) is what is checked.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import text

from context_engine import TRUSTED, ContextEngine
from context_engine.cli import main
from context_engine.config import EmbeddingConfig
from context_engine.embeddings.batches import BatchNotSupported
from context_engine.errors import InvalidRequest
from context_engine.hooks import Hooks, ProgressEvent, UsageEvent
from context_engine.ingest.batch_poll import WRITE_PAGE
from context_engine.ingest.batching import batch_limits
from context_engine.revisions.errors import IdempotencyKeyReused
from tests.conftest import make_config
from tests.fakes.http_server import FakeHTTPServer, fake_embedding, fake_openai_embeddings, fake_vector, json_reply
from tests.fakes.openai_batches import FakeBatchServer
from tests.test_conformance import CLIENTS, fresh_database, multipart

DIM = 8
API_KEY = "sk-batch-ingest-SECRET-0123456789"


def _sections(n: int, word: str = "topic") -> str:
    """A document whose every section is its own chunk."""
    return "\n\n".join(f"# Section {i}\n\nParagraph {i} describes {word} number {i} in plain words." for i in range(n))


def _embedding(server: FakeHTTPServer, **overrides: Any) -> dict[str, Any]:
    return fake_embedding(server, DIM, **{"api_key": API_KEY, **overrides})


def _without_batch_api(server: FakeHTTPServer) -> dict[str, Any]:
    return {"provider": "cohere", "model": "embed-test", "api_key": API_KEY, "base_url": server.url(), "dim": DIM}


@pytest.fixture
def server() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer() as fake:
        fake.route("POST", "/v1/embeddings", fake_openai_embeddings(DIM))  # queries and synchronous ingests
        yield fake


@pytest.fixture
def batches(server: FakeHTTPServer) -> FakeBatchServer:
    return FakeBatchServer(server, dim=DIM)


@pytest.fixture
async def engine(database_url: str, server: FakeHTTPServer, batches: FakeBatchServer) -> AsyncIterator[ContextEngine]:
    async with ContextEngine(make_config(database_url, embedding=_embedding(server))) as eng:
        yield eng


async def _rows(engine: ContextEngine, document_id: str) -> list[dict[str, Any]]:
    """Every chunk row of the document, every version, in order."""
    db = await engine.services.db()
    async with db.connect() as conn:
        result = await conn.execute(
            text(
                "SELECT version, position, text, embedding::text AS embedding, valid_to FROM ce_chunks "
                "WHERE document_id = CAST(:d AS uuid) ORDER BY version, position"
            ),
            {"d": document_id},
        )
        return [dict(r) for r in result.mappings()]


async def _jobs(engine: ContextEngine) -> list[dict[str, Any]]:
    db = await engine.services.db()
    async with db.connect() as conn:
        result = await conn.execute(
            text("SELECT batch_id, version, state, provider_status, chunk_count FROM ce_embedding_batches ORDER BY id")
        )
        return [dict(r) for r in result.mappings()]


async def _document_row(engine: ContextEngine, document_id: str) -> dict[str, Any]:
    db = await engine.services.db()
    async with db.connect() as conn:
        result = await conn.execute(
            text(
                "SELECT status, version, failure_reason, error, meta, lease_holder, updated_at FROM ce_documents "
                "WHERE id = CAST(:d AS uuid)"
            ),
            {"d": document_id},
        )
        return dict(result.mappings().one())


def _vector(stored: str) -> list[float]:
    return [float(x) for x in stored.strip("[]").split(",")]


def _uploaded(batches: FakeBatchServer) -> list[list[dict[str, Any]]]:
    return [[json.loads(line) for line in raw.decode().splitlines()] for raw in batches.files.values()]


async def test_a_pending_document_is_read_by_the_text_legs_and_a_poll_makes_it_searchable_by_vector(
    engine: ContextEngine, server: FakeHTTPServer, batches: FakeBatchServer
) -> None:
    usage: list[UsageEvent] = []
    engine.hooks = Hooks(on_usage=usage.append)
    report = (await engine.ingest(text=_sections(6), name="handbook", batch=True)).documents[0]
    assert report.status == "batch_pending" and report.chunks == 6
    doc_id = report.document_id
    assert doc_id is not None

    # stored, not embedded: no synchronous request, one job holding every chunk in position order
    assert server.requests_to("/v1/embeddings") == []
    rows = await _rows(engine, doc_id)
    assert len(rows) == 6 and all(r["embedding"] is None for r in rows)
    (uploaded,) = _uploaded(batches)
    assert [(u["custom_id"], u["body"]["input"]) for u in uploaded] == [(str(r["position"]), r["text"]) for r in rows]
    row = await _document_row(engine, doc_id)
    assert row["status"] == "batch_pending" and row["lease_holder"] is None  # no lease while it waits
    assert row["meta"]["embedding_progress"] == {"done": 0, "total": 6, "tokens": 0}
    assert [j["state"] for j in await _jobs(engine)] == ["pending"]

    # the text legs read it at once; the vector leg has nothing of it yet
    found = await engine.search("Paragraph 3 describes topic number 3", principals=TRUSTED)
    assert found.hits and found.hits[0].document_id == doc_id
    assert all("vector" not in hit.matched_by for hit in found.hits)

    (first,) = await engine.poll_batches()
    assert (first.outcome, first.provider_status, first.stored) == ("pending", "in_progress", 0)
    (second,) = await engine.poll_batches()
    assert (second.outcome, second.stored, second.chunks) == ("completed", 6, 6)

    # each vector landed on the row at its position, though the output listed them in reverse
    rows = await _rows(engine, doc_id)
    for r in rows:
        assert _vector(r["embedding"]) == pytest.approx(fake_vector(r["text"], DIM), abs=1e-6)
    doc = await engine.get_document(doc_id, principals=TRUSTED)
    assert doc.status == "completed" and doc.failure_reason is None
    assert doc.meta["embedding_progress"]["done"] == 6
    assert [j["state"] for j in await _jobs(engine)] == ["completed"]
    hit = (await engine.search(rows[2]["text"], principals=TRUSTED)).hits[0]
    assert hit.chunk_idx == 2 and "vector" in hit.matched_by and hit.similarity == pytest.approx(1.0, abs=1e-5)

    assert await engine.poll_batches() == []  # nothing left to ask about
    (event,) = [u for u in usage if u.detail.get("batch_id")]
    assert event.kind == "ingest" and event.units == 6 and event.detail["embedded"] == 6
    assert event.detail["batch_id"] == second.batch_id and event.detail["mode"] == "hybrid"


async def test_a_poll_before_the_job_finishes_changes_nothing(
    engine: ContextEngine, server: FakeHTTPServer, batches: FakeBatchServer
) -> None:
    batches.states = ["validating", "in_progress", "finalizing"]
    doc_id = (await engine.ingest(text=_sections(4), name="slow", batch=True)).documents[0].document_id
    assert doc_id is not None
    rows_before, doc_before = await _rows(engine, doc_id), await _document_row(engine, doc_id)

    said = [(await engine.poll_batches())[0] for _ in range(3)]

    assert [(o.outcome, o.provider_status) for o in said] == [
        ("pending", "validating"),
        ("pending", "in_progress"),
        ("pending", "finalizing"),
    ]
    assert await _rows(engine, doc_id) == rows_before
    assert await _document_row(engine, doc_id) == doc_before
    (job,) = await _jobs(engine)
    assert (job["state"], job["provider_status"]) == ("pending", "finalizing")
    assert server.requests_to("/v1/embeddings") == []
    assert not [r for r in server.requests if r.path.endswith("/content")]  # no output was read


@pytest.mark.parametrize(
    ("states", "output", "provider_status", "said"),
    [
        (["expired"], None, "expired", "expired"),
        (["in_progress", "completed"], lambda lines: lines[:-1], "completed", "covered 3 of 4 chunks"),
    ],
    ids=["expired", "output-short-by-one"],
)
async def test_a_job_that_ends_without_every_vector_leaves_the_document_resumable(
    engine: ContextEngine,
    server: FakeHTTPServer,
    batches: FakeBatchServer,
    states: list[str],
    output: Any,
    provider_status: str,
    said: str,
) -> None:
    batches.states = states
    if output is not None:
        batches.output = output
    doc_id = (await engine.ingest(text=_sections(4), name="doomed", batch=True)).documents[0].document_id
    assert doc_id is not None

    outcomes = [o for _ in range(len(states)) for o in await engine.poll_batches()]

    failed = outcomes[-1]
    assert (failed.outcome, failed.provider_status) == ("failed", provider_status)
    assert said in (failed.message or "")
    doc = await engine.get_document(doc_id, principals=TRUSTED)
    assert doc.status == "embedding" and doc.failure_reason == "batch_failed"
    assert doc.failure_message == "The embedding provider's batch job ended without a vector for every chunk."
    assert said in (doc.error or "")
    (job,) = await _jobs(engine)
    assert (job["state"], job["provider_status"]) == ("failed", provider_status)
    assert await engine.poll_batches() == []  # a failed job is not asked about again

    # the chunks stayed readable, and a resume embeds what is missing without a batch
    resumed = (await engine.resume_embeddings(doc_id)).documents[0]
    assert resumed.status == "completed"
    assert all(r["embedding"] is not None for r in await _rows(engine, doc_id))
    assert (await engine.get_document(doc_id, principals=TRUSTED)).failure_reason is None


async def test_a_new_version_supersedes_a_pending_job_and_the_poll_never_writes_onto_it(
    engine: ContextEngine, server: FakeHTTPServer, batches: FakeBatchServer
) -> None:
    first = (await engine.ingest(text=_sections(3), name="policy", batch=True)).documents[0]
    assert first.status == "batch_pending" and first.document_id is not None
    # the same content offered again while its job runs is not paid for twice
    again = (await engine.ingest(text=_sections(3), name="policy", batch=True)).documents[0]
    assert (again.status, again.skip_reason) == ("skipped", "unchanged")
    assert len(batches.files) == 1

    second = (await engine.ingest(text=_sections(5, "subject"), name="policy")).documents[0]
    assert second.status == "completed" and second.version == 2
    synchronous = await _rows(engine, first.document_id)

    (outcome,) = await engine.poll_batches()
    assert (outcome.outcome, outcome.version, outcome.stored) == ("superseded", 1, 0)
    assert await _rows(engine, first.document_id) == synchronous  # not one vector written, on either version
    assert all(r["embedding"] is None for r in synchronous if r["version"] == 1)
    assert all(r["embedding"] is not None for r in synchronous if r["version"] == 2)
    assert [j["state"] for j in await _jobs(engine)] == ["superseded"]
    assert server.requests_to(f"/v1/batches/{outcome.batch_id}") == []  # its state was not even asked
    assert batches.cancelled == [outcome.batch_id]  # stopped at the provider, so the rest is not billed
    assert (await engine.get_document(first.document_id, principals=TRUSTED)).status == "completed"


async def test_a_version_written_while_a_job_is_collected_stops_it_between_pages(
    engine: ContextEngine, server: FakeHTTPServer, batches: FakeBatchServer
) -> None:
    """A job's output is written a page at a time; a new version landing between two pages ends the
    collection, and the new version's rows keep their own vectors."""

    def negated(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:  # tells batch vectors from synchronous ones
        for line in lines:
            item = line["response"]["body"]["data"][0]
            item["embedding"] = [-x for x in item["embedding"]]
        return lines

    batches.output = negated
    chunks = WRITE_PAGE + 3
    first = (await engine.ingest(text=_sections(chunks), name="big", batch=True)).documents[0]
    assert first.chunks == chunks and first.document_id is not None
    assert (await engine.poll_batches())[0].outcome == "pending"

    replaced: list[str] = []

    async def on_progress(event: ProgressEvent) -> None:
        # the first page of the job is stored: a synchronous ingest of new content lands now (its own
        # progress events come through here too, hence the mark set before it starts)
        if event.stage == "embed" and event.state == "progress" and not replaced:
            replaced.append("started")
            newer = (await engine.ingest(text=_sections(4, "subject"), name="big")).documents[0]
            replaced.append(newer.status)

    engine.hooks = Hooks(on_progress=on_progress)
    (outcome,) = await engine.poll_batches()

    assert replaced == ["started", "completed"]
    assert (outcome.outcome, outcome.stored) == ("superseded", WRITE_PAGE)
    rows = await _rows(engine, first.document_id)
    old = [r for r in rows if r["version"] == 1]
    assert sum(r["embedding"] is not None for r in old) == WRITE_PAGE  # the first page only
    for r in (r for r in old if r["embedding"] is not None):
        assert _vector(r["embedding"]) == pytest.approx([-x for x in fake_vector(r["text"], DIM)], abs=1e-6)
    for r in (r for r in rows if r["version"] == 2):
        assert _vector(r["embedding"]) == pytest.approx(fake_vector(r["text"], DIM), abs=1e-6)
    assert [j["state"] for j in await _jobs(engine)] == ["superseded"]
    assert (await engine.get_document(first.document_id, principals=TRUSTED)).status == "completed"


async def test_a_new_batch_version_supersedes_the_older_job(
    engine: ContextEngine, server: FakeHTTPServer, batches: FakeBatchServer
) -> None:
    first = (await engine.ingest(text=_sections(3), name="notes", batch=True)).documents[0]
    second = (await engine.ingest(text=_sections(4, "subject"), name="notes", batch=True)).documents[0]
    assert second.status == "batch_pending" and second.version == 2 and second.document_id == first.document_id
    jobs = await _jobs(engine)
    assert [(j["version"], j["state"]) for j in jobs] == [(1, "superseded"), (2, "pending")]
    assert batches.cancelled == [jobs[0]["batch_id"]]  # the older job is stopped at the provider

    outcomes = [o for _ in range(2) for o in await engine.poll_batches()]

    assert [(o.version, o.outcome) for o in outcomes] == [(2, "pending"), (2, "completed")]
    assert server.requests_to(f"/v1/batches/{jobs[0]['batch_id']}") == []
    rows = await _rows(engine, first.document_id or "")
    assert all(r["embedding"] is None for r in rows if r["version"] == 1)
    for r in (r for r in rows if r["version"] == 2):
        assert _vector(r["embedding"]) == pytest.approx(fake_vector(r["text"], DIM), abs=1e-6)


async def test_a_metadata_change_while_the_job_waits_keeps_it_and_a_delete_drops_it(
    engine: ContextEngine, server: FakeHTTPServer, batches: FakeBatchServer
) -> None:
    kept = (await engine.ingest(text=_sections(3), name="kept", acl=["group:a"], batch=True)).documents[0]
    dropped = (await engine.ingest(text=_sections(2, "subject"), name="dropped", batch=True)).documents[0]
    assert kept.document_id is not None and dropped.document_id is not None
    await engine.update_document(kept.document_id, acl=["group:b"], principals=TRUSTED)  # version 2, same chunks
    await engine.delete_document(dropped.document_id, principals=TRUSTED)
    assert [j["version"] for j in await _jobs(engine)] == [1]  # the deleted document's job went with it

    outcomes = [o for _ in range(2) for o in await engine.poll_batches()]

    assert [(o.document_id, o.outcome) for o in outcomes] == [
        (kept.document_id, "pending"),
        (kept.document_id, "completed"),
    ]
    rows = await _rows(engine, kept.document_id)
    assert all(r["embedding"] is None for r in rows if r["version"] == 1)  # closed: never written
    current = [r for r in rows if r["version"] == 2]
    assert len(current) == 3
    for r in current:
        assert _vector(r["embedding"]) == pytest.approx(fake_vector(r["text"], DIM), abs=1e-6)
    doc = await engine.get_document(kept.document_id, principals=TRUSTED)
    assert (doc.status, doc.acl) == ("completed", ["group:b"])


async def test_a_provider_out_of_reach_leaves_the_job_waiting(
    engine: ContextEngine, server: FakeHTTPServer, batches: FakeBatchServer
) -> None:
    doc_id = (await engine.ingest(text=_sections(2), name="patient", batch=True)).documents[0].document_id
    (job,) = await _jobs(engine)
    answer = {"error": {"message": f"upstream down for key {API_KEY}"}}
    server.route("GET", f"/v1/batches/{job['batch_id']}", json_reply(503, answer))

    (outcome,) = await engine.poll_batches()

    assert (outcome.outcome, outcome.document_id) == ("unreachable", doc_id)
    assert outcome.message and API_KEY not in outcome.message
    (after,) = await _jobs(engine)
    assert after["state"] == "pending"
    assert (await _document_row(engine, doc_id or ""))["status"] == "batch_pending"
    # the claim was let go: the next poll asks again
    server.route("GET", f"/v1/batches/{job['batch_id']}", lambda *_: batches.poll(job["batch_id"], 1))
    (retried,) = await engine.poll_batches()
    assert retried.outcome == "completed"


async def test_a_job_another_poll_holds_is_left_to_it(engine: ContextEngine, batches: FakeBatchServer) -> None:
    doc_id = (await engine.ingest(text=_sections(2), name="shared", batch=True)).documents[0].document_id
    db = await engine.services.db()
    async with db.begin() as conn:  # another poller's live claim
        await conn.execute(
            text(
                "UPDATE ce_embedding_batches SET poll_holder = gen_random_uuid(), "
                "poll_until = clock_timestamp() + interval '1 hour'"
            )
        )
    (outcome,) = await engine.poll_batches()
    assert (outcome.outcome, outcome.document_id) == ("in_progress", doc_id)
    assert [j["state"] for j in await _jobs(engine)] == ["pending"]


async def test_a_provider_without_a_batch_api_refuses_before_anything_is_stored(database_url: str) -> None:
    with FakeHTTPServer() as server:
        settings = _without_batch_api(server)
        async with ContextEngine(make_config(database_url, embedding=settings)) as engine:
            with pytest.raises(BatchNotSupported) as caught:
                await engine.ingest(text=_sections(2), name="refused", batch=True)
            stats = await engine.stats(principals=TRUSTED)
        assert server.requests == []
    error = caught.value
    assert (error.code, error.status) == ("batch_unsupported", 422)
    assert "embedding.provider 'cohere'" in error.message and "batch=True" in error.message
    assert (stats.documents, stats.chunks) == (0, 0)


async def test_batch_must_be_a_boolean(engine: ContextEngine, batches: FakeBatchServer) -> None:
    with pytest.raises(InvalidRequest, match="batch must be true or false") as caught:
        await engine.ingest(text="words", name="n", batch="yes")  # type: ignore[arg-type]
    assert caught.value.status == 400
    assert (await engine.stats(principals=TRUSTED)).documents == 0 and batches.files == {}


async def test_a_submission_the_provider_refuses_leaves_the_document_resumable(
    engine: ContextEngine, server: FakeHTTPServer, batches: FakeBatchServer
) -> None:
    server.route("POST", "/v1/batches", json_reply(400, {"error": {"message": f"bad key {API_KEY}"}}))
    report = (await engine.ingest(text=_sections(3), name="unsent", batch=True)).documents[0]
    assert report.status == "embedding" and report.failure_reason == "provider_rejected"
    assert API_KEY not in (report.error or "")
    assert len(server.requests_to("/v1/batches", "POST")) == 1  # creating a job is never retried
    assert await _jobs(engine) == []
    row = await _document_row(engine, report.document_id or "")
    assert row["status"] == "embedding" and row["lease_holder"] is None
    assert (await engine.resume_embeddings(report.document_id)).documents[0].status == "completed"


def test_the_gemini_and_vertex_rows_of_the_batch_table() -> None:
    gemini = EmbeddingConfig(provider="gemini", api_key="k", dim=DIM)
    vertex = EmbeddingConfig(provider="vertex_ai", project="p", location="europe-west4", dim=DIM)
    assert batch_limits(gemini, "gemini") == (100, None)
    assert batch_limits(vertex, "vertex_ai") == (100, None)
    assert batch_limits(EmbeddingConfig(provider="gemini", api_key="k", max_batch_items=40), "gemini") == (40, None)


def test_the_route_takes_batch_as_a_json_field_and_as_a_form_field(
    pg_base_url: str, server: FakeHTTPServer, batches: FakeBatchServer
) -> None:
    body, content_type = multipart(
        {"source_id": "uploads", "batch": "true"}, {"file": ("notes.md", _sections(2).encode(), "text/markdown")}
    )
    with fresh_database(pg_base_url) as url:
        engine = ContextEngine(make_config(url, embedding=_embedding(server)))
        with CLIENTS["fastapi"](engine, lambda request: True, lambda request: TRUSTED) as send:
            as_json = send(
                "POST",
                "/context/documents",
                json.dumps({"text": _sections(3), "name": "json", "batch": True}).encode(),
                {"Content-Type": "application/json"},
            )
            as_form = send("POST", "/context/documents", body, {"Content-Type": content_type})
            not_bool = send(
                "POST",
                "/context/documents",
                json.dumps({"text": "x", "name": "bad", "batch": "yes"}).encode(),
                {"Content-Type": "application/json"},
            )
            bad_form, _ = multipart({"batch": "maybe"}, {"file": ("n.md", b"words", "text/markdown")})
            form_not_bool = send("POST", "/context/documents", bad_form, {"Content-Type": content_type})
    assert as_json.status == 201 and as_json.body["documents"][0]["status"] == "batch_pending"
    assert as_json.body["totals"]["batch_pending"] == 1
    assert as_form.status == 201 and as_form.body["documents"][0]["status"] == "batch_pending"
    for refused in (not_bool, form_not_bool):
        assert refused.status == 400 and refused.body["error"]["code"] == "invalid_request"
        assert "batch" in refused.body["error"]["message"]
    assert len(batches.batches) == 2


def test_the_route_refuses_batch_on_a_provider_without_one(pg_base_url: str) -> None:
    with FakeHTTPServer() as server, fresh_database(pg_base_url) as url:
        settings = _without_batch_api(server)
        engine = ContextEngine(make_config(url, embedding=settings))
        with CLIENTS["fastapi"](engine, lambda request: True, lambda request: TRUSTED) as send:
            refused = send(
                "POST",
                "/context/documents",
                json.dumps({"text": "words", "name": "n", "batch": True}).encode(),
                {"Content-Type": "application/json"},
            )
            stats = send("GET", "/context/stats", None, {})
    assert refused.status == 422 and refused.body["error"]["code"] == "batch_unsupported"
    assert "embedding.provider" in refused.body["error"]["message"]
    assert stats.body["documents"] == 0


def test_the_cli_polls_and_prints_what_it_completed(
    database_url: str,
    server: FakeHTTPServer,
    batches: FakeBatchServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for key, value in _embedding(server).items():
        monkeypatch.setenv(f"CE_EMBEDDING__{key.upper()}", str(value))

    async def ingest() -> str:
        async with ContextEngine(make_config(database_url, embedding=_embedding(server))) as engine:
            report = (await engine.ingest(text=_sections(3), name="from-cron", batch=True)).documents[0]
        assert report.document_id is not None
        return report.document_id

    doc_id = asyncio.run(ingest())
    capsys.readouterr()

    assert main(["batches", "poll", "--database-url", database_url]) == 0
    waiting = capsys.readouterr().out.splitlines()
    assert main(["batches", "poll", "--database-url", database_url]) == 0
    done = capsys.readouterr().out.splitlines()
    assert main(["batches", "poll", "--database-url", database_url, "--json"]) == 0
    nothing = capsys.readouterr().out

    assert waiting[0].startswith("pending") and doc_id in waiting[0] and "(in_progress)" in waiting[0]
    assert waiting[-1] == "polled 1 batches: 1 pending"
    assert done[0].startswith("completed") and doc_id in done[0] and "'from-cron'" in done[0]
    assert "3 of 3 vectors stored, document completed" in done[0]
    assert done[-1] == "polled 1 batches: 1 completed"
    assert nothing == ""
    with psycopg.connect(database_url) as conn:
        status = conn.execute("SELECT status FROM ce_documents WHERE id = %s", (doc_id,)).fetchone()
    assert status == ("completed",)


def test_the_cli_without_an_action_prints_its_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["batches"]) == 2
    assert "poll" in capsys.readouterr().out


async def test_an_idempotency_key_is_not_replayed_for_a_request_to_embed_another_way(
    engine: ContextEngine, batches: FakeBatchServer
) -> None:
    first = (await engine.ingest(text=_sections(2), name="keyed", idempotency_key="key-b")).documents[0]
    assert first.status == "completed"
    with pytest.raises(IdempotencyKeyReused):  # batch=True is another request, not a retry of the first
        await engine.ingest(text=_sections(2), name="keyed", batch=True, idempotency_key="key-b")
    assert await _jobs(engine) == []
    again = (await engine.ingest(text=_sections(2), name="keyed", idempotency_key="key-b")).documents[0]
    assert (again.document_id, again.version) == (first.document_id, first.version)


async def test_a_superseded_job_the_provider_will_not_cancel_changes_nothing_else(
    engine: ContextEngine, server: FakeHTTPServer, batches: FakeBatchServer
) -> None:
    """Cancelling is best effort: a job that already ended refuses, and the new version goes on."""
    await engine.ingest(text=_sections(3), name="memo", batch=True)
    (old,) = await _jobs(engine)
    batches.batches[old["batch_id"]]["status"] = "completed"  # it ended before anyone collected it
    second = (await engine.ingest(text=_sections(4, "subject"), name="memo", batch=True)).documents[0]
    assert second.status == "batch_pending" and second.version == 2
    assert batches.cancelled == []
    assert len(server.requests_to(f"/v1/batches/{old['batch_id']}/cancel")) == 1  # asked once, refused
    assert [(j["version"], j["state"]) for j in await _jobs(engine)] == [(1, "superseded"), (2, "pending")]

"""``engine.ingest_many`` and the list form of ``POST /documents``: many documents in one call, each
under every rule of a single ingest, refused or failed alone, answered in input order."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import text

from context_engine import TRUSTED, ContextEngine
from context_engine.errors import InvalidRequest
from context_engine.limits import INGEST_MANY_MAX
from context_engine.redaction import RedactionPolicy, RedactionRule
from tests.conftest import make_config
from tests.fakes.http_server import (  # noqa: F401
    FakeHTTPServer,
    Target,
    fake_embedding,
    fake_http_server,
    fake_openai_embeddings,
)
from tests.test_conformance import ADAPTERS, CLIENTS, Caller, HostLog, fresh_database, host_callables

DIM = 8


def _config(
    database_url: str, server: FakeHTTPServer, *, batch_items: int = 64, concurrency: int = 1, **overrides: Any
) -> Any:
    embedding = fake_embedding(server, DIM, max_concurrency=concurrency, max_batch_items=batch_items)
    return make_config(database_url, embedding=embedding, **overrides)


def _requests(server: FakeHTTPServer) -> list[list[str]]:
    return [r.json()["input"] for r in server.requests_to("/v1/embeddings") if r.json()]


@pytest.fixture
async def engine(database_url: str, fake_http_server: FakeHTTPServer) -> AsyncIterator[ContextEngine]:  # noqa: F811
    fake_http_server.route("POST", "/v1/embeddings", fake_openai_embeddings(DIM))
    async with ContextEngine(_config(database_url, fake_http_server)) as eng:
        yield eng


def _statuses(report: Any) -> list[str]:
    return [i.report.status if i.report is not None else i.error.code for i in report.items]


async def test_a_mixed_batch_answers_each_document_in_order_and_embeds_in_one_request(
    engine: ContextEngine,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    documents: list[dict[str, Any]] = [
        {"text": "Annual leave accrues at two days per month.", "name": "leave", "acl": ["group:hr"]},
        {"text": "Held under a group the caller lacks.", "name": "secret", "acl": ["group:finance"]},
        {"text": "Both text and a file.", "file": b"bytes", "name": "both"},
        {"text": "An unknown field.", "name": "odd", "colour": "blue"},
        {"text": "Expense claims are paid monthly.", "name": "expenses", "acl": ["group:hr"]},
        {"file": b"\x00\x01\x02 not a document", "name": "blob.bin", "mime": "application/octet-stream"},
    ]
    report = await engine.ingest_many(documents, principals=["group:hr"])
    assert [i.index for i in report.items] == list(range(6))
    assert _statuses(report) == ["completed", "forbidden", "invalid_request", "invalid_request", "completed", "failed"]
    assert report.items[1].error is not None and report.items[1].error.status == 403
    assert report.items[5].report is not None and report.items[5].report.failure_reason == "extraction_failed"
    assert report.totals["completed"] == 2 and report.totals["refused"] == 3 and report.totals["failed"] == 1
    # the two stored one-chunk documents were embedded in a single provider request
    assert _requests(fake_http_server) == [
        ["Annual leave accrues at two days per month.", "Expense claims are paid monthly."]
    ]
    # nothing of a refused document exists; the stored ones are complete and searchable under their ACL
    listed = await engine.list_documents(principals=TRUSTED)
    assert sorted(d.name for d in listed.documents) == ["blob.bin", "expenses", "leave"]
    hits = await engine.search("annual leave", principals=["group:hr"], top_k=3)
    assert hits.hits and hits.hits[0].document_name == "leave"
    assert (await engine.search("annual leave", principals=["group:eng"], top_k=3)).hits == []
    for item in (report.items[0], report.items[4]):
        assert item.report is not None and item.report.document_id is not None
        doc = await engine.get_document(item.report.document_id, principals=TRUSTED)
        assert doc.status == "completed" and doc.meta["embedding_progress"]["done"] == 1


async def test_a_name_given_twice_in_one_batch_is_written_in_order(engine: ContextEngine) -> None:
    report = await engine.ingest_many(
        [
            {"text": "The first wording of the travel policy.", "name": "travel"},
            {"text": "The second wording of the travel policy.", "name": "travel"},
            {"text": "The second wording of the travel policy.", "name": "travel"},
            {"text": "Same text, no name."},
            {"text": "Same text, no name."},
        ]
    )
    first, second, third, fourth, fifth = (i.report for i in report.items)
    assert first is not None and second is not None and third is not None and fourth is not None
    assert fifth is not None
    assert (first.status, first.version) == ("completed", 1)
    assert (second.status, second.version, second.document_id) == ("completed", 2, first.document_id)
    assert (third.status, third.skip_reason, third.version) == ("skipped", "unchanged", 2)
    assert fourth.status == "completed" and (fifth.status, fifth.skip_reason) == ("skipped", "unchanged")
    assert fifth.document_id == fourth.document_id
    assert first.revision is not None and second.revision is not None and first.revision < second.revision
    versions = await engine.document_versions(first.document_id, principals=TRUSTED)  # type: ignore[arg-type]
    assert [(v.version, v.valid_from, v.valid_to) for v in versions] == [
        (1, first.revision, second.revision),
        (2, second.revision, None),
    ]
    doc = await engine.get_document(first.document_id, principals=TRUSTED)  # type: ignore[arg-type]
    assert doc.text == "The second wording of the travel policy."
    old = await engine.get_document(first.document_id, principals=TRUSTED, as_of=first.revision)  # type: ignore[arg-type]
    assert old.text == "The first wording of the travel policy."


async def test_documents_whose_chunks_span_concurrent_batches_complete_with_their_progress(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    fake_http_server.route("POST", "/v1/embeddings", fake_openai_embeddings(DIM))
    config = _config(database_url, fake_http_server, batch_items=2, concurrency=3)
    sections = [
        "\n\n".join(f"# Part {p} of {d}\n\nParagraph {p} of document {d} in plain words." for p in range(3))
        for d in range(5)
    ]
    async with ContextEngine(config) as engine:
        report = await engine.ingest_many([{"text": body, "name": f"doc-{d}"} for d, body in enumerate(sections)])
        assert _statuses(report) == ["completed"] * 5
        assert sorted(len(r) for r in _requests(fake_http_server)) == [1] + [2] * 7
        for item in report.items:
            assert item.report is not None and item.report.chunks == 3
            doc = await engine.get_document(item.report.document_id, principals=TRUSTED)  # type: ignore[arg-type]
            assert doc.status == "completed"
            assert (doc.meta["embedding_progress"]["done"], doc.meta["embedding_progress"]["total"]) == (3, 3)


async def test_names_held_by_stored_documents(engine: ContextEngine) -> None:
    await engine.ingest(text="Salary bands for 2026.", name="bands", acl=["group:hr"])
    await engine.ingest(text="The office opens at nine.", name="hours")
    report = await engine.ingest_many(
        [
            {"text": "An engineer's own salary bands.", "name": "bands", "acl": ["group:eng"]},
            {"text": "The office opens at nine.", "name": "hours"},
            {"text": "The office opens at half past eight.", "name": "hours", "acl": ["group:eng"]},
        ],
        principals=["group:eng"],
    )
    # names are unique per visibility: the hidden "bands" is not consulted, so the engineer's is a new
    # document; the public "hours" is readable (an unchanged re-post) but not the engineer's to change
    assert _statuses(report) == ["completed", "skipped", "forbidden"]
    assert report.items[2].error is not None and report.items[2].error.status == 403
    bands = [d for d in (await engine.list_documents(principals=TRUSTED)).documents if d.name == "bands"]
    assert sorted((d.acl, d.version) for d in bands) == [(["group:eng"], 1), (["group:hr"], 1)]
    hours = [d for d in (await engine.list_documents(principals=TRUSTED)).documents if d.name == "hours"]
    assert [(d.acl, d.version) for d in hours] == [([], 1)]


async def test_idempotency_keys_hold_per_document(engine: ContextEngine) -> None:
    documents = [
        {"text": "Invoices are due in thirty days.", "name": "invoices", "idempotency_key": "k-1"},
        {"text": "Refunds take five days.", "name": "refunds"},
    ]
    first = await engine.ingest_many(documents)
    again = await engine.ingest_many(documents)
    assert _statuses(first) == ["completed", "completed"]
    assert again.items[0].report == first.items[0].report  # the first report, replayed, nothing written
    assert again.items[1].report is not None and again.items[1].report.skip_reason == "unchanged"
    reused = await engine.ingest_many([{"text": "Other content.", "name": "invoices", "idempotency_key": "k-1"}])
    assert _statuses(reused) == ["idempotency_key_reused"]
    assert (await engine.revision()) == max(i.report.revision for i in first.items)  # type: ignore[union-attr,type-var]


async def test_ingest_redaction_applies_to_every_document(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    fake_http_server.route("POST", "/v1/embeddings", fake_openai_embeddings(DIM))
    policy = RedactionPolicy(rules=[RedactionRule(name="email", detector="email", apply_at="ingest")])
    async with ContextEngine(_config(database_url, fake_http_server, redaction=policy)) as engine:
        report = await engine.ingest_many(
            [
                {"text": "Write to ana@example.com about leave.", "name": "ana@example.com notes"},
                {"text": "No address here.", "name": "plain", "attributes": {"owner": "bo@example.com"}},
            ]
        )
        assert _statuses(report) == ["completed", "completed"]
        first, second = (i.report for i in report.items)
        assert first is not None and second is not None and first.name == "[EMAIL] notes"
        doc = await engine.get_document(first.document_id, principals=TRUSTED)  # type: ignore[arg-type]
        assert doc.text == "Write to [EMAIL] about leave."
        other = await engine.get_document(second.document_id, principals=TRUSTED)  # type: ignore[arg-type]
        assert other.attributes == {"owner": "[EMAIL]"}
        sent = " ".join(t for r in _requests(fake_http_server) for t in r)
        assert "example.com" not in sent


async def test_a_provider_failure_leaves_the_batch_resumable(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    ok = fake_openai_embeddings(DIM)
    state = {"broken": True}

    def flaky(body: Any, headers: dict[str, str], target: Target) -> Any:
        if state["broken"]:
            return 503, {}, {"error": {"message": "upstream overloaded"}}
        return ok(body, headers, target)

    fake_http_server.route("POST", "/v1/embeddings", flaky)
    async with ContextEngine(_config(database_url, fake_http_server)) as engine:
        report = await engine.ingest_many(
            [{"text": f"Note number {i} about the harbour.", "name": f"n{i}"} for i in range(3)]
        )
        assert [(i.report.status, i.report.failure_reason) for i in report.items if i.report] == [
            ("embedding", "provider_unavailable")
        ] * 3
        # stored before embedded: text and chunks are there, the vectors pending
        for item in report.items:
            doc = await engine.get_document(item.report.document_id, principals=TRUSTED)  # type: ignore[union-attr,arg-type]
            assert doc.status == "embedding" and doc.text.endswith("about the harbour.")
            assert doc.meta["embedding_progress"] == {"done": 0, "total": 1, "tokens": 0}
        state["broken"] = False
        resumed = await engine.resume_embeddings()
        assert sorted(d.status for d in resumed.documents) == ["completed"] * 3


async def test_bm25_statistics_match_a_recount(engine: ContextEngine) -> None:
    await engine.ingest_many([{"text": f"Shipping {w} parcels to the warehouse.", "name": w} for w in "abc"])
    await engine.ingest_many(
        [
            {"text": "Shipping heavy crates to the depot.", "name": "a"},
            {"text": "Completely new wording about invoices.", "name": "b"},
            {"text": "A fourth note on parcels.", "name": "d", "acl": ["group:ops"]},
        ]
    )
    db = await engine.database()
    async with db.connect() as conn:
        kept = (
            await conn.execute(
                text(
                    "SELECT t.lexeme, g.source_id, g.acl, t.df FROM ce_bm25_terms t "
                    "LEFT JOIN ce_bm25_groups g USING (group_id) ORDER BY 1, 2, 3"
                )
            )
        ).all()
        recount = (
            await conn.execute(
                text(
                    "SELECT u.lexeme, c.source_id, c.acl, count(*) FROM ce_chunks c, unnest(c.tsv) u "
                    "WHERE c.valid_to IS NULL GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
                )
            )
        ).all()
        groups = (
            await conn.execute(text("SELECT source_id, acl, chunks, tokens FROM ce_bm25_groups ORDER BY 1, 2"))
        ).all()
        regroup = (
            await conn.execute(
                text(
                    "SELECT source_id, acl, count(*), sum(tsv_tokens) FROM ce_chunks WHERE valid_to IS NULL "
                    "GROUP BY 1, 2 ORDER BY 1, 2"
                )
            )
        ).all()
    assert [tuple(r) for r in kept] == [tuple(r) for r in recount]
    assert [tuple(r) for r in groups] == [tuple(r) for r in regroup]
    assert {r[0] for r in kept} >= {"crate", "invoic", "parcel"}


async def test_a_bad_call_is_refused_whole(engine: ContextEngine) -> None:
    with pytest.raises(InvalidRequest):
        await engine.ingest_many({"text": "not a list"})  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        await engine.ingest_many([{"text": "x"}] * (INGEST_MANY_MAX + 1))
    report = await engine.ingest_many(["just a string"])  # type: ignore[list-item]
    assert _statuses(report) == ["invalid_request"]
    assert (await engine.stats(principals=TRUSTED)).documents == 0


async def test_what_the_database_would_refuse_is_refused_for_that_document_alone(engine: ContextEngine) -> None:
    report = await engine.ingest_many(
        [
            {"text": "A good note.", "name": "good"},
            {"text": "A bad attribute.", "name": "bad", "attributes": {"k": "nul \x00 here"}},
            {"text": "A bad name.", "name": "nul \x00 name"},
        ]
    )
    assert _statuses(report) == ["completed", "invalid_request", "invalid_request"]
    assert [d.name for d in (await engine.list_documents(principals=TRUSTED)).documents] == ["good"]


async def test_a_wave_the_database_refuses_is_ingested_one_document_at_a_time(engine: ContextEngine) -> None:
    """A statement-level trigger (real SQL, nothing of ours replaced) refuses any insert of more than one
    document row at once: the wave's transaction fails whole and each document takes the single path."""
    await engine.stats(principals=TRUSTED)  # migrated
    db = await engine.database()
    async with db.begin() as conn:
        await conn.execute(
            text(
                "CREATE FUNCTION refuse_many() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "IF (SELECT count(*) FROM new_rows) > 1 THEN RAISE EXCEPTION 'one at a time'; END IF; "
                "RETURN NULL; END $$"
            )
        )
        await conn.execute(
            text(
                "CREATE TRIGGER refuse_many AFTER INSERT ON ce_documents REFERENCING NEW TABLE AS new_rows "
                "FOR EACH STATEMENT EXECUTE FUNCTION refuse_many()"
            )
        )
    report = await engine.ingest_many([{"text": f"Harbour note {i}.", "name": f"h{i}"} for i in range(3)])
    assert _statuses(report) == ["completed"] * 3
    revisions = [i.report.revision for i in report.items if i.report is not None]
    assert len(set(revisions)) == 3
    stats = await engine.stats(principals=TRUSTED)
    assert (stats.documents, stats.chunks) == (3, 3)


# ------------------------------------------------------------------------------------- the route
def _transcript(adapter: str, pg_base_url: str) -> dict[str, Any]:
    with fresh_database(pg_base_url) as url:
        engine = ContextEngine(make_config(url))
        auth, principals = host_callables(HostLog())
        out: dict[str, Any] = {}
        with CLIENTS[adapter](engine, auth, principals) as send:
            call = Caller(send)
            out["all"] = call(
                "POST",
                "/documents",
                json_body=[
                    {"text": "Ferry times for the island.", "name": "ferry"},
                    {"text": "Bus times.", "name": "bus"},
                ],
            )
            out["mixed"] = call(
                "POST",
                "/documents",
                json_body=[
                    {"text": "Ferry times for the island.", "name": "ferry"},
                    {"text": "Tram times.", "name": "tram", "acl": ["group:finance"]},
                    {"text": "   ", "name": "blank"},
                    "not an object",
                    {"text": "Train times.", "name": "train"},
                ],
            )
            out["none"] = call("POST", "/documents", json_body=[{"text": "x", "acl": ["group:finance"]}])
            out["empty"] = call("POST", "/documents", json_body=[])
            out["too_many"] = call("POST", "/documents", json_body=[{}] * (INGEST_MANY_MAX + 1))
            out["single"] = call("POST", "/documents", json_body={"text": "A single note.", "name": "single"})
            out["search"] = call("POST", "/search", json_body={"query": "train times"})
    return out


@pytest.fixture(scope="module")
def transcripts(pg_base_url: str) -> dict[str, dict[str, Any]]:
    return {adapter: _transcript(adapter, pg_base_url) for adapter in ADAPTERS}


def test_a_list_post_answers_per_document(transcripts: dict[str, dict[str, Any]]) -> None:
    for adapter, t in transcripts.items():
        assert t["all"].status == 201, adapter
        assert [i["report"]["status"] for i in t["all"].body["items"]] == ["completed", "completed"]
        mixed = t["mixed"]
        assert mixed.status == 200, adapter
        items = mixed.body["items"]
        assert [i["index"] for i in items] == [0, 1, 2, 3, 4]
        assert items[0]["report"]["skip_reason"] == "unchanged"
        assert items[1]["error"]["code"] == "forbidden"
        assert items[2]["error"]["code"] == "invalid_request" and "text" in items[2]["error"]["message"]
        assert items[3]["error"]["code"] == "invalid_request"
        assert items[4]["report"]["status"] == "completed"
        assert mixed.body["totals"]["refused"] == 3
        # nothing stored: the status the first entry alone would answer (an ACL not held: 403)
        assert t["none"].status == 403 and t["none"].body["error"]["code"] == "forbidden"
        assert t["empty"].status == 400 and t["empty"].body["error"]["code"] == "invalid_request"
        assert t["too_many"].status == 400 and "1000" in t["too_many"].body["error"]["message"]
        assert t["single"].status == 201 and t["single"].body["documents"][0]["name"] == "single"
        assert [h["document_name"] for h in t["search"].body["hits"]][:1] == ["train"]

"""Idempotency keys: a retried ingest or delete writes nothing and answers what the first one did."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text

from context_engine import ContextEngine
from context_engine.errors import InvalidRequest, NotFound
from context_engine.revisions.errors import IdempotencyKeyReused
from tests.conftest import make_config
from tests.fakes.word_embedder import WordEmbedder

pytestmark = pytest.mark.filterwarnings("ignore:principals=None:DeprecationWarning")


@pytest.fixture
async def eng(database_url: str) -> AsyncIterator[ContextEngine]:
    async with ContextEngine(make_config(database_url), embedder=WordEmbedder()) as engine:
        yield engine


async def _versions(eng: ContextEngine) -> int:
    async with (await eng.database()).connect() as conn:
        return int(await conn.scalar(text("SELECT count(*) FROM ce_document_versions")))


async def test_a_retried_ingest_returns_the_first_version_without_writing(eng: ContextEngine) -> None:
    first = (await eng.ingest(text="Hello revisions.", name="h.md", idempotency_key="k-1")).documents[0]
    revision = await eng.revision()
    again = (await eng.ingest(text="Hello revisions.", name="h.md", idempotency_key="k-1")).documents[0]
    assert (again.document_id, again.version, again.revision, again.status) == (
        first.document_id,
        first.version,
        first.revision,
        "completed",
    )
    assert await eng.revision() == revision and await _versions(eng) == 1


async def test_the_same_key_with_other_content_is_refused_naming_the_key(eng: ContextEngine) -> None:
    await eng.ingest(text="one", name="a.md", idempotency_key="key-7")
    revision = await eng.revision()
    with pytest.raises(IdempotencyKeyReused) as caught:
        await eng.ingest(text="two", name="a.md", idempotency_key="key-7")
    assert caught.value.status == 409 and caught.value.code == "idempotency_key_reused"
    assert "'key-7'" in caught.value.message
    with pytest.raises(IdempotencyKeyReused):  # other attributes are other content too
        await eng.ingest(text="one", name="a.md", attributes={"x": 1}, idempotency_key="key-7")
    assert await eng.revision() == revision and await _versions(eng) == 1
    # keys are per source: the same key in another source is another key
    other = (await eng.ingest(text="two", name="a.md", source_id="elsewhere", idempotency_key="key-7")).documents[0]
    assert other.status == "completed"


async def test_keys_survive_a_restart(database_url: str) -> None:
    async with ContextEngine(make_config(database_url), embedder=WordEmbedder()) as first:
        report = (await first.ingest(text="durable", name="d.md", idempotency_key="boot")).documents[0]
    async with ContextEngine(make_config(database_url), embedder=WordEmbedder()) as second:
        again = (await second.ingest(text="durable", name="d.md", idempotency_key="boot")).documents[0]
        assert (again.document_id, again.revision) == (report.document_id, report.revision)
        assert await second.revision() == report.revision


@pytest.mark.parametrize(
    ("key", "message"),
    [("", "must be a non-empty string"), ("   ", "must be a non-empty string"), ("x" * 201, "201 characters")],
)
async def test_a_bad_key_is_refused_before_anything_is_written(eng: ContextEngine, key: str, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message) as caught:
        await eng.ingest(text="t", name="t.md", idempotency_key=key)
    assert caught.value.code == "invalid_idempotency_key" and caught.value.status == 400
    assert await eng.revision() == 0
    doc = (await eng.ingest(text="t", name="t.md")).documents[0].document_id
    with pytest.raises(InvalidRequest, match=message):
        await eng.delete_document(doc, idempotency_key=key)  # type: ignore[arg-type]
    assert (await eng.get_document(doc)).id == doc


async def test_twenty_concurrent_racers_on_one_key_write_one_version(eng: ContextEngine) -> None:
    await eng.ingest(text="warm the schema", name="warm.md")
    before = await eng.revision()

    async def racer() -> tuple[str | None, int | None, int | None]:
        report = (await eng.ingest(text="The one and only body.", name="race.md", idempotency_key="race")).documents[0]
        return report.document_id, report.version, report.revision

    answers = await asyncio.gather(*(racer() for _ in range(20)))
    assert len(set(answers)) == 1 and answers[0][1] == 1
    assert await eng.revision() == before + 1  # the revision advanced exactly once
    assert await _versions(eng) == 2  # warm.md and race.md


async def test_concurrent_racers_with_other_content_are_refused(eng: ContextEngine) -> None:
    async def racer(i: int) -> str:
        try:
            await eng.ingest(text=f"body {i % 2}", name="mixed.md", idempotency_key="mixed")
        except IdempotencyKeyReused:
            return "refused"
        return "ok"

    outcomes = await asyncio.gather(*(racer(i) for i in range(10)))
    assert outcomes.count("ok") == 5 and outcomes.count("refused") == 5  # the winner's half succeeds
    assert await _versions(eng) == 1 and await eng.revision() == 1


async def test_a_retried_delete_is_a_no_op_returning_the_first_revision(eng: ContextEngine) -> None:
    doc = (await eng.ingest(text="to be removed", name="r.md", acl=["owners"])).documents[0].document_id
    assert doc is not None
    deleted = await eng.delete_document(doc, principals=["owners"], idempotency_key="del-1")
    assert await eng.delete_document(doc, principals=["owners"], idempotency_key="del-1") == deleted
    assert await eng.revision_handle(await eng.revision()) == deleted  # an untrusted caller is told a handle
    assert await eng.revision(principals=["owners"]) == deleted  # the last change of its view
    with pytest.raises(NotFound):  # without a key a second delete finds nothing to delete
        await eng.delete_document(doc)
    with pytest.raises(NotFound):  # a caller who could not see the document learns nothing from the key
        await eng.delete_document(doc, principals=["stranger"], idempotency_key="del-1")


async def test_a_delete_key_reused_for_an_ingest_is_refused(eng: ContextEngine) -> None:
    doc = (await eng.ingest(text="x", name="x.md")).documents[0].document_id
    assert doc is not None
    await eng.delete_document(doc, idempotency_key="shared")
    with pytest.raises(IdempotencyKeyReused):
        await eng.ingest(text="y", name="y.md", idempotency_key="shared")


async def test_a_failed_delete_releases_its_key(eng: ContextEngine) -> None:
    doc = (await eng.ingest(text="guarded", name="g.md", acl=["owners"])).documents[0].document_id
    assert doc is not None
    with pytest.raises(NotFound):
        await eng.delete_document(doc, principals=["someone-else"], idempotency_key="try")
    assert (await eng.get_document(doc)).id == doc
    revision = await eng.delete_document(doc, principals=["owners"], idempotency_key="try")
    assert revision == await eng.revision_handle(await eng.revision())  # told as a handle

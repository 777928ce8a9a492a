"""Reads as of a revision: search, list, get, stats and versions see the store as it was then."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from context_engine import ContextEngine
from context_engine.errors import InvalidRequest, NotFound
from context_engine.revisions.errors import RevisionExpired
from tests.conftest import make_config
from tests.fakes.word_embedder import WordEmbedder
from tests.revisions_support import fresh_database, sibling_url

pytestmark = pytest.mark.filterwarnings("ignore:principals=None:DeprecationWarning")


@pytest.fixture
async def eng(database_url: str) -> AsyncIterator[ContextEngine]:
    async with ContextEngine(make_config(database_url), embedder=WordEmbedder()) as engine:
        yield engine


async def _ingest(eng: ContextEngine, name: str, text: str, acl: list[str] | None = None) -> tuple[str, int]:
    report = (await eng.ingest(text=text, name=name, acl=acl or [])).documents[0]
    assert report.status == "completed", report
    assert report.document_id is not None and report.revision is not None
    return report.document_id, report.revision


async def test_a_replaced_document_is_found_as_of_its_revision_and_not_now(eng: ContextEngine) -> None:
    doc, r1 = await _ingest(eng, "zebra.md", "Zebras graze on the savanna grasslands.")
    await _ingest(eng, "other.md", "Penguins swim in cold southern seas.")
    _, r3 = await _ingest(eng, "zebra.md", "Giraffes browse the acacia treetops.")
    past = await eng.search("zebras savanna", as_of=r1, top_k=5)
    assert [h.chunk_text for h in past.hits if h.document_id == doc] == ["Zebras graze on the savanna grasslands."]
    assert past.usage["vector_plan"]["plan"] == "exact" and past.usage["vector_plan"]["estimate"] == "as_of"
    now = await eng.search("zebras savanna", top_k=5)
    assert all("Zebras" not in h.chunk_text for h in now.hits)
    at_current = await eng.search("giraffes acacia", as_of=r3, top_k=5)
    assert at_current.hits[0].chunk_text == "Giraffes browse the acacia treetops."
    assert at_current.usage["vector_plan"]["estimate"] != "as_of"  # the current revision keeps the indexed path


async def test_a_deleted_document_stays_readable_as_of_earlier_revisions(eng: ContextEngine) -> None:
    doc, r1 = await _ingest(eng, "a.md", "Alpha particles are helium nuclei.")
    deleted_at = await eng.delete_document(doc)
    with pytest.raises(NotFound):
        await eng.get_document(doc)
    old = await eng.get_document(doc, as_of=r1)
    assert old.text == "Alpha particles are helium nuclei." and old.version == 1 and old.revision == r1
    assert [d.id for d in (await eng.list_documents(as_of=r1)).documents] == [doc]
    assert (await eng.list_documents()).documents == []
    assert (await eng.list_documents(as_of=deleted_at)).documents == []
    hits = (await eng.search("alpha helium", as_of=r1)).hits
    assert hits and hits[0].document_id == doc and hits[0].document_name == "a.md"
    assert (await eng.stats(as_of=r1)).documents == 1 and (await eng.stats()).documents == 0
    versions = await eng.document_versions(doc)
    assert [(v.version, v.valid_from, v.valid_to) for v in versions] == [(1, r1, deleted_at)]


async def test_an_acl_change_is_history_so_a_past_read_applies_the_acl_of_then_and_of_now(eng: ContextEngine) -> None:
    doc, r1 = await _ingest(eng, "plan.md", "The quarterly roadmap lists the launch dates.", acl=["team-a"])
    updated = await eng.update_document(doc, acl=["team-b"])
    r2 = updated.revision
    assert updated.version == 2 and r2 > r1
    as_a, as_b, both = ["team-a"], ["team-b"], ["team-a", "team-b"]
    r1 = await eng.revision_handle(r1)  # what a non-trusted caller is told for revision r1, and passes back
    assert (await eng.search("quarterly roadmap", principals=as_a)).hits == []
    # team-a could read it at r1 but was revoked since: its past is closed to team-a too
    assert (await eng.search("quarterly roadmap", principals=as_a, as_of=r1)).hits == []
    # team-b may read it now but could not then
    assert (await eng.search("quarterly roadmap", principals=as_b, as_of=r1)).hits == []
    past = await eng.search("quarterly roadmap", principals=both, as_of=r1)
    assert [h.document_id for h in past.hits] == [doc]
    assert (await eng.get_document(doc, principals=both, as_of=r1)).acl == ["team-a"]
    for who in (as_a, as_b):
        with pytest.raises(NotFound):
            await eng.get_document(doc, principals=who, version=1)
        with pytest.raises(NotFound):
            await eng.get_document(doc, principals=who, as_of=r1)
    with pytest.raises(NotFound):
        await eng.get_document(doc, principals=as_a)
    v1 = await eng.get_document(doc, principals=both, version=1)
    assert v1.text == "The quarterly roadmap lists the launch dates." and v1.acl == ["team-a"]
    with pytest.raises(NotFound):
        await eng.document_versions(doc, principals=as_a)
    assert [v.version for v in await eng.document_versions(doc, principals=as_b)] == [2]
    assert [v.version for v in await eng.document_versions(doc, principals=both)] == [1, 2]
    assert [v.version for v in await eng.document_versions(doc)] == [1, 2]
    # the vectors were copied with the rows: the new version is found by the vector leg as well
    found = await eng.search("quarterly roadmap", principals=as_b)
    assert found.hits and "vector" in found.hits[0].matched_by


async def test_a_deleted_document_keeps_its_last_acl_for_history(eng: ContextEngine) -> None:
    doc, r1 = await _ingest(eng, "memo.md", "The merger closes in spring.")
    await eng.update_document(doc, acl=["group:exec"])
    await eng.delete_document(doc)
    r1 = await eng.revision_handle(r1)  # the callers below are not trusted: they speak in handles
    for who in ([], ["group:staff"]):
        assert (await eng.search("merger spring", principals=who, as_of=r1)).hits == []
        assert (await eng.list_documents(principals=who, as_of=r1)).documents == []
        assert (await eng.stats(principals=who, as_of=r1)).documents == 0
        with pytest.raises(NotFound):
            await eng.get_document(doc, principals=who, version=1)
    assert [h.document_id for h in (await eng.search("merger spring", principals=["group:exec"], as_of=r1)).hits] == [
        doc
    ]


async def test_a_rename_is_history(eng: ContextEngine) -> None:
    doc, r1 = await _ingest(eng, "old-name.md", "Mitochondria produce cellular energy.")
    await eng.update_document(doc, name="new-name.md", attributes={"kind": "note"})
    assert (await eng.search("mitochondria", as_of=r1)).hits[0].document_name == "old-name.md"
    assert (await eng.search("mitochondria")).hits[0].document_name == "new-name.md"
    past = await eng.get_document(doc, as_of=r1)
    assert past.name == "old-name.md" and past.attributes == {}
    assert (await eng.get_document(doc)).attributes == {"kind": "note"}


async def test_bm25_statistics_as_of_a_revision_are_those_of_then(eng: ContextEngine, database_url: str) -> None:
    # at r1 "kinase" is in one chunk of two; later it is in most chunks, which lowers its IDF now:
    # a search as of r1 must score exactly as a store holding only the first two documents does
    first = [("k1.md", "kinase signalling in cells"), ("k2.md", "ribosome assembly in cells")]
    for name, body in first:
        _, r1 = await _ingest(eng, name, body)
    for i in range(3):
        await _ingest(eng, f"more{i}.md", f"kinase inhibitor study {i}")
    past = await eng.search("kinase cells", as_of=r1, top_k=10)
    now = await eng.search("kinase cells", top_k=10)
    with fresh_database(sibling_url(database_url, "_fresh")) as url:
        async with ContextEngine(make_config(url), embedder=WordEmbedder()) as fresh:
            for name, body in first:
                await _ingest(fresh, name, body)
            expected = await fresh.search("kinase cells", top_k=10)
    assert [(h.document_name, h.score) for h in past.hits] == [(h.document_name, h.score) for h in expected.hits]
    assert [(h.document_name, h.score) for h in now.hits] != [(h.document_name, h.score) for h in past.hits]


@pytest.mark.parametrize(
    ("as_of", "message"),
    [
        ("3", "as_of must be a non-negative integer revision, not str"),
        (1.0, "as_of must be a non-negative integer revision, not float"),
        (True, "as_of must be a non-negative integer revision, not bool"),
        (-1, "as_of must be a non-negative integer revision; got -1"),
        (99, "as_of 99 is beyond the current revision 1"),
    ],
)
async def test_a_bad_as_of_is_a_precise_400_everywhere(eng: ContextEngine, as_of: object, message: str) -> None:
    doc, _ = await _ingest(eng, "x.md", "some text")
    calls = [
        eng.search("text", as_of=as_of),  # type: ignore[arg-type]
        eng.knowledge_query("text", as_of=as_of, expand=False, rerank=False),  # type: ignore[arg-type]
        eng.get_document(doc, as_of=as_of),  # type: ignore[arg-type]
        eng.list_documents(as_of=as_of),  # type: ignore[arg-type]
        eng.stats(as_of=as_of),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(InvalidRequest) as caught:
            await call
        assert caught.value.status == 400 and caught.value.code == "invalid_request"
        assert caught.value.message == message


async def test_knowledge_query_as_of(eng: ContextEngine) -> None:
    doc, r1 = await _ingest(eng, "k.md", "Photosynthesis converts light into chemical energy.")
    await eng.delete_document(doc)
    result = await eng.knowledge_query("photosynthesis light", as_of=r1, expand=False, rerank=False)
    assert [m.source_id for m in result.matches] == [doc]
    assert (await eng.knowledge_query("photosynthesis light", expand=False, rerank=False)).matches == []


async def test_version_errors(eng: ContextEngine) -> None:
    a, _ = await _ingest(eng, "a.md", "first document")
    b, _ = await _ingest(eng, "b.md", "second document")
    await _ingest(eng, "b.md", "second document, revised")
    with pytest.raises(NotFound, match=f"version 2 of document {a} not found"):
        await eng.get_document(a, version=2)  # version 2 exists, but of the other document
    assert (await eng.get_document(b, version=2)).text == "second document, revised"
    with pytest.raises(InvalidRequest, match="version must be a positive integer"):
        await eng.get_document(a, version=0)
    with pytest.raises(InvalidRequest, match="pass as_of or version, not both"):
        await eng.get_document(a, version=1, as_of=1)


async def test_vacuum_removes_invisible_history_and_expires_older_reads(eng: ContextEngine) -> None:
    doc, r1 = await _ingest(eng, "v.md", "version one of the vacuum text")
    _, r2 = await _ingest(eng, "v.md", "version two of the vacuum text")
    _, r3 = await _ingest(eng, "v.md", "version three of the vacuum text")
    report = await eng.vacuum_revisions(r2)
    assert report.horizon == r2 and report.versions_removed == 1 and report.chunks_removed == 1
    with pytest.raises(RevisionExpired) as caught:
        await eng.search("vacuum", as_of=r1)
    assert caught.value.status == 400 and caught.value.code == "revision_expired"
    assert f"before {r2}" in caught.value.message
    assert (await eng.get_document(doc, as_of=r2)).text == "version two of the vacuum text"
    assert [v.version for v in await eng.document_versions(doc)] == [2, 3]
    assert (await eng.search("vacuum three", as_of=r3)).hits[0].chunk_text == "version three of the vacuum text"
    with pytest.raises(InvalidRequest, match="beyond the current revision"):
        await eng.vacuum_revisions(r3 + 5)
    again = await eng.vacuum_revisions(r1)  # the horizon never moves back
    assert again.horizon == r2 and again.versions_removed == 0


async def test_the_cli_vacuums_and_refuses_a_revision_ahead(
    eng: ContextEngine, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    from context_engine.cli import main

    _, r1 = await _ingest(eng, "c.md", "first text of the command line document")
    _, r2 = await _ingest(eng, "c.md", "second text of the command line document")
    code = await asyncio.to_thread(main, ["vacuum-revisions", "--database-url", database_url, "--keep-after", str(r2)])
    out = capsys.readouterr()
    assert code == 0 and "1 versions and 1 chunks removed; oldest readable revision 2" in out.out
    with pytest.raises(RevisionExpired):
        await eng.get_document((await eng.list_documents()).documents[0].id, as_of=r1)
    code = await asyncio.to_thread(main, ["vacuum-revisions", "--database-url", database_url, "--keep-after", "50"])
    assert code == 1 and "keep_after 50 is beyond the current revision 2" in capsys.readouterr().err

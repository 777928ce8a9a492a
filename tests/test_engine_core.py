"""The engine on a real PostgreSQL: ingest, search, ACL on every read, revisions, bad input."""

from __future__ import annotations

import warnings

import pytest
from sqlalchemy import text

from context_engine import TRUSTED, ContextEngine, Forbidden, InvalidRequest, NotFound
from tests.conftest import make_config

HR = (
    "# Leave\n\nAnnual leave accrues at two days per month for every band-three employee.\n\n"
    "# Sick\n\nSick leave needs a doctor's note after three days."
)
ENG = "# Runbook\n\nRestart the ingest worker with systemctl restart ingest-worker when the queue stalls."
PUBLIC = "Public holidays this year: New Year's Day, Labour Day and Christmas Day."


async def _corpus(engine: ContextEngine) -> dict[str, str]:
    ids = {}
    for name, body, acl in (("hr-policy", HR, ["group:hr"]), ("runbook", ENG, ["group:eng"]), ("holidays", PUBLIC, [])):
        report = await engine.ingest(text=body, name=name, acl=acl, source_id="handbook")
        assert report.documents[0].status == "completed", report
        ids[name] = report.documents[0].document_id
    return ids


async def test_search_ranks_and_reports_usage(engine: ContextEngine) -> None:
    await _corpus(engine)
    result = await engine.search("annual leave band-three", principals=TRUSTED, top_k=3)
    top = result.hits[0]
    assert top.document_name == "hr-policy"
    assert top.section == "Leave"
    assert top.chunk_idx == 0
    assert "Annual leave" in top.chunk_text
    assert set(top.matched_by) >= {"fts", "vector"}
    # the trigram leg is off by default (fusion weight 0, see FusionConfig): it does not run; the graph
    # leg runs and reports why it added nothing (no graph tables here)
    assert result.usage["legs"] == ["fts", "vector", "graph"]
    assert set(result.usage["leg_hits"]) == {"fts", "vector", "graph"}
    assert result.usage["graph"]["reason"] == "graph_disabled"
    assert result.usage["timings_ms"]["total"] > 0
    assert [h.score for h in result.hits] == sorted((h.score for h in result.hits), reverse=True)


async def test_acl_applies_to_every_read(engine: ContextEngine) -> None:
    ids = await _corpus(engine)
    expected = {
        "hr": ({"hr-policy", "holidays"}, ["group:hr"]),
        "eng": ({"runbook", "holidays"}, ["group:eng"]),
        "anon": ({"holidays"}, []),
    }
    for who, (names, principals) in expected.items():
        result = await engine.search("leave holidays runbook restart", principals=principals, top_k=20)
        assert {h.document_name for h in result.hits} <= names, who
        listed = await engine.list_documents(principals=principals)
        assert {d.name for d in listed.documents} == names, who
        stats = await engine.stats(principals=principals)
        assert stats.documents == len(names), who
        for name, doc_id in ids.items():
            if name in names:
                assert (await engine.get_document(doc_id, principals=principals)).name == name
            else:
                with pytest.raises(NotFound) as hidden:
                    await engine.get_document(doc_id, principals=principals)
                with pytest.raises(NotFound) as missing:
                    await engine.get_document("00000000-0000-0000-0000-000000000000", principals=principals)
                assert hidden.value.status == missing.value.status == 404
    trusted = await engine.search("leave holidays runbook restart", principals=TRUSTED, top_k=20)
    assert {h.document_name for h in trusted.hits} == {"hr-policy", "runbook", "holidays"}


async def test_principals_none_warns_and_means_trusted(engine: ContextEngine) -> None:
    await _corpus(engine)
    with pytest.warns(DeprecationWarning, match="TRUSTED"):
        result = await engine.list_documents(principals=None)
    assert len(result.documents) == 3


async def test_acl_predicate_is_in_sql_for_every_leg(database_url: str) -> None:
    """A word only the HR document holds is never matched for an engineer, on any leg."""
    config = make_config(database_url, fusion={"weights": {"trigram": 0.4}})
    async with ContextEngine(config) as engine:
        await _corpus(engine)
        result = await engine.search("band-three", principals=["group:eng"], top_k=10)
        assert result.usage["legs"] == ["fts", "trigram", "vector", "graph"]
        assert all(h.document_name != "hr-policy" for h in result.hits)
        for leg in ("fts", "trigram"):
            assert result.usage["leg_hits"][leg] == 0
        # the HR caller does match the word on both lexical legs
        hr = await engine.search("band-three", principals=["group:hr"], top_k=10)
        assert hr.usage["leg_hits"]["fts"] > 0 and hr.usage["leg_hits"]["trigram"] > 0


async def test_identical_content_is_skipped_and_changes_make_versions(engine: ContextEngine) -> None:
    first = (await engine.ingest(text=PUBLIC, name="holidays")).documents[0]
    again = (await engine.ingest(text=PUBLIC, name="holidays")).documents[0]
    assert again.status == "skipped" and again.skip_reason == "unchanged"
    assert again.document_id == first.document_id
    changed = (await engine.ingest(text=PUBLIC + " And Boxing Day.", name="holidays")).documents[0]
    assert changed.status == "completed" and changed.version == 2
    assert changed.revision is not None and first.revision is not None and changed.revision > first.revision
    db = await engine.database()
    async with db.connect() as conn:
        versions = (
            await conn.execute(
                text(
                    "SELECT version, valid_from, valid_to FROM ce_document_versions "
                    "WHERE document_id = CAST(:d AS uuid) ORDER BY version"
                ),
                {"d": first.document_id},
            )
        ).all()
        current = await conn.scalar(
            text("SELECT count(*) FROM ce_chunks WHERE document_id = CAST(:d AS uuid) AND valid_to IS NULL"),
            {"d": first.document_id},
        )
    assert [(v, f, t) for v, f, t in versions] == [
        (1, first.revision, changed.revision),
        (2, changed.revision, None),
    ]
    assert current == changed.chunks
    hits = (await engine.search("Boxing Day", principals=TRUSTED)).hits
    assert hits and "Boxing Day" in hits[0].chunk_text


async def test_every_write_advances_the_revision(engine: ContextEngine) -> None:
    start = await engine.revision()
    doc = (await engine.ingest(text=PUBLIC, name="holidays")).documents[0]
    assert await engine.revision() == start + 1
    await engine.update_document(doc.document_id, principals=TRUSTED, attributes={"team": "people"})
    assert await engine.revision() == start + 2
    deleted_at = await engine.delete_document(doc.document_id, principals=TRUSTED)
    assert deleted_at == start + 3 == await engine.revision()
    with pytest.raises(NotFound):
        await engine.get_document(doc.document_id, principals=TRUSTED)
    db = await engine.database()
    async with db.connect() as conn:
        closed = await conn.scalar(
            # the update wrote version 2 (a metadata change is history); the delete closed it
            text(
                "SELECT valid_to FROM ce_document_versions WHERE document_id = CAST(:d AS uuid) "
                "ORDER BY version DESC LIMIT 1"
            ),
            {"d": doc.document_id},
        )
    assert closed == deleted_at
    assert (await engine.search("holidays", principals=TRUSTED)).hits == []


async def test_update_acl_moves_visibility_and_needs_held_acl(engine: ContextEngine) -> None:
    ids = await _corpus(engine)
    with pytest.raises(Forbidden):
        await engine.update_document(ids["holidays"], principals=["group:hr"], acl=["group:eng"])
    with pytest.raises(Forbidden):  # readable is not writable: a public document is not HR's to restrict
        await engine.update_document(ids["holidays"], principals=["group:hr"], acl=["group:hr"])
    await engine.update_document(ids["holidays"], principals=TRUSTED, acl=["group:hr"])
    anon = await engine.search("holidays Christmas", principals=[], top_k=10)
    assert anon.hits == []
    hr = await engine.search("holidays Christmas", principals=["group:hr"], top_k=10)
    assert "holidays" in {h.document_name for h in hr.hits}


async def test_ingest_under_unheld_acl_is_refused_and_writes_nothing(engine: ContextEngine) -> None:
    with pytest.raises(Forbidden):
        await engine.ingest(text=HR, name="hr", acl=["group:hr"], principals=["group:eng"])
    assert (await engine.stats(principals=TRUSTED)).documents == 0
    assert await engine.revision() == 0


async def test_bad_search_input(engine: ContextEngine) -> None:
    for query in ("", "   ", None, 5):
        with pytest.raises(InvalidRequest):
            await engine.search(query, principals=TRUSTED)  # type: ignore[arg-type]
    for top_k in (0, -1, 101, "3", True):
        with pytest.raises(InvalidRequest):
            await engine.search("leave", principals=TRUSTED, top_k=top_k)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        await engine.search("leave", principals=TRUSTED, document_ids=["not-a-uuid"])
    with pytest.raises(NotFound):
        await engine.get_document("not-a-uuid", principals=TRUSTED)


async def test_query_text_is_bound_never_spliced(engine: ContextEngine) -> None:
    await _corpus(engine)
    for query in ("'; DROP TABLE ce_chunks; --", "%", "a:* & !b | (", '"unclosed phrase', "-", "\\x00 leave"):
        await engine.search(query, principals=TRUSTED)
    assert (await engine.stats(principals=TRUSTED)).chunks > 0


async def test_undecodable_file_fails_cleanly(engine: ContextEngine) -> None:
    report = await engine.ingest(file=b"\x00\x01\x02\xff" * 100, name="blob.bin")
    doc = report.documents[0]
    assert doc.status == "failed"
    assert doc.failure_reason == "extraction_failed"
    assert doc.failure_message
    stored = await engine.get_document(doc.document_id, principals=TRUSTED)
    assert stored.status == "failed" and stored.chunk_count == 0
    assert (await engine.get_document(doc.document_id, principals=[])).error is None
    assert (await engine.stats(principals=TRUSTED)).chunks == 0


async def test_weight_zero_leg_does_not_run(database_url: str) -> None:
    from tests.conftest import make_config

    config = make_config(database_url, fusion={"weights": {"trigram": 0.0, "vector": 0.0, "graph": 0.0}})
    async with ContextEngine(config) as engine:
        await engine.ingest(text=PUBLIC, name="holidays")
        result = await engine.search("Christmas", principals=TRUSTED)
    assert result.usage["legs"] == ["fts"]
    assert "embed" not in result.usage["timings_ms"]
    assert result.hits[0].document_name == "holidays"


async def test_scope_narrows_to_sources_and_documents(engine: ContextEngine) -> None:
    ids = await _corpus(engine)
    await engine.ingest(text="Holiday rota for the support desk.", name="rota", source_id="support")
    only_support = await engine.search("holiday", principals=TRUSTED, source_ids=["support"], top_k=10)
    assert {h.source_id for h in only_support.hits} == {"support"}
    pinned = await engine.search("holiday", principals=TRUSTED, document_ids=[ids["holidays"]], top_k=10)
    assert {h.document_id for h in pinned.hits} == {ids["holidays"]}


def test_no_warning_for_explicit_principals() -> None:
    from context_engine.principals import resolve

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve([]) == ()
        assert resolve(TRUSTED) is None
        assert resolve(["a", "b"]) == ("a", "b")
    with pytest.raises(TypeError):
        resolve("group:hr")

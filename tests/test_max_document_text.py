"""``ingest.max_document_text_chars``: the text kept on the document row is cut, the chunks never are.

Real embedded PostgreSQL, embeddings from the fake OpenAI-compatible server on 127.0.0.1.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import text

from context_engine import TRUSTED, ContextEngine, ContextEngineConfig
from tests.conftest import make_config
from tests.fakes.http_server import FakeHTTPServer, fake_openai_embeddings
from tests.test_conformance import CLIENTS, fresh_database

DIM = 8
CAP = 120


def _sections(n: int, last: str = "the closing remark") -> str:
    """A document whose every section is its own chunk; only the last one says ``last``."""
    parts = [f"# Section {i}\n\nParagraph {i} describes topic number {i} in plain words." for i in range(n - 1)]
    parts.append(f"# Section {n - 1}\n\nParagraph {n - 1} ends with {last}.")
    return "\n\n".join(parts)


@pytest.fixture
def server() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer() as fake:
        fake.route("POST", "/v1/embeddings", fake_openai_embeddings(DIM))
        yield fake


def _config(database_url: str, server: FakeHTTPServer, cap: int | None) -> ContextEngineConfig:
    embedding = {"provider": "custom", "base_url": server.url("/v1"), "model": "m", "dim": DIM, "api_key": "k"}
    return make_config(database_url, embedding=embedding, ingest={"max_document_text_chars": cap})


async def _chunk_texts(engine: ContextEngine, document_id: str, version: int | None = None) -> list[str]:
    """The chunk texts of the current version (or of ``version``), in order."""
    which = "valid_to IS NULL" if version is None else "version = :v"
    db = await engine.services.db()
    async with db.connect() as conn:
        rows = await conn.execute(
            text(f"SELECT text FROM ce_chunks WHERE document_id = CAST(:d AS uuid) AND {which} ORDER BY position"),
            {"d": document_id, "v": version},
        )
        return [str(r[0]) for r in rows]


async def test_the_stored_text_is_cut_and_every_chunk_is_kept(database_url: str, server: FakeHTTPServer) -> None:
    body = _sections(8, "a zephyr quartet")
    async with ContextEngine(_config(database_url, server, CAP)) as engine:
        report = (await engine.ingest(text=body, name="long")).documents[0]
        doc = await engine.get_document(report.document_id or "", principals=TRUSTED)
        chunks = await _chunk_texts(engine, report.document_id or "")
        found = await engine.search("zephyr quartet", principals=TRUSTED)
        listed = (await engine.list_documents(principals=TRUSTED)).documents

    assert report.status == "completed" and report.text_truncated is True
    full = "\n\n".join(chunks)
    assert len(full) > CAP and len(chunks) == report.chunks == 8
    assert doc.text == full[:CAP] and doc.text_truncated is True and doc.meta["text_truncated"] is True
    assert "zephyr" not in doc.text
    # the cut words are still found: the chunk that holds them is stored whole
    assert found.hits and "a zephyr quartet" in found.hits[0].chunk_text
    assert [d.text_truncated for d in listed] == [True]


async def test_without_a_cap_or_under_it_nothing_is_cut(database_url: str, server: FakeHTTPServer) -> None:
    async with ContextEngine(_config(database_url, server, None)) as engine:
        uncapped = (await engine.ingest(text=_sections(8), name="uncapped")).documents[0]
        whole = await engine.get_document(uncapped.document_id or "", principals=TRUSTED)
        chunks = await _chunk_texts(engine, uncapped.document_id or "")
    async with ContextEngine(_config(database_url, server, 10_000)) as engine:
        short = (await engine.ingest(text=_sections(2), name="short")).documents[0]
        kept = await engine.get_document(short.document_id or "", principals=TRUSTED)
        short_chunks = await _chunk_texts(engine, short.document_id or "")

    assert uncapped.text_truncated is False and whole.text_truncated is False
    assert whole.text == "\n\n".join(chunks) and "text_truncated" not in whole.meta
    assert short.text_truncated is False and kept.text_truncated is False and kept.text == "\n\n".join(short_chunks)


async def test_a_new_version_says_whether_its_own_text_was_cut(database_url: str, server: FakeHTTPServer) -> None:
    async with ContextEngine(_config(database_url, server, CAP)) as engine:
        first = (await engine.ingest(text=_sections(8), name="doc")).documents[0]
        second = (await engine.ingest(text="A short note.", name="doc")).documents[0]
        now = await engine.get_document(second.document_id or "", principals=TRUSTED)
        then = await engine.get_document(first.document_id or "", principals=TRUSTED, version=1)
        first_chunks = await _chunk_texts(engine, first.document_id or "", version=1)

    assert first.text_truncated is True
    assert second.version == 2 and second.text_truncated is False
    assert now.text == "A short note." and now.text_truncated is False and "text_truncated" not in now.meta
    # a version read assembles the version's whole text from its chunks, so nothing of it is cut
    assert then.text == "\n\n".join(first_chunks) and len(then.text) > CAP and then.text_truncated is False


async def test_a_metadata_change_keeps_the_flag_with_the_cut_text(database_url: str, server: FakeHTTPServer) -> None:
    async with ContextEngine(_config(database_url, server, CAP)) as engine:
        report = (await engine.ingest(text=_sections(8), name="doc", acl=["group:a"])).documents[0]
        await engine.update_document(report.document_id or "", acl=["group:b"], principals=TRUSTED)
        doc = await engine.get_document(report.document_id or "", principals=TRUSTED)
    assert doc.acl == ["group:b"] and doc.text_truncated is True and len(doc.text or "") == CAP


@pytest.mark.parametrize("cap", [0, -5, "many"])
def test_a_cap_below_one_is_refused_naming_the_setting(cap: Any) -> None:
    with pytest.raises(ValidationError) as caught:
        ContextEngineConfig(ingest={"max_document_text_chars": cap})  # type: ignore[arg-type]
    assert "max_document_text_chars" in str(caught.value)


def test_the_route_reports_the_cut(pg_base_url: str, server: FakeHTTPServer) -> None:
    with fresh_database(pg_base_url) as url:
        engine = ContextEngine(_config(url, server, CAP))
        with CLIENTS["fastapi"](engine, lambda request: True, lambda request: TRUSTED) as send:
            stored = send(
                "POST",
                "/context/documents",
                json.dumps({"text": _sections(8), "name": "long"}).encode(),
                {"Content-Type": "application/json"},
            )
            doc_id = stored.body["documents"][0]["document_id"]
            read = send("GET", f"/context/documents/{doc_id}", None, {})
    assert stored.status == 201 and stored.body["documents"][0]["text_truncated"] is True
    assert read.status == 200 and read.body["text_truncated"] is True and len(read.body["text"]) == CAP


async def test_ingest_many_cuts_the_stored_text_and_reports_it_per_document(
    database_url: str, server: FakeHTTPServer
) -> None:
    long, short = _sections(8), "A short note."
    async with ContextEngine(_config(database_url, server, CAP)) as engine:
        answer = await engine.ingest_many([{"text": long, "name": "long"}, {"text": short, "name": "short"}])
        reports = [item.report for item in answer.items]
        assert [r.text_truncated for r in reports if r is not None] == [True, False]
        first, second = reports
        assert first is not None and second is not None and first.document_id and second.document_id
        cut = await engine.get_document(first.document_id, principals=TRUSTED)
        chunks = await _chunk_texts(engine, first.document_id)
        assert cut.text_truncated is True and cut.text == "\n\n".join(chunks)[:CAP]
        assert "the closing remark" in chunks[-1]  # every chunk kept
        whole = await engine.get_document(second.document_id, principals=TRUSTED)
        assert whole.text_truncated is False and whole.text == short

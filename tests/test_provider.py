"""The knowledge provider interface over the local engine: results by value, scope and bounds enforced."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest

from context_engine import ContextEngine
from context_engine.knowledge.provider import (
    MAX_HIT_TEXT_BYTES,
    UNTRUSTED_REFERENCE,
    KnowledgeScope,
    KnowledgeSource,
    LocalKnowledge,
    local_knowledge,
)
from tests.conftest import make_config
from tests.fakes.word_embedder import WordEmbedder

SCOPE = KnowledgeScope(source_ids=("run-docs",), principals=("agent",))


@pytest.fixture
async def kb(database_url: str) -> AsyncIterator[LocalKnowledge]:
    config = make_config(database_url)
    config.access.writers = ["agent"]  # the agent files public documents and may change them (write_access)
    async with ContextEngine(config, embedder=WordEmbedder()) as engine:
        yield local_knowledge(engine)


def _source(name: str, text: str, **kw: object) -> KnowledgeSource:
    return KnowledgeSource(name=name, text=text, source_id=str(kw.pop("source_id", "run-docs")), **kw)  # type: ignore[arg-type]


async def test_ingest_is_idempotent_by_key_and_refuses_other_content(kb: LocalKnowledge) -> None:
    first = await kb.ingest(SCOPE, _source("a.md", "Enzymes speed up reactions."), "k1")
    assert first.ok and first.value is not None and first.value.version == "1"
    again = await kb.ingest(SCOPE, _source("a.md", "Enzymes speed up reactions."), "k1")
    assert again.ok and again.value == first.value
    other = await kb.ingest(SCOPE, _source("a.md", "Something else entirely."), "k1")
    assert not other.ok and other.error is not None and other.error.code == "invalid"
    assert "'k1'" in other.error.message
    revision = await kb.revision(SCOPE)
    assert revision.ok and revision.value == first.value.revision


async def test_writes_outside_the_scope_are_scope_violations(kb: LocalKnowledge) -> None:
    outside = await kb.ingest(SCOPE, _source("x.md", "text", source_id="elsewhere"), "k")
    assert outside.error is not None and outside.error.code == "scope_violation"
    foreign_acl = await kb.ingest(SCOPE, _source("y.md", "text", acl=("admins",)), "k2")
    assert foreign_acl.error is not None and foreign_acl.error.code == "scope_violation"
    no_scope = await kb.revision(None)  # type: ignore[arg-type]
    assert no_scope.error is not None and no_scope.error.code == "scope_violation"
    host = KnowledgeScope(source_ids=("elsewhere",), principals=None)
    theirs = await kb.ingest(host, _source("z.md", "kept elsewhere", source_id="elsewhere"), "k3")
    assert theirs.ok and theirs.value is not None
    removed = await kb.remove(SCOPE, theirs.value.doc_id, "rm")
    assert removed.error is not None and removed.error.code == "scope_violation"
    got = await kb.get(SCOPE, theirs.value.doc_id, theirs.value.version)
    assert got.error is not None and got.error.code == "not_found"


async def test_search_bounds_marks_and_sources(kb: LocalKnowledge) -> None:
    await kb.ingest(SCOPE, _source("b.md", "Volcanoes erupt molten rock."), "kb")
    found = await kb.search(SCOPE, "volcanoes molten")
    assert found.ok and found.value
    hit = found.value[0]
    assert hit.trust == UNTRUSTED_REFERENCE and hit.name == "b.md" and hit.version == "1"
    for k in (0, 21, 2.5, True):
        bad = await kb.search(SCOPE, "volcanoes", k=k)  # type: ignore[arg-type]
        assert bad.error is not None and bad.error.code == "invalid" and "between 1 and 20" in bad.error.message
    wider = await kb.search(SCOPE, "volcanoes", sources=["run-docs", "other"])
    assert wider.error is not None and wider.error.code == "scope_violation"
    bad_as_of = await kb.search(SCOPE, "volcanoes", as_of=999)
    assert bad_as_of.error is not None and bad_as_of.error.code == "invalid"
    assert "not a revision handle of this store" in bad_as_of.error.message  # a scope with principals speaks in handles


async def test_search_text_is_capped_at_16_kb(database_url: str) -> None:
    async with ContextEngine(make_config(database_url, ingest={"chunk_tokens": 1024}), embedder=WordEmbedder()) as eng:
        await _capped_search(local_knowledge(eng))


async def _capped_search(kb: LocalKnowledge) -> None:
    paragraph = "Glaciers carve valleys over millennia, très lentement. " * 40  # two-byte characters too
    for i in range(16):
        result = await kb.ingest(SCOPE, _source(f"g{i}.md", f"{paragraph} Glacier number {i}."), f"g{i}")
        assert result.ok
    found = await kb.search(SCOPE, "glaciers valleys", k=20)
    assert found.ok and found.value is not None
    total = sum(len(h.text.encode("utf-8")) for h in found.value)
    assert MAX_HIT_TEXT_BYTES - 4 < total <= MAX_HIT_TEXT_BYTES  # a cut never splits a character
    assert found.value[-1].truncated and not any(h.truncated for h in found.value[:-1])


async def test_remove_then_search_as_of_the_earlier_revision(kb: LocalKnowledge) -> None:
    admitted = await kb.ingest(SCOPE, _source("c.md", "Comets have icy nuclei."), "kc")
    assert admitted.ok and admitted.value is not None
    doc, at = admitted.value.doc_id, admitted.value.revision
    removed = await kb.remove(SCOPE, doc, "rm-c")
    assert removed.ok and removed.value is None
    revision = (await kb.revision(SCOPE)).value
    retried = await kb.remove(SCOPE, doc, "rm-c")
    assert retried.ok and (await kb.revision(SCOPE)).value == revision
    assert (await kb.search(SCOPE, "comets icy")).value == []
    past = await kb.search(SCOPE, "comets icy", as_of=at)
    assert past.ok and past.value is not None and [h.doc_id for h in past.value] == [doc]
    assert past.value[0].version == "1"
    got = await kb.get(SCOPE, doc, "1")
    assert got.ok and got.value is not None and got.value.text == "Comets have icy nuclei."


async def test_get_refuses_bad_versions(kb: LocalKnowledge) -> None:
    a = (await kb.ingest(SCOPE, _source("d.md", "first"), "kd")).value
    b = (await kb.ingest(SCOPE, _source("e.md", "second"), "ke")).value
    assert a is not None and b is not None
    await kb.ingest(SCOPE, _source("e.md", "second, revised"), "ke2")
    other = await kb.get(SCOPE, a.doc_id, "2")  # version 2 exists, but of the other document
    assert other.error is not None and other.error.code == "not_found"
    for bad in ("abc", "0", "-1", ""):
        result = await kb.get(SCOPE, a.doc_id, bad)
        assert result.error is not None and result.error.code == "invalid"
    assert (await kb.get(SCOPE, b.doc_id, "2")).value.text == "second, revised"  # type: ignore[union-attr]


async def test_an_unreachable_store_is_unavailable_and_a_slow_one_times_out(
    kb: LocalKnowledge, caplog: pytest.LogCaptureFixture
) -> None:
    await kb.ingest(SCOPE, _source("f.md", "fast text"), "kf")
    slow = LocalKnowledge(kb.engine, timeout=0.000001)
    timed_out = await slow.search(SCOPE, "fast text")
    assert timed_out.error is not None and timed_out.error.code == "timeout"
    config = make_config("postgresql://nobody@127.0.0.1:9/none", storage={"auto_migrate": True, "pool_timeout": 2})
    async with ContextEngine(config, embedder=WordEmbedder()) as down:
        with caplog.at_level(logging.INFO, logger="context_engine.knowledge.provider"):
            result = await local_knowledge(down).revision(SCOPE)
    assert result.error is not None and result.error.code == "unavailable"
    assert "nobody" not in result.error.message
    assert any("revision" in r.getMessage() and "unavailable" in r.getMessage() for r in caplog.records)

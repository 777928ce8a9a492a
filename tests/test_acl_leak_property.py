"""No read path leaks a document: for random corpora, ACLs and callers, every read (search, list
with paging, get, stats, knowledge query) returns exactly what a Python oracle computes from the
ACLs, and a forbidden id answers exactly like a missing one."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_engine import TRUSTED, ContextEngine, NotFound
from context_engine.embeddings.base import Embedder, InputKind
from context_engine.knowledge.provider import KnowledgeScope, local_knowledge
from tests.conftest import make_config

GROUPS = ("g1", "g2", "g3")
WORDS = ("zebra", "harbour", "ledger", "orbit", "meadow", "copper", "lantern", "quartz")


class WordEmbedder(Embedder):
    """A deterministic bag-of-words vector: fast, and every text shares the 'zebra' direction."""

    provider, model, dim, max_input_tokens = "test", "words", 16, 512

    async def embed(self, texts: list[str], *, kind: InputKind = "document") -> list[list[float]]:
        out = []
        for text in texts:
            vec = [0.0] * self.dim
            for word in text.lower().split():
                vec[int(hashlib.sha256(word.encode()).hexdigest(), 16) % self.dim] += 1.0
            out.append(vec)
        return out

    async def aclose(self) -> None:
        return None


documents = st.lists(
    st.tuples(st.frozensets(st.sampled_from(GROUPS), max_size=2), st.lists(st.sampled_from(WORDS[1:]), max_size=4)),
    min_size=1,
    max_size=7,
)
callers = st.lists(st.frozensets(st.sampled_from(GROUPS), max_size=3), min_size=1, max_size=3)


@pytest.fixture(scope="module")
async def leak_engine(pg_base_url: str) -> AsyncIterator[ContextEngine]:
    from tests.test_conformance import fresh_database

    with fresh_database(pg_base_url) as url:
        async with ContextEngine(make_config(url), embedder=WordEmbedder()) as engine:
            yield engine


def visible(acl: frozenset[str], principals: frozenset[str]) -> bool:
    return not acl or bool(acl & principals)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(corpus=documents, who=callers)
async def test_every_read_returns_exactly_what_the_acl_allows(
    leak_engine: ContextEngine, corpus: list[tuple[frozenset[str], list[str]]], who: list[frozenset[str]]
) -> None:
    engine = leak_engine
    page = await engine.list_documents(principals=TRUSTED, limit=500)
    for doc in page.documents:
        await engine.delete_document(doc.id, principals=TRUSTED)
    acls: dict[str, frozenset[str]] = {}
    for i, (acl, words) in enumerate(corpus):
        text = " ".join(["zebra", *words, f"item{i}"])
        report = await engine.ingest(text=text, name=f"d{i}.md", acl=sorted(acl))
        acls[report.documents[0].document_id] = acl  # type: ignore[index]
    for principals in who:
        caller = sorted(principals)
        expected = {d for d, acl in acls.items() if visible(acl, principals)}
        found = await engine.search("zebra", principals=caller, top_k=100)
        assert {h.document_id for h in found.hits} == expected
        listed: list[str] = []
        cursor = None
        while True:
            got = await engine.list_documents(principals=caller, limit=2, cursor=cursor)
            listed += [d.id for d in got.documents]
            cursor = got.next_cursor
            if cursor is None:
                break
        assert sorted(listed) == sorted(expected) and len(listed) == len(set(listed))
        stats = await engine.stats(principals=caller)
        assert (stats.documents, stats.chunks) == (len(expected), len(expected))
        answer = await engine.knowledge_query("zebra", principals=caller, expand=False, rerank=False, top_k=20)
        assert {m.source_id for m in answer.matches} == expected
        missing = str(uuid.uuid4())
        with pytest.raises(NotFound) as absent:
            await engine.get_document(missing, principals=caller)
        for doc_id in acls:
            if doc_id in expected:
                assert (await engine.get_document(doc_id, principals=caller)).id == doc_id
            else:
                with pytest.raises(NotFound) as hidden:
                    await engine.get_document(doc_id, principals=caller)
                assert (hidden.value.status, hidden.value.code) == (absent.value.status, absent.value.code)
                assert hidden.value.message.replace(doc_id, "ID") == absent.value.message.replace(missing, "ID")


changes = st.lists(st.one_of(st.frozensets(st.sampled_from(GROUPS), max_size=2), st.none()), min_size=1, max_size=7)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(corpus=documents, later=changes, who=callers)
async def test_history_reads_apply_the_acl_of_then_and_of_now(
    leak_engine: ContextEngine,
    corpus: list[tuple[frozenset[str], list[str]]],
    later: list[frozenset[str] | None],
    who: list[frozenset[str]],
) -> None:
    """After a re-ACL (``frozenset``) or a delete (``None``) of each document, every history read
    as of the first revision (search, list, get as of it and by version, versions, stats, knowledge
    query) shows a document only to a caller who could read it then and can read it now."""
    engine = leak_engine
    for doc in (await engine.list_documents(principals=TRUSTED, limit=500)).documents:
        await engine.delete_document(doc.id, principals=TRUSTED)
    then: dict[str, frozenset[str]] = {}
    for i, (acl, words) in enumerate(corpus):
        text = " ".join(["zebra", *words, f"item{i}"])
        report = await engine.ingest(text=text, name=f"h{i}.md", acl=sorted(acl))
        then[report.documents[0].document_id] = acl  # type: ignore[index]
    r0 = await engine.revision_handle(await engine.revision())  # the callers below are not trusted: a handle
    now: dict[str, frozenset[str]] = dict(then)
    for doc_id, change in zip(then, later, strict=False):
        if change is None:
            await engine.delete_document(doc_id, principals=TRUSTED)  # judged under its last ACL
        else:
            await engine.update_document(doc_id, acl=sorted(change), principals=TRUSTED)
            now[doc_id] = change
    for principals in who:
        caller = sorted(principals)
        expected = {d for d in then if visible(then[d], principals) and visible(now[d], principals)}
        found = await engine.search("zebra", principals=caller, top_k=100, as_of=r0)
        assert {h.document_id for h in found.hits} == expected
        listed = await engine.list_documents(principals=caller, limit=500, as_of=r0)
        assert sorted(d.id for d in listed.documents) == sorted(expected)
        stats = await engine.stats(principals=caller, as_of=r0)
        assert (stats.documents, stats.chunks) == (len(expected), len(expected))
        answer = await engine.knowledge_query(
            "zebra", principals=caller, expand=False, rerank=False, top_k=20, as_of=r0
        )
        assert {m.source_id for m in answer.matches} == expected
        provider = local_knowledge(engine)
        ceiling = KnowledgeScope(source_ids=("default",), principals=tuple(caller))
        past = await provider.search(ceiling, "zebra", k=20, as_of=r0)
        assert past.ok and past.value is not None and {h.doc_id for h in past.value} == expected
        for doc_id in then:
            got = await provider.get(ceiling, doc_id, "1")
            assert got.ok == (doc_id in expected)
        for doc_id in then:
            reads = [
                lambda d=doc_id, c=caller: engine.get_document(d, principals=c, as_of=r0),
                lambda d=doc_id, c=caller: engine.get_document(d, principals=c, version=1),
                lambda d=doc_id, c=caller: engine.document_versions(d, principals=c),
            ]
            if doc_id in expected:
                assert (await reads[0]()).id == doc_id
                assert (await reads[1]()).version == 1
                assert 1 in [v.version for v in await reads[2]()]
                continue
            for read in reads[:2]:
                with pytest.raises(NotFound):
                    await read()
            if not visible(now[doc_id], principals):
                with pytest.raises(NotFound):
                    await reads[2]()
            else:  # readable now (re-ACLed to the caller), not then: only the versions of now are listed
                assert 1 not in [v.version for v in await reads[2]()]

"""The document full-text leg: whole-document BM25 against the same BM25 computed here in Python
from the stored chunks, its statistics scoped like the chunk leg's (ACL, sources, revision, today's
ACL for history), and the leg served at every door."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import pytest
from sqlalchemy import text

from context_engine import TRUSTED, ContextEngine
from context_engine.retrieval import registry
from context_engine.retrieval.legs.document_fts import document_fts_leg
from context_engine.storage.predicates import ReadScope
from tests.conftest import make_config
from tests.fakes.word_embedder import WordEmbedder

WORDS = ["kinase", "tumour", "ribosome", "protein", "folding", "mitochondria", "insulin", "neuron"]


def body(i: int) -> str:
    """Two or three paragraphs per document, the query words spread over them, long enough that
    each paragraph is a chunk of its own at ``chunk_tokens`` 16."""
    paragraphs = []
    for p in range(2 + i % 2):
        picked = [w for j, w in enumerate(WORDS) if (i + p * 3 + j) % (2 + p) == 0]
        filler = " ".join(f"filler{(i * 7 + p + k) % 11}" for k in range(6 + (i + p) % 5))
        paragraphs.append(f"Paragraph {p} of note {i}: {' '.join(picked * (1 + (i + p) % 2))} {filler}.")
    return "\n\n".join(paragraphs)


async def stored_rows(engine: ContextEngine) -> tuple[list[tuple[Any, ...]], dict[int, dict[str, int]]]:
    """Every chunk row (current and past) with its document's ACL of today (the last one it had,
    once deleted), and each chunk's lexemes with their frequencies."""
    db = await engine.database()
    async with db.connect() as conn:
        chunks = (
            await conn.execute(
                text(
                    "SELECT c.id, CAST(c.document_id AS text), c.acl, c.source_id, c.tsv_tokens, c.valid_from, "
                    "c.valid_to, coalesce((SELECT d.acl FROM ce_documents d WHERE d.id = c.document_id), "
                    "(SELECT v.acl FROM ce_document_versions v WHERE v.document_id = c.document_id "
                    "ORDER BY v.version DESC LIMIT 1)) FROM ce_chunks c"
                )
            )
        ).all()
        terms: dict[int, dict[str, int]] = {}
        for cid, lexeme, tf in await conn.execute(
            text("SELECT c.id, u.lexeme, coalesce(array_length(u.positions, 1), 1) FROM ce_chunks c, unnest(c.tsv) u")
        ):
            terms.setdefault(int(cid), {})[str(lexeme)] = int(tf)
    return list(chunks), terms


def reference(
    chunks: Sequence[tuple[Any, ...]],
    terms: dict[int, dict[str, int]],
    query_terms: Sequence[str],
    *,
    principals: tuple[str, ...] | None,
    as_of: int | None = None,
    documents: Sequence[str] | None = None,
    limit: int = 10,
) -> list[tuple[int, float]]:
    """Okapi BM25 (k1 1.2, b 0.75) over documents, each the bag of its visible chunks, as the leg
    answers it: every visible chunk of the ``limit`` best documents, with the document's score."""

    def visible(row: tuple[Any, ...]) -> bool:
        _, _, acl, _, _, valid_from, valid_to, acl_now = row
        if as_of is None:
            live = valid_to is None
        else:
            live = valid_from <= as_of and (valid_to is None or valid_to > as_of)
        if not live:
            return False
        if principals is None:
            return True
        readable = not acl or bool(set(acl) & set(principals))
        if as_of is not None:  # a past read also needs today's ACL
            readable = readable and acl_now is not None and (not acl_now or bool(set(acl_now) & set(principals)))
        return readable

    docs: dict[str, dict[str, Any]] = {}
    for row in chunks:
        if visible(row):
            doc = docs.setdefault(row[1], {"length": 0, "tf": {}, "chunks": []})
            doc["length"] += row[4]
            doc["chunks"].append(row[0])
            for lexeme, tf in terms.get(row[0], {}).items():
                doc["tf"][lexeme] = doc["tf"].get(lexeme, 0) + tf
    n = len(docs)
    avgdl = max(sum(d["length"] for d in docs.values()) / max(n, 1), 1)
    scores: dict[str, float] = {}
    for term in set(query_terms):
        df = sum(1 for d in docs.values() if term in d["tf"])
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for doc_id, d in docs.items():
            if documents is not None and doc_id not in documents:
                continue
            if term in d["tf"]:
                tf = d["tf"][term]
                scores[doc_id] = scores.get(doc_id, 0.0) + idf * tf * 2.2 / (
                    tf + 1.2 * (0.25 + 0.75 * d["length"] / avgdl)
                )
    best = sorted(scores.items(), key=lambda p: (-p[1], p[0]))[:limit]
    return [(cid, score) for doc_id, score in best for cid in sorted(docs[doc_id]["chunks"])]


async def lexemes(engine: ContextEngine, query: str) -> list[str]:
    db = await engine.database()
    async with db.connect() as conn:
        found = await conn.scalar(text("SELECT tsvector_to_array(to_tsvector('english', :q))"), {"q": query})
    return list(found)


async def leg(
    engine: ContextEngine, query: str, scope: ReadScope, limit: int = 10, *, postings: bool = True
) -> list[tuple[int, float]]:
    db = await engine.database()
    return await document_fts_leg(db, query, scope, limit=limit, config="english", match="any", postings=postings)


def assert_same(found: list[tuple[int, float]], expected: list[tuple[int, float]], *case: Any) -> None:
    assert [cid for cid, _ in found] == [cid for cid, _ in expected], case
    assert [s for _, s in found] == pytest.approx([s for _, s in expected], rel=1e-9), case


QUERIES = ("kinase tumour", "protein folding neuron", "insulin mitochondria ribosome kinase", "neuron")


def config(database_url: str, **overrides: Any) -> Any:
    return make_config(database_url, ingest={"chunk_tokens": 16}, **overrides)


async def test_whole_document_bm25_matches_python_over_the_stored_chunks(database_url: str) -> None:
    async with ContextEngine(config(database_url), embedder=WordEmbedder()) as engine:
        for i in range(30):
            acl = ["group:x"] if i % 3 == 0 else []
            await engine.ingest(text=body(i), name=f"n{i}.md", acl=acl, source_id="a" if i % 2 else "b")
        chunks, terms = await stored_rows(engine)
        per_doc: dict[str, int] = {}
        for row in chunks:
            per_doc[row[1]] = per_doc.get(row[1], 0) + 1
        assert min(per_doc.values()) >= 2  # every document spans chunks: the case this leg is for
        for query in QUERIES:
            query_terms = await lexemes(engine, query)
            for principals in (None, (), ("group:x",)):
                expected = reference(chunks, terms, query_terms, principals=principals)
                assert expected
                assert_same(await leg(engine, query, ReadScope(principals)), expected)
                # scored from each chunk's tsvector instead of the postings: the same answer
                assert_same(await leg(engine, query, ReadScope(principals), postings=False), expected)
            # a source filter scopes the statistics too
            in_a = [row for row in chunks if row[3] == "a"]
            assert_same(
                await leg(engine, query, ReadScope((), ["a"])), reference(in_a, terms, query_terms, principals=())
            )
            # a document pin narrows the candidates, not the statistics (as for the chunk leg)
            pinned = sorted(per_doc)[:7]
            assert_same(
                await leg(engine, query, ReadScope((), document_ids=pinned)),
                reference(chunks, terms, query_terms, principals=(), documents=pinned),
            )


async def test_words_spread_over_chunks_score_their_document_together(database_url: str) -> None:
    async with ContextEngine(config(database_url), embedder=WordEmbedder()) as engine:
        spread = "Kinase activity was measured in every sample we took.\n\n" + (
            "Separately, tumour growth slowed in the treated mice over weeks."
        )
        one_word = "Kinase kinase kinase assays were repeated in the lab for weeks.\n\nNothing else here at all."
        for name, text_ in (("spread.md", spread), ("one-word.md", one_word)):
            await engine.ingest(text=text_, name=name)
        for i in range(6):
            await engine.ingest(text=f"Unrelated note {i} about the weather and trains.", name=f"u{i}.md")
        weights = {"fts": 0.0, "vector": 0.0, "document_fts": 1.0}
        with_doc = ContextEngine(config(database_url, fusion={"weights": weights}), embedder=WordEmbedder())
        async with with_doc:
            found = await with_doc.search("kinase tumour", principals=TRUSTED, top_k=5, group_by="document")
    assert [d.document_name for d in found.documents or []][:2] == ["spread.md", "one-word.md"]
    first = (found.documents or [])[0]
    assert len(first.passages) >= 2 and all("document_fts" in p.matched_by for p in first.passages)


async def test_hidden_documents_change_neither_results_nor_scores(database_url: str) -> None:
    async with ContextEngine(config(database_url), embedder=WordEmbedder()) as engine:
        for i in range(8):
            await engine.ingest(text=body(i), name=f"n{i}.md")
        before = {q: await leg(engine, q, ReadScope(())) for q in QUERIES}
        for i in range(8, 14):  # restricted documents, full of the query's words
            await engine.ingest(text=(" ".join(WORDS) + " ") * 5 + "\n\n" + body(i), name=f"s{i}.md", acl=["group:sec"])
        for query in QUERIES:
            assert_same(await leg(engine, query, ReadScope(())), before[query], query)
            insider = await leg(engine, query, ReadScope(("group:sec",)))
            assert insider != before[query]
            # the same rows in another order of summation may differ in the last bit
            assert_same(await leg(engine, query, ReadScope(None)), insider, query)


async def test_a_past_revision_is_scored_as_it_was_under_todays_acl(database_url: str) -> None:
    async with ContextEngine(config(database_url), embedder=WordEmbedder()) as engine:
        ids = []
        for i in range(10):
            report = await engine.ingest(text=body(i), name=f"n{i}.md", acl=["group:x"] if i % 2 else [])
            ids.append(report.documents[0].document_id)
        then = int(report.documents[0].revision or 0)
        assert then > 0
        # after the revision: new text for one, one deleted, one restricted away from group:x
        await engine.ingest(text=body(20), name="n0.md", principals=TRUSTED)
        await engine.delete_document(ids[2], principals=TRUSTED)
        await engine.update_document(ids[3], acl=["group:other"], principals=TRUSTED)
        chunks, terms = await stored_rows(engine)
        for query in QUERIES:
            query_terms = await lexemes(engine, query)
            for principals in (None, (), ("group:x",)):
                past = await leg(engine, query, ReadScope(principals, as_of=then))
                expected = reference(chunks, terms, query_terms, principals=principals, as_of=then)
                assert_same(past, expected, query, principals)
                now = reference(chunks, terms, query_terms, principals=principals)
                assert_same(await leg(engine, query, ReadScope(principals)), now)
                # the postings follow a new version, a delete and an ACL change as the chunks do
                assert_same(await leg(engine, query, ReadScope(principals), postings=False), now)
            # the restricted document counts for nobody in group:x, not even in the past
            revoked = {row[0] for row in chunks if row[1] == ids[3]}
            assert not revoked & {cid for cid, _ in await leg(engine, query, ReadScope(("group:x",), as_of=then))}


# ------------------------------------------------------------------------------------------ doors

DOORS_TEXT = {
    "spread.md": "Kinase activity was measured in every sample.\n\nTumour growth slowed in the treated mice.",
    "hidden.md": "Kinase and tumour, kinase and tumour, for the oncology group only.\n\nMore tumour kinase.",
}


def test_the_leg_is_registered_and_off_unless_weighted() -> None:
    assert "document_fts" in registry.names()
    assert registry.weights(make_config("postgresql://unused/x").fusion.weights)["document_fts"] == 0


async def test_the_leg_serves_search_and_knowledge_in_process(database_url: str) -> None:
    weights = {"document_fts": 1.0}
    async with ContextEngine(config(database_url, fusion={"weights": weights}), embedder=WordEmbedder()) as engine:
        await engine.ingest(text=DOORS_TEXT["spread.md"], name="spread.md")
        await engine.ingest(text=DOORS_TEXT["hidden.md"], name="hidden.md", acl=["group:onc"])
        result = await engine.search("kinase tumour", principals=[], top_k=5)
        assert "document_fts" in result.usage["legs"]
        assert {h.document_name for h in result.hits} == {"spread.md"}
        assert all("document_fts" in h.matched_by for h in result.hits)
        answer = await engine.knowledge_query("kinase tumour", principals=[], expand=False, rerank=False)
        matched = {m.source_name: m.matched_by for m in answer.matches}
        assert set(matched) == {"spread.md"} and "document_fts" in matched["spread.md"]


@pytest.mark.parametrize("adapter", ["fastapi", "flask", "django"])
def test_the_leg_serves_the_search_route_of_every_adapter(pg_base_url: str, adapter: str) -> None:
    from tests.test_conformance import CLIENTS, TOKEN, HostLog, fresh_database, host_callables

    with fresh_database(pg_base_url) as url:
        engine = ContextEngine(config(url, fusion={"weights": {"document_fts": 1.0}}), embedder=WordEmbedder())
        auth, principals = host_callables(HostLog())
        with CLIENTS[adapter](engine, auth, principals) as send:
            headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
            for name, acl in (("spread.md", []), ("hidden.md", ["group:onc"])):
                doc = {"text": DOORS_TEXT[name], "name": name, "acl": acl}
                reply = send(
                    "POST", "/context/documents", json.dumps(doc).encode(), {**headers, "X-Principals": "!trusted"}
                )
                assert reply.status == 201, reply.body
            asked = json.dumps({"query": "kinase tumour", "top_k": 5}).encode()
            reply = send("POST", "/context/search", asked, {**headers, "X-Principals": "group:eng"})
            assert reply.status == 200, reply.body
            hits = reply.body["hits"]
            assert "document_fts" in reply.body["usage"]["legs"]
            assert {h["document_name"] for h in hits} == {"spread.md"}
            assert all("document_fts" in h["matched_by"] for h in hits)
            reply = send("POST", "/context/search", asked, {**headers, "X-Principals": "group:onc"})
            assert {h["document_name"] for h in reply.body["hits"]} == {"spread.md", "hidden.md"}


def _document_leg_indexes() -> Any:
    return text(
        "SELECT indexname FROM pg_indexes WHERE tablename = 'ce_chunks' "
        "AND indexname IN ('ix_ce_chunks_id_document', 'ix_ce_chunks_document_length') ORDER BY indexname"
    )


async def test_its_chunk_indexes_are_built_only_for_a_store_that_runs_it(database_url: str) -> None:
    """Migration 0027 is the leg's own: a store with the leg off keeps its chunk writes as cheap as before,
    and weighting the leg builds the two indexes when the engine first reaches the database."""
    async with ContextEngine(config(database_url), embedder=WordEmbedder()) as engine:
        await engine.ingest(text=DOORS_TEXT["spread.md"], name="spread.md")
        async with (await engine.services.database.engine()).connect() as conn:
            assert (await conn.execute(_document_leg_indexes())).scalars().all() == []
    weights = {"document_fts": 1.0}
    async with ContextEngine(config(database_url, fusion={"weights": weights}), embedder=WordEmbedder()) as engine:
        result = await engine.search("kinase tumour", principals=[], top_k=5)
        assert {h.document_name for h in result.hits} == {"spread.md"}
        async with (await engine.services.database.engine()).connect() as conn:
            found = (await conn.execute(_document_leg_indexes())).scalars().all()
    assert found == ["ix_ce_chunks_document_length", "ix_ce_chunks_id_document"]

"""``search(group_by="document")``: ``top_k`` counts distinct documents, each scored by its best passage
and returned with its best passages, under the caller's ACL, deeper than the passage ceiling."""

from __future__ import annotations

import pytest

from context_engine import TRUSTED, ContextEngine, InvalidRequest
from tests.conftest import make_config


def _long_document(topic: str, paragraphs: int) -> str:
    return "\n\n".join(
        f"## Part {i}\n\nNotes on {topic} number {i}: the {topic} survey counted nests, eggs and chicks "
        f"along the coast in season {i}. " * 3
        for i in range(paragraphs)
    )


async def test_documents_are_counted_once_with_their_best_passages(database_url: str) -> None:
    config = make_config(database_url, search={"candidates": 8, "passages_per_document": 2})
    async with ContextEngine(config) as engine:
        for i in range(6):
            await engine.ingest(text=_long_document("penguin", 12), name=f"survey-{i}.md", acl=["team:a"])
        await engine.ingest(text=_long_document("penguin", 12), name="hidden.md", acl=["team:b"])
        await engine.ingest(text="Invoices are paid within thirty days.", name="billing.md", acl=["team:a"])
        passages = await engine.search("penguin survey nests", principals=["team:a"], top_k=10)
        grouped = await engine.search("penguin survey nests", principals=["team:a"], top_k=6, group_by="document")
    # passages: several per document, so ten passages cover fewer than six documents
    assert len({hit.document_id for hit in passages.hits}) < 6 and passages.documents is None
    documents = grouped.documents
    assert documents is not None and len(documents) == 6
    assert {doc.document_name for doc in documents} == {f"survey-{i}.md" for i in range(6)}
    assert len({doc.document_id for doc in documents}) == 6
    scores = [doc.score for doc in documents]
    assert scores == sorted(scores, reverse=True)
    for doc in documents:
        assert 1 <= len(doc.passages) <= 2
        assert all(p.document_id == doc.document_id for p in doc.passages)
        assert doc.score == doc.passages[0].score and doc.matched_by
    assert [h.chunk_id for h in grouped.hits] == [p.chunk_id for d in documents for p in d.passages]
    # candidates 8 per leg could not hold six documents of twelve passages each: the legs ran deeper
    assert grouped.usage["group_by"]["depth"] > 8


async def test_document_top_k_reaches_past_the_passage_ceiling(database_url: str) -> None:
    async with ContextEngine(make_config(database_url)) as engine:
        for i in range(105):
            await engine.ingest(text=f"Harbour log {i}: the ferry left at dawn.", name=f"log-{i}.md")
        grouped = await engine.search("ferry harbour log", principals=TRUSTED, top_k=150, group_by="document")
        with pytest.raises(InvalidRequest, match="top_k must be an integer between 1 and 100"):
            await engine.search("ferry", principals=TRUSTED, top_k=150)
        with pytest.raises(InvalidRequest, match="group_by"):
            await engine.search("ferry", principals=TRUSTED, group_by="section")
    assert grouped.documents is not None and len(grouped.documents) == 105

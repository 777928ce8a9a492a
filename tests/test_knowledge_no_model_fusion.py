"""``knowledge_query`` with no model ranks what ``/search`` ranks: the question searched alone is
fused with ``fusion.method`` (convex by default, RRF when configured), not always RRF, so the
no-model path cannot score below plain search."""

from __future__ import annotations

from typing import Any

import pytest

from context_engine import TRUSTED, ContextEngine
from tests.conftest import make_config
from tests.fakes.word_embedder import WordEmbedder

WORDS = ("kinase", "tumour", "protein", "neuron", "insulin")
NOTES = {
    f"note{i}.md": (
        f"Note {i} about {' '.join(w for j, w in enumerate(WORDS) if (i + j) % 3)}."
        f"\n\n{'filler ' * (3 + i % 4)}kinase {'ribosome ' * (i % 3)}mitochondria {i}."
    )
    for i in range(12)
}
QUERIES = ("kinase tumour", "protein neuron insulin", "ribosome mitochondria kinase")


@pytest.mark.parametrize("fusion", [{}, {"method": "rrf", "k": 10}, {"weights": {"document_fts": 1.0}}])
async def test_the_no_model_path_ranks_as_search_ranks(database_url: str, fusion: dict[str, Any]) -> None:
    config = make_config(database_url, ingest={"chunk_tokens": 16}, fusion=fusion)
    async with ContextEngine(config, embedder=WordEmbedder()) as engine:
        for name, body in NOTES.items():
            await engine.ingest(text=body, name=name)
        for query in QUERIES:
            searched = await engine.search(query, top_k=8, principals=TRUSTED)
            answered = await engine.knowledge_query(query, top_k=8, expand=False, rerank=False, principals=TRUSTED)
            assert searched.hits, query
            assert [m.chunk_id for m in answered.matches] == [str(h.chunk_id) for h in searched.hits], (query, fusion)


async def test_a_list_question_without_list_shaped_passages_ranks_as_search_ranks(database_url: str) -> None:
    """An enumeration question reads deeper lists (``knowledge.enumeration_candidates``); with no
    list-shaped passage among them it answers /search's passages in /search's order, the deeper
    candidates only after them."""
    config = make_config(
        database_url,
        ingest={"chunk_tokens": 16},
        search={"candidates": 4},
        knowledge={"candidates": 4, "enumeration_candidates": 12},
    )
    async with ContextEngine(config, embedder=WordEmbedder()) as engine:
        for name, body in NOTES.items():
            await engine.ingest(text=body, name=name)
        for query in ("all kinase tumour", "list every protein neuron insulin"):
            answered = await engine.knowledge_query(query, top_k=8, expand=False, rerank=False, principals=TRUSTED)
            searched = await engine.search(query, top_k=4, principals=TRUSTED)  # 4 per leg, as usual
            assert searched.hits
            ids = [m.chunk_id for m in answered.matches]
            assert ids[: len(searched.hits)] == [str(h.chunk_id) for h in searched.hits], query
            assert len(ids) > len(searched.hits)  # the deeper candidates follow

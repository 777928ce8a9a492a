"""Fusion of the legs' candidates: convex (the default) and reciprocal rank fusion."""

from __future__ import annotations

import pytest

from context_engine import TRUSTED, ContextEngine
from context_engine.retrieval import registry
from context_engine.retrieval.fusion import convex, fuse, rrf
from context_engine.retrieval.fusion import shared_ranks as fusion_ranks
from tests.conftest import make_config


def test_convex_is_the_weighted_mean_of_min_max_normalised_scores() -> None:
    scored = {"fts": [(1, 9.0), (2, 5.0), (3, 1.0)], "vector": [(3, 0.8), (4, 0.6), (1, 0.4)]}
    fused = dict(convex(scored, {"fts": 1.0, "vector": 1.0}))
    # fts normalises to 1, 0.5, 0; vector to 1, 0.5, 0; a leg that missed a candidate gives it 0
    assert fused == pytest.approx({1: 0.5, 2: 0.25, 3: 0.5, 4: 0.25})
    weighted = convex(scored, {"fts": 3.0, "vector": 1.0})
    assert weighted[0] == (1, pytest.approx(0.75))  # (3 * 1 + 1 * 0) / 4
    # ties break on the smaller id, so the order is deterministic
    assert [i for i, _ in convex(scored, {"fts": 1.0, "vector": 1.0})] == [1, 3, 2, 4]


def test_convex_is_indifferent_to_a_legs_scale() -> None:
    """Per-query normalisation: BM25 in the hundreds or a cosine range of 0.02 weigh the same."""
    small = {"fts": [(1, 0.31), (2, 0.30), (3, 0.29)], "vector": [(3, 0.52), (2, 0.51), (1, 0.50)]}
    large = {"fts": [(1, 310.0), (2, 300.0), (3, 290.0)], "vector": [(3, 0.52), (2, 0.51), (1, 0.50)]}
    weights = {"fts": 1.25, "vector": 1.0}
    assert [i for i, _ in convex(small, weights)] == [i for i, _ in convex(large, weights)] == [1, 2, 3]


def test_convex_edge_cases() -> None:
    # one candidate, or all scoring alike: each is the leg's best
    assert convex({"fts": [(7, 2.0)]}, {"fts": 1.0}) == [(7, 1.0)]
    assert convex({"fts": [(1, 2.0), (2, 2.0)]}, {"fts": 1.0}) == [(1, 1.0), (2, 1.0)]
    # a leg that ran and found nothing keeps its weight; one weighted 0 or absent is ignored
    assert convex({"fts": [], "vector": [(5, 0.3)]}, {"fts": 1.0, "vector": 1.0}) == [(5, 0.5)]
    assert convex({"vector": [(5, 0.3)]}, {"fts": 1.0, "vector": 1.0}) == [(5, 1.0)]
    assert convex({"fts": [(1, 1.0)]}, {"fts": 0.0}) == []


def test_fuse_dispatches_on_the_method() -> None:
    scored = {"fts": [(1, 9.0), (2, 8.9), (3, 0.0)], "vector": [(2, 0.9), (1, 0.1), (3, 0.05)]}
    weights = {"fts": 1.0, "vector": 1.0}
    assert fuse("rrf", scored, weights, 10) == rrf({"fts": [1, 2, 3], "vector": [2, 1, 3]}, weights, 10)
    # RRF sees a tie by rank; convex sees that fts barely separates them and vector clearly does
    assert [i for i, _ in fuse("rrf", scored, weights, 10)] == [1, 2, 3]
    assert [i for i, _ in fuse("convex", scored, weights, 10)] == [2, 1, 3]


async def test_search_reports_and_follows_the_configured_fusion(database_url: str) -> None:
    docs = {
        "leave": "Annual leave accrues at two days per month for every employee.",
        "sick": "Sick leave needs a doctor's note after three days away.",
        "trains": "The night train to the coast leaves at nine every evening.",
    }
    results = {}
    for method in ("convex", "rrf"):
        async with ContextEngine(make_config(database_url, fusion={"method": method})) as engine:
            if method == "convex":
                for name, body in docs.items():
                    await engine.ingest(text=body, name=name)
            result = await engine.search("how much annual leave do employees get", principals=TRUSTED, top_k=3)
            assert result.usage["fusion"] == method
            assert result.hits[0].document_name == "leave"
            results[method] = result
    convex_hits = results["convex"].hits
    assert 0 < convex_hits[-1].score <= convex_hits[0].score <= 1.0
    rrf_hits = results["rrf"].hits
    fusion = make_config(database_url).fusion
    weights = registry.weights(fusion.weights)
    # ranked first by both legs: RRF's largest possible score, every weight over k + rank 1
    assert rrf_hits[0].matched_by == ["fts", "vector"]
    assert rrf_hits[0].score == pytest.approx(
        (weights["fts"] + weights["vector"]) / (fusion.k + 1), abs=1e-6
    )


def test_rrf_gives_a_document_legs_tied_chunks_one_rank() -> None:
    """A leg that scores documents hands every chunk of a document the document's score: named in
    ``shared``, its equal scores share the document's rank, so a three-chunk document does not push
    the next document three places down; unnamed, ranks are positions, as before."""
    by_document = [(1, 5.0), (2, 5.0), (3, 5.0), (4, 4.0), (5, 3.0)]
    assert fusion_ranks(by_document) == [(1, 1), (1, 2), (1, 3), (2, 4), (3, 5)]
    weights = {"document_fts": 1.0}
    shared = dict(fuse("rrf", {"document_fts": by_document}, weights, 10, ["document_fts"]))
    assert shared[4] == pytest.approx(1 / 12) and shared[1] == shared[3] == pytest.approx(1 / 11)
    positional = dict(fuse("rrf", {"document_fts": by_document}, weights, 10))
    assert positional[4] == pytest.approx(1 / 14) and positional == dict(
        rrf({"document_fts": [1, 2, 3, 4, 5]}, weights, 10)
    )
    # convex is unaffected: it reads scores, and equal scores normalise alike
    assert fuse("convex", {"document_fts": by_document}, weights, 10, ["document_fts"]) == convex(
        {"document_fts": by_document}, weights
    )

"""The evaluation harness: metrics, BEIR loading, and ``context-engine eval`` on a tiny generated dataset."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
from pathlib import Path

import psycopg
import pytest

from context_engine.cli import main
from context_engine.embeddings.base import Embedder, InputKind
from context_engine.evaluation import (
    CachingEmbedder,
    dedupe_documents,
    leg_configurations,
    load_beir,
    mrr_at_k,
    ndcg_at_k,
    percentile,
    recall_at_k,
    run_eval,
)
from tests.conftest import make_config

# Twelve short documents on distinct subjects; each query paraphrases one or two of them.
_DOCS = {
    "d1": ("Sourdough starter care", "Feed the starter flour and water daily and keep it at room temperature."),
    "d2": ("Bicycle chain maintenance", "Clean the chain with degreaser, then oil each link and wipe off the excess."),
    "d3": ("Tomato blight", "Blight spreads in wet weather; remove infected leaves and water tomatoes at the base."),
    "d4": (
        "Replacing a bicycle tyre",
        "Lever the tyre off, swap the inner tube and inflate to the rated pressure.",
    ),
    "d5": ("Espresso extraction", "Grind finer when the espresso shot runs fast; aim for thirty seconds."),
    "d6": ("Sea kayak rescue", "In a T-rescue the helper empties the capsized kayak across their deck."),
    "d7": ("Composting basics", "Mix green kitchen scraps with brown leaves and turn the heap every week."),
    "d8": ("Knitting a scarf", "Cast on forty stitches and knit every row in garter stitch."),
    "d9": ("Cast iron seasoning", "Rub a thin layer of oil on the pan and bake it upside down for an hour."),
    "d10": ("Bee swarm", "A swarm leaves the hive with the old queen when the colony outgrows its space."),
    "d11": ("Sharpening chisels", "Hone the bevel on a water stone, then flatten the back to remove the burr."),
    "d12": ("Houseplant watering", "Most houseplants die from too much water; let the soil dry between waterings."),
}
_QUERIES = {
    "q1": ("how do I look after a sourdough starter", {"d1": 1}),
    "q2": ("fix a flat bicycle tyre inner tube", {"d4": 1, "d2": 1}),
    "q3": ("why is my espresso shot running too fast", {"d5": 1}),
    "q4": ("honeybee colony swarming with the queen", {"d10": 1}),
}


def write_dataset(folder: Path) -> Path:
    """A BEIR folder: plain corpus, gzipped queries (one unjudged), qrels with its header line."""
    (folder / "qrels").mkdir(parents=True)
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as handle:
        for doc_id, (title, text) in _DOCS.items():
            handle.write(json.dumps({"_id": doc_id, "title": title, "text": text, "metadata": {}}) + "\n")
    with gzip.open(folder / "queries.jsonl.gz", "wt", encoding="utf-8") as handle:
        for query_id, (text, _) in _QUERIES.items():
            handle.write(json.dumps({"_id": query_id, "text": text, "metadata": {}}) + "\n")
        handle.write(json.dumps({"_id": "unjudged", "text": "kayak", "metadata": {}}) + "\n")
    with (folder / "qrels" / "test.tsv").open("w", encoding="utf-8") as handle:
        handle.write("query-id\tcorpus-id\tscore\n")
        for query_id, (_, rels) in _QUERIES.items():
            for doc_id, grade in rels.items():
                handle.write(f"{query_id}\t{doc_id}\t{grade}\n")
    return folder


# ---------------------------------------------------------------------------------------- metrics


def test_ndcg_matches_hand_computed_values() -> None:
    assert ndcg_at_k(["a", "b"], {"a": 1}) == 1.0
    assert ndcg_at_k(["x", "a"], {"a": 1}) == pytest.approx(1 / math.log2(3))
    # two relevant, one found at rank 2: (1/log2(3)) / (1 + 1/log2(3))
    assert ndcg_at_k(["x", "a"], {"a": 1, "b": 1}) == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))
    assert ndcg_at_k(["x"] * 10 + ["a"], {"a": 1}) == 0.0  # beyond the cut-off
    assert ndcg_at_k([], {"a": 1}) == 0.0


def test_recall_mrr_percentile_and_dedupe() -> None:
    assert recall_at_k(["a", "x", "b"], {"a": 1, "b": 1, "c": 1}) == pytest.approx(2 / 3)
    assert mrr_at_k(["x", "y", "a"], {"a": 1}) == pytest.approx(1 / 3)
    assert mrr_at_k(["x"], {"a": 1}) == 0.0
    assert percentile([5, 1, 3, 2, 4], 50) == 3
    assert percentile(list(range(1, 101)), 95) == 95
    # max score per document; first-seen order breaks ties
    assert dedupe_documents([("a", 0.5), ("b", 0.9), ("a", 0.95), ("c", 0.9)]) == ["a", "b", "c"]


def test_load_beir_reads_gzip_and_keeps_only_judged_queries(tmp_path: Path) -> None:
    data = load_beir(write_dataset(tmp_path / "tiny"))
    assert data.name == "tiny"
    assert len(data.corpus) == 12 and data.corpus["d3"][0] == "Tomato blight"
    assert set(data.queries) == {"q1", "q2", "q3", "q4"}  # "unjudged" is not in the test qrels
    assert data.qrels["q2"] == {"d4": 1, "d2": 1}
    with pytest.raises(FileNotFoundError, match=r"qrels/dev\.tsv"):
        load_beir(tmp_path / "tiny", split="dev")


class _CountingEmbedder(Embedder):
    """A deterministic stand-in that counts how many texts reach the model."""

    provider, model, dim, max_input_tokens = "test", "counting", 4, 64

    def __init__(self) -> None:
        self.calls = 0

    async def embed(self, texts: list[str], *, kind: InputKind = "document") -> list[list[float]]:
        self.calls += len(texts)
        return [[float(len(t)), float(sum(map(ord, t)) % 97), 1.0, float(kind == "query")] for t in texts]


async def test_caching_embedder_serves_saved_vectors_and_never_caches_queries(tmp_path: Path) -> None:
    # a text whose SHA-256 ends in a NUL byte: an "S32" array would have stripped it on save
    nul = next(t for t in (f"text {i}" for i in range(5000)) if hashlib.sha256(t.encode()).digest()[-1] == 0)
    path = tmp_path / "cache.npz"
    first = CachingEmbedder(_CountingEmbedder(), path)
    vectors = await first.embed(["alpha", nul, "alpha"])
    assert first.inner.calls == 2 and vectors[0] == vectors[2]  # type: ignore[attr-defined]
    first.save()
    second = CachingEmbedder(_CountingEmbedder(), path)
    assert await second.embed([nul, "alpha"]) == [vectors[1], vectors[0]]
    assert second.inner.calls == 0  # type: ignore[attr-defined]
    await second.embed(["alpha"], kind="query")
    assert second.inner.calls == 1  # type: ignore[attr-defined]
    assert second.key == first.inner.key and second.dim == 4


# ---------------------------------------------------------------------------------- the harness


def test_leg_configurations_follow_the_weights() -> None:
    config = make_config("postgresql://unused", fusion={"weights": {"trigram": 0.3}})
    assert list(leg_configurations(config)) == [
        "full-text leg alone",
        "trigram leg alone",
        "vector leg alone",
        "graph leg alone",
        "fused (configured)",
    ]
    assert leg_configurations(config)["trigram leg alone"]["fusion"]["weights"] == {
        "fts": 0.0,
        "trigram": 1.0,
        "vector": 0.0,
        "graph": 0.0,
        "document_fts": 0.0,
    }


async def test_run_eval_scores_each_leg_fused_and_bm25(tmp_path: Path, database_url: str) -> None:
    config = make_config(database_url)
    report = await run_eval(write_dataset(tmp_path / "tiny"), config=config, baselines=("bm25",))
    names = [row.name for row in report.rows]
    # every leg the configuration uses, alone, then fused; the trigram leg is off by default, and the
    # graph leg, which returns nothing with graph mode off, gets a note instead of a row of zeros
    assert names == ["full-text leg alone", "vector leg alone", "fused (configured)", "BM25 (bm25s, stemmed)"]
    assert any(note.startswith("graph leg alone not measured: it returns nothing here") for note in report.notes)
    assert report.documents == 12 and report.queries == 4 and report.chunks == 12
    for row in report.rows:
        assert 0.0 <= row.ndcg10 <= 1.0 and 0.0 <= row.recall100 <= 1.0 and 0.0 <= row.mrr10 <= 1.0
    fused = report.row("fused (configured)")
    assert fused.ndcg10 >= 0.8 and fused.mrr10 == 1.0  # the data is easy: each answer is found first
    assert fused.p50_ms is not None and fused.p95_ms is not None and fused.p95_ms >= fused.p50_ms
    assert report.row("vector leg alone").rankings["q4"][0] == "d10"
    # the corpus went into its own source of the caller's database and was removed afterwards
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM ce_documents").fetchone() == (0,)


def test_cli_eval_prints_the_table(tmp_path: Path, database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_dataset(tmp_path / "tiny")
    assert main(["migrate", "--database-url", database_url]) == 0
    assert main(["eval", "--data", str(data), "--database-url", database_url]) == 0
    out = capsys.readouterr().out
    assert "| configuration | nDCG@10 | R@100 | MRR@10 | p50 ms | p95 ms |" in out
    for label in ("full-text leg alone", "vector leg alone", "fused (configured)"):
        assert f"| {label} |" in out
    assert "| graph leg alone |" not in out  # graph mode is off: no row of zeros
    assert "| baseline: BM25 (bm25s, stemmed) |" in out
    assert "BEIR tiny: 12 documents (12 chunks), 4 queries" in out


def test_cli_eval_refuses_a_missing_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--data", str(tmp_path / "nowhere")]) == 1
    assert "no such folder" in capsys.readouterr().err

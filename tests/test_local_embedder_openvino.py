"""The OpenVINO backend of the local MiniLM (the ``openvino`` extra, part of the test install).

On a CPU with native bf16 its matrix products run in bfloat16, so its vectors are close to the fp32
ones rather than equal: the stated tolerance is cosine >= 0.999 per text against sentence-transformers'
reference vectors and against the numpy path (measured here: worst ~0.99996).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from context_engine.config import EmbeddingConfig
from context_engine.embeddings.encoder_layer import EncoderLayer, InputEmbeddings
from context_engine.embeddings.local import DEFAULT_MAX_TOKENS, INSTALL_COMMAND, LocalEmbedder, find_model_dir
from context_engine.embeddings.openvino_encoder import OpenVinoEncoder, openvino_available
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


def _tiny_weights(hidden: int, layers: int, positions: int) -> tuple[InputEmbeddings, list[EncoderLayer]]:
    rng = np.random.default_rng(3)

    def w(*shape: int, scale: float = 0.3) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    embeddings = InputEmbeddings(
        position=w(positions, hidden), token_type0=w(hidden), ln_w=1 + w(hidden, scale=0.1), ln_b=w(hidden)
    )
    stack = [
        EncoderLayer(
            qkv_w=w(hidden, 3 * hidden),
            qkv_b=w(3 * hidden),
            out_w=w(hidden, hidden),
            out_b=w(hidden),
            ln1_w=1 + w(hidden, scale=0.1),
            ln1_b=w(hidden),
            ffn_in_w=w(hidden, 4 * hidden),
            ffn_in_b=w(4 * hidden),
            ffn_out_w=w(4 * hidden, hidden),
            ffn_out_b=w(hidden),
            ln2_w=1 + w(hidden, scale=0.1),
            ln2_b=w(hidden),
        )
        for _ in range(layers)
    ]
    return embeddings, stack


def _reference_vectors(
    embeddings: InputEmbeddings, stack: list[EncoderLayer], rows: np.ndarray, mask: np.ndarray, heads: int
) -> np.ndarray:
    """BERT with mean pooling written out in float64, independent of the package's numpy path."""
    from math import erf

    def norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
        centred = x - x.mean(axis=-1, keepdims=True)
        return centred / np.sqrt((centred**2).mean(axis=-1, keepdims=True) + 1e-12) * weight + bias

    n, length, hidden = rows.shape
    dim = hidden // heads
    x = norm(rows + embeddings.position[:length] + embeddings.token_type0, embeddings.ln_w, embeddings.ln_b)
    gelu = np.vectorize(lambda v: 0.5 * v * (1.0 + erf(v / np.sqrt(2.0))))
    for layer in stack:
        q, k, v = np.split(x @ layer.qkv_w + layer.qkv_b, 3, axis=-1)
        q, k, v = (t.reshape(n, length, heads, dim).transpose(0, 2, 1, 3) for t in (q, k, v))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(dim) + np.where(mask[:, None, None, :] > 0, 0.0, -1e9)
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        context = (weights @ v).transpose(0, 2, 1, 3).reshape(n, length, hidden)
        h1 = norm(context @ layer.out_w + layer.out_b + x, layer.ln1_w, layer.ln1_b)
        x = norm(
            gelu(h1 @ layer.ffn_in_w + layer.ffn_in_b) @ layer.ffn_out_w + layer.ffn_out_b + h1,
            layer.ln2_w,
            layer.ln2_b,
        )
    pooled = (x * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
    return np.asarray(pooled / np.linalg.norm(pooled, axis=1, keepdims=True))


def test_compiled_model_does_embedding_norm_layers_and_pooling_in_f32() -> None:
    """The compiled model's whole path (position and type rows, the embedding layer norm, the layers,
    masked mean pooling, unit length) against a float64 reference, on random weights in f32, with
    padded rows; and the settings asked for are the compiled model's own."""
    hidden, heads = 16, 2
    embeddings, stack = _tiny_weights(hidden, layers=2, positions=12)
    encoder = OpenVinoEncoder(embeddings, stack, hidden=hidden, heads=heads, eps=1e-12, threads=1, precision="f32")
    rng = np.random.default_rng(5)
    rows = rng.standard_normal((3, 9, hidden)).astype(np.float32)
    mask = np.zeros((3, 9), dtype=np.float32)
    for row, length in enumerate((9, 4, 1)):
        mask[row, :length] = 1.0
    got = encoder.vectors(rows, mask)
    want = _reference_vectors(embeddings, stack, rows.astype(np.float64), mask.astype(np.float64), heads)
    assert got.shape == (3, hidden)
    assert np.abs(got - want).max() < 1e-5
    # a padded row's vector is the vector of that text alone
    alone = encoder.vectors(rows[1:2, :4], mask[1:2, :4])
    assert np.abs(alone - got[1:2]).max() < 1e-5
    settings = encoder.compiled_settings()
    streams = max(1, os.cpu_count() or 1)
    assert settings == {
        "INFERENCE_PRECISION_HINT": "f32",
        "NUM_STREAMS": str(streams),
        "INFERENCE_NUM_THREADS": str(streams),
        "ENABLE_CPU_PINNING": "False",
    }

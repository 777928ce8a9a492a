"""The BERT encoder layers as an OpenVINO model: bf16 matrix products on CPUs that have them.

Why a second graph: ONNX Runtime's CPU kernels run fp32 only (its int8 moved vectors too far), while
OpenVINO's CPU plugin runs matrix products in bfloat16 on CPUs with AVX512-BF16 or AMX, at twice the
fp32 rate, and keeps layer norms, softmax and accumulation in fp32. The model is built node by node
with OpenVINO's own graph builder from the same safetensors weights the numpy path reads (our ONNX
graph uses ONNX Runtime's contrib ops, which OpenVINO does not read), so nothing is downloaded.

Unlike ``onnx_encoder``, the model also does the embedding sum and layer norm before the layers and
the mean pooling and L2 normalisation after them: in numpy those passes took about a tenth of this
encoder's CPU time, and the model then returns one vector per text instead of every token's hidden
state for numpy to pool (benchmarks/README.md, "Local embedder", has what it gained). Only the
word-piece lookup stays in numpy, since it reads the 47 MB table row by row. The model takes those
rows and a 0/1 mask.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    from context_engine.embeddings.encoder_layer import EncoderLayer, InputEmbeddings

Precision = Literal["bf16", "f32"]


def openvino_available() -> bool:
    """True when the ``openvino`` package is installed (looked up, not imported: the import is slow)."""
    try:
        return importlib.util.find_spec("openvino") is not None
    except (ImportError, ValueError):
        return False


def cpu_runs_bf16() -> bool:
    """True when OpenVINO's CPU plugin reports native bf16 (AVX512-BF16 or AMX) on this machine."""
    import openvino as ov

    capabilities = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    return "BF16" in capabilities


def build_model(
    embeddings: InputEmbeddings, layers: Sequence[EncoderLayer], *, hidden: int, heads: int, eps: float
) -> Any:
    """An ``openvino.Model``: ``word_rows`` (n, L, hidden) f32 and ``mask`` (n, L) f32 0/1 in,
    ``vectors`` (n, hidden) out, unit length; the same math as the numpy path."""
    import openvino as ov
    import openvino.opset13 as ops

    head_dim = hidden // heads
    word_rows = ops.parameter([-1, -1, hidden], ov.Type.f32, name="word_rows")
    mask = ops.parameter([-1, -1], ov.Type.f32, name="mask")

    def const(array: np.ndarray) -> Any:
        return ops.constant(np.ascontiguousarray(array, dtype=np.float32))

    def i64(values: list[int]) -> Any:
        return ops.constant(np.asarray(values, dtype=np.int64))

    # additive key mask (n, 1, 1, L): -10,000 for padded keys, which softmax turns into exactly 0 in
    # f32 (the numpy path's most negative float rounds to -inf in bf16, and 0 * -inf is NaN)
    key_bias = ops.multiply(ops.subtract(const(np.ones((), np.float32)), mask), const(np.asarray(-1e4)))
    key_bias = ops.unsqueeze(key_bias, i64([1, 2]))
    scale = const(np.asarray(1.0 / np.sqrt(head_dim), dtype=np.float32))

    def layer_norm(x: Any, weight: np.ndarray, bias: np.ndarray) -> Any:
        normed = ops.mvn(x, i64([-1]), normalize_variance=True, eps=eps, eps_mode="inside_sqrt")
        return ops.add(ops.multiply(normed, const(weight)), const(bias))

    def heads_first(x: Any) -> Any:
        # (n, L, hidden) -> (n, heads, L, head_dim)
        return ops.transpose(ops.reshape(x, i64([0, 0, heads, head_dim]), special_zero=True), i64([0, 2, 1, 3]))

    # word rows + the first L positions + the type-0 row, layer-normed (the sequence length L is the
    # input's own, so one model serves every padded length)
    length = ops.gather(ops.shape_of(word_rows), i64([1]), i64([0]))
    positions = ops.slice(const(embeddings.position), i64([0]), length, i64([1]), i64([0]))
    x = ops.add(ops.add(word_rows, positions), const(embeddings.token_type0))
    x = layer_norm(x, embeddings.ln_w, embeddings.ln_b)
    for layer in layers:
        qkv = ops.add(ops.matmul(x, const(layer.qkv_w), False, False), const(layer.qkv_b))
        q, k, v = ops.split(qkv, ops.constant(np.int64(-1)), 3).outputs()
        context = ops.scaled_dot_product_attention(
            heads_first(q), heads_first(k), heads_first(v), key_bias, scale, causal=False
        )
        context = ops.reshape(ops.transpose(context, i64([0, 2, 1, 3])), i64([0, 0, hidden]), special_zero=True)
        attn = ops.add(ops.matmul(context, const(layer.out_w), False, False), const(layer.out_b))
        h1 = layer_norm(ops.add(attn, x), layer.ln1_w, layer.ln1_b)
        inter = ops.add(ops.matmul(h1, const(layer.ffn_in_w), False, False), const(layer.ffn_in_b))
        act = ops.gelu(inter, approximation_mode="erf")
        ff2 = ops.add(ops.matmul(act, const(layer.ffn_out_w), False, False), const(layer.ffn_out_b))
        x = layer_norm(ops.add(ff2, h1), layer.ln2_w, layer.ln2_b)
    # mean over the real tokens, then unit length (numpy divides by max(norm, 1e-12); this by
    # sqrt(max(norm^2, 1e-24)), the same)
    summed = ops.reduce_sum(ops.multiply(x, ops.unsqueeze(mask, i64([-1]))), i64([1]), keep_dims=False)
    counts = ops.maximum(ops.reduce_sum(mask, i64([1]), keep_dims=True), const(np.asarray(1e-9)))
    vectors = ops.normalize_l2(ops.divide(summed, counts), i64([-1]), 1e-24, "max")
    vectors.get_output_tensor(0).set_names({"vectors"})
    return ov.Model([vectors], [word_rows, mask], "minilm_sentence_encoder")


class OpenVinoEncoder:
    """One compiled OpenVINO model from word-piece rows to sentence vectors; ``vectors`` is safe from
    several threads (each calling thread keeps its own infer request)."""

    def __init__(
        self,
        embeddings: InputEmbeddings,
        layers: Sequence[EncoderLayer],
        *,
        hidden: int,
        heads: int,
        eps: float,
        threads: int,
        precision: Precision | None = None,
    ):
        import openvino as ov

        if precision is None:  # bf16 where the CPU computes it natively, else OpenVINO's f32
            precision = "bf16" if cpu_runs_bf16() else "f32"
        model = build_model(embeddings, layers, hidden=hidden, heads=heads, eps=eps)
        # one single-threaded stream per core: each worker thread's sub-batch runs on its own core, as
        # with ONNX Runtime (the embedder's threads, not one call, spread the work over the cores)
        streams = max(1, os.cpu_count() or 1)
        config = {
            "INFERENCE_PRECISION_HINT": precision,
            "NUM_STREAMS": str(streams),
            "INFERENCE_NUM_THREADS": str(streams * threads),
            "ENABLE_CPU_PINNING": "NO",  # a shared machine's cores
        }
        self.precision: Precision = precision
        self._compiled = ov.Core().compile_model(model, "CPU", config)
        self._local = threading.local()

    def compiled_settings(self) -> dict[str, str]:
        """The compiled model's own values of the settings this class asks for, as OpenVINO reports
        them: what a caller can check reached the plugin (an unknown or refused one would differ)."""
        names = ("INFERENCE_PRECISION_HINT", "NUM_STREAMS", "INFERENCE_NUM_THREADS", "ENABLE_CPU_PINNING")
        values = {name: self._compiled.get_property(name) for name in names}
        # the precision comes back as an ``openvino.Type``, whose short name is the one asked with
        return {
            name: value.to_string() if hasattr(value, "to_string") else str(value) for name, value in values.items()
        }

    def vectors(self, word_rows: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Unit-length sentence vectors (n, hidden) for word-piece rows (n, L, hidden) and a 0/1 mask."""
        request = getattr(self._local, "request", None)
        if request is None:
            request = self._local.request = self._compiled.create_infer_request()
        result = request.infer(
            {
                "word_rows": np.ascontiguousarray(word_rows, dtype=np.float32),
                "mask": np.ascontiguousarray(mask, dtype=np.float32),
            }
        )
        return np.array(next(iter(result.values())))

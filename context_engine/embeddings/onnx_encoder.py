"""The BERT encoder layers as an ONNX graph run by ONNX Runtime: the fast path of the local model.

Why a graph built here: no PyPI package ships all-MiniLM-L6-v2 as a full-precision ONNX file without
pulling torch in, and exporting one needs torch. The encoder is six identical, well-known layers, so
the graph is written node by node from the same safetensors weights the numpy path reads, using
ONNX Runtime's fused CPU kernels (``Attention``, ``BiasGelu``, ``SkipLayerNormalization``) that do
the math the numpy path spells out. A test pins both paths to sentence-transformers' own vectors.

The word-embedding lookup and pooling stay in numpy (they are cheap, and the lookup reads the
47 MB table only row by row); the graph takes the normalised embeddings and a 0/1 mask and
returns the last hidden states.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from context_engine.embeddings.encoder_layer import EncoderLayer

_MS = "com.microsoft"


def onnx_runtime_available() -> bool:
    """True when both onnx (to write the graph) and onnxruntime (to run it) are installed.

    Looked up, not imported: importing both costs a few hundred milliseconds, paid only when the
    model loads.
    """
    try:
        return all(importlib.util.find_spec(name) is not None for name in ("onnx", "onnxruntime"))
    except (ImportError, ValueError):
        return False


def build_graph(layers: Sequence[EncoderLayer], *, hidden: int, heads: int, eps: float) -> Any:
    """An ``onnx.ModelProto`` of the encoder layers: ``hidden_in`` (n, L, hidden) float32 and
    ``mask`` (n, L) int32 in, ``hidden_out`` (n, L, hidden) out."""
    import onnx
    from onnx import TensorProto, helper

    nodes: list[Any] = []
    inits: list[Any] = []

    def init(name: str, array: np.ndarray) -> str:
        # raw little-endian bytes: numpy_helper.from_array took ~1 CPU-second for these 22M floats
        data = np.ascontiguousarray(array, dtype="<f4")
        inits.append(helper.make_tensor(name, TensorProto.FLOAT, data.shape, data.tobytes(), raw=True))
        return name

    x = "hidden_in"
    for i, layer in enumerate(layers):
        p = f"l{i}"
        # fused QKV projection + scaled dot-product attention with the 0/1 key mask
        nodes.append(
            helper.make_node(
                "Attention",
                [x, init(f"{p}.qkv_w", layer.qkv_w), init(f"{p}.qkv_b", layer.qkv_b), "mask"],
                [f"{p}.ctx"],
                domain=_MS,
                num_heads=heads,
            )
        )
        nodes.append(helper.make_node("MatMul", [f"{p}.ctx", init(f"{p}.out_w", layer.out_w)], [f"{p}.attn"]))
        # LayerNorm(attn + out_b + x)
        nodes.append(
            helper.make_node(
                "SkipLayerNormalization",
                [
                    f"{p}.attn",
                    x,
                    init(f"{p}.ln1_w", layer.ln1_w),
                    init(f"{p}.ln1_b", layer.ln1_b),
                    init(f"{p}.out_b", layer.out_b),
                ],
                [f"{p}.h1"],
                domain=_MS,
                epsilon=eps,
            )
        )
        nodes.append(helper.make_node("MatMul", [f"{p}.h1", init(f"{p}.ffn_in_w", layer.ffn_in_w)], [f"{p}.ff1"]))
        # exact (erf) GELU of ff1 + bias, as BERT uses
        nodes.append(
            helper.make_node(
                "BiasGelu", [f"{p}.ff1", init(f"{p}.ffn_in_b", layer.ffn_in_b)], [f"{p}.act"], domain=_MS
            )
        )
        nodes.append(helper.make_node("MatMul", [f"{p}.act", init(f"{p}.ffn_out_w", layer.ffn_out_w)], [f"{p}.ff2"]))
        out = "hidden_out" if i == len(layers) - 1 else f"{p}.out"
        nodes.append(
            helper.make_node(
                "SkipLayerNormalization",
                [
                    f"{p}.ff2",
                    f"{p}.h1",
                    init(f"{p}.ln2_w", layer.ln2_w),
                    init(f"{p}.ln2_b", layer.ln2_b),
                    init(f"{p}.ffn_out_b", layer.ffn_out_b),
                ],
                [out],
                domain=_MS,
                epsilon=eps,
            )
        )
        x = out

    graph = helper.make_graph(
        nodes,
        "bert_encoder",
        [
            helper.make_tensor_value_info("hidden_in", TensorProto.FLOAT, ["n", "length", hidden]),
            helper.make_tensor_value_info("mask", TensorProto.INT32, ["n", "length"]),
        ],
        [helper.make_tensor_value_info("hidden_out", TensorProto.FLOAT, ["n", "length", hidden])],
        initializer=inits,
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(_MS, 1)],
        producer_name="context-engine",
        ir_version=onnx.IR_VERSION_2023_5_5 if hasattr(onnx, "IR_VERSION_2023_5_5") else 9,
    )


class OnnxEncoder:
    """One ONNX Runtime session over the encoder layers; ``run`` is safe from several threads."""

    def __init__(self, layers: Sequence[EncoderLayer], *, hidden: int, heads: int, eps: float, threads: int):
        import onnxruntime as ort

        model = build_graph(layers, hidden=hidden, heads=heads, eps=eps)
        options = ort.SessionOptions()
        # each call gets `threads` cores; calls from several worker threads run side by side
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # no arena: batches vary in shape, and the arena kept ~25 MiB more resident at the same speed
        options.enable_cpu_mem_arena = False
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # a shared machine's cores
        options.log_severity_level = 3
        serialized = model.SerializeToString()
        del model  # the proto's copy of the weights, before the session makes its own
        self._session = ort.InferenceSession(serialized, sess_options=options, providers=["CPUExecutionProvider"])

    def run(self, hidden_in: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Last hidden states (n, L, hidden) for normalised embeddings and a 0/1 mask."""
        (out,) = self._session.run(
            None, {"hidden_in": np.ascontiguousarray(hidden_in, dtype=np.float32), "mask": mask.astype(np.int32)}
        )
        return np.asarray(out)

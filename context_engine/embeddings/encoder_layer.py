"""The weights of one encoder layer, shared by the numpy encoder (``local``) and its onnx graph
(``onnx_encoder``), so that neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class EncoderLayer:
    """One transformer layer's weights, as the numpy encoder and the onnx graph both read them."""

    qkv_w: np.ndarray  # (hidden, 3*hidden), pre-transposed so x @ w works
    qkv_b: np.ndarray
    out_w: np.ndarray
    out_b: np.ndarray
    ln1_w: np.ndarray
    ln1_b: np.ndarray
    ffn_in_w: np.ndarray
    ffn_in_b: np.ndarray
    ffn_out_w: np.ndarray
    ffn_out_b: np.ndarray
    ln2_w: np.ndarray
    ln2_b: np.ndarray

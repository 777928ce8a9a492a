"""The weights of the encoder's input embeddings and of one encoder layer, shared by the numpy encoder
(``local``) and its compiled graphs (``onnx_encoder``, ``openvino_encoder``), so that none imports
another."""

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


@dataclass(frozen=True)
class InputEmbeddings:
    """What turns word-piece rows into the first layer's input: the position table (positions x
    hidden), the type-0 token-type row and the embedding layer norm's weight and bias."""

    position: np.ndarray
    token_type0: np.ndarray
    ln_w: np.ndarray
    ln_b: np.ndarray

"""The safetensors reader the local model loads with: per-tensor reads, a mapped tensor, bad files."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from context_engine.embeddings.weights import SafetensorsFile, WeightsError


def write_checkpoint(path: Path, tensors: dict[str, np.ndarray], dtype_names: dict[str, str] | None = None) -> None:
    header: dict[str, object] = {"__metadata__": {"format": "np"}}
    blobs: list[bytes] = []
    offset = 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        code = (dtype_names or {}).get(name, {"float32": "F32", "float16": "F16"}[str(array.dtype)])
        header[name] = {"dtype": code, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


def test_reads_and_maps_each_tensor_exactly(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    table = rng.standard_normal((50, 8)).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float16)
    path = tmp_path / "model.safetensors"
    write_checkpoint(path, {"word": table, "bias": bias})
    weights = SafetensorsFile(path)
    assert "word" in weights and "missing" not in weights and "__metadata__" not in weights
    read = weights.read("word")
    assert read.dtype == np.float32 and np.array_equal(read, table)
    # a float16 tensor is widened when read
    assert np.array_equal(weights.read("bias"), bias.astype(np.float32))


def test_row_table_reads_rows_as_they_are_gathered(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    table = rng.standard_normal((2000, 16)).astype(np.float32)
    path = tmp_path / "model.safetensors"
    write_checkpoint(path, {"word": table, "half": table[:10].astype(np.float16), "flat": table[0]})
    weights = SafetensorsFile(path)
    rows = weights.rows("word")
    assert rows.shape == (2000, 16)
    ids = np.array([[5, 1999, 5], [0, 7, 7]])
    assert np.array_equal(rows.take(ids), table[ids])
    assert int(rows._loaded.sum()) == 4  # only the distinct rows asked for were read
    assert np.array_equal(rows.take(np.array([7, 8])), table[[7, 8]])
    assert int(rows._loaded.sum()) == 5
    assert np.array_equal(weights.rows("half").take(np.array([3])), table[[3]].astype(np.float16).astype(np.float32))
    with pytest.raises(IndexError):
        rows.take(np.array([2000]))
    with pytest.raises(WeightsError, match="not a table"):
        weights.rows("flat")


def test_bad_files_raise_a_clear_error(tmp_path: Path) -> None:
    short = tmp_path / "short.safetensors"
    short.write_bytes(b"\x01\x00")
    with pytest.raises(WeightsError, match="too short"):
        SafetensorsFile(short)

    garbled = tmp_path / "garbled.safetensors"
    garbled.write_bytes(struct.pack("<Q", 5) + b"{nope")
    with pytest.raises(WeightsError, match="unreadable header"):
        SafetensorsFile(garbled)

    odd = tmp_path / "odd.safetensors"
    write_checkpoint(odd, {"w": np.zeros(4, dtype=np.float32)}, {"w": "I8"})
    with pytest.raises(WeightsError, match="dtype I8"):
        SafetensorsFile(odd).read("w")

    cut = tmp_path / "cut.safetensors"
    write_checkpoint(cut, {"w": np.ones((4, 4), dtype=np.float32)})
    cut.write_bytes(cut.read_bytes()[:-8])
    with pytest.raises(WeightsError, match="cut short"):
        SafetensorsFile(cut).read("w")

"""Read a ``.safetensors`` file one tensor at a time, or a table of rows only as its rows are used.

Why not ``safetensors.numpy.load_file``: it reads the whole file into memory and then copies every
tensor out of it, so loading the 87 MiB MiniLM checkpoint peaked at twice its size. Here each tensor
is read straight into its own array, and the word-embedding table (half of the checkpoint, of which a
corpus touches only the rows of the word pieces it uses) is read row by row as rows are used.

The format: an 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape
and byte range, then the raw little-endian data.
"""

from __future__ import annotations

import json
import mmap
import struct
import threading
from pathlib import Path
from typing import Any

import numpy as np

_DTYPES: dict[str, np.dtype[Any]] = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "F64": np.dtype("<f8")}


class WeightsError(ValueError):
    """The file is not a safetensors checkpoint this reader understands."""


class SafetensorsFile:
    """The header of one checkpoint, and reads of its tensors by name."""

    def __init__(self, path: Path):
        self.path = path
        with path.open("rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise WeightsError(f"{path.name} is too short to be a safetensors file")
            (length,) = struct.unpack("<Q", raw)
            try:
                header: dict[str, Any] = json.loads(f.read(length))
            except ValueError as exc:
                raise WeightsError(f"{path.name} has an unreadable header") from exc
        header.pop("__metadata__", None)
        self._header = header
        self._data_start = 8 + length

    def __contains__(self, name: str) -> bool:
        return name in self._header

    def _entry(self, name: str) -> tuple[np.dtype, tuple[int, ...], int, int]:
        entry = self._header[name]
        dtype = _DTYPES.get(entry["dtype"])
        if dtype is None:
            raise WeightsError(f"tensor {name} has dtype {entry['dtype']}, which this reader does not support")
        begin, end = (int(x) for x in entry["data_offsets"])
        shape = tuple(int(x) for x in entry["shape"])
        if end - begin != dtype.itemsize * int(np.prod(shape, dtype=np.int64)):
            raise WeightsError(f"tensor {name}'s byte range does not match its shape")
        return dtype, shape, self._data_start + begin, end - begin

    def read(self, name: str) -> np.ndarray:
        """The tensor as a new float32 array (only its own bytes are read)."""
        dtype, shape, offset, size = self._entry(name)
        with self.path.open("rb") as f:
            f.seek(offset)
            data = f.read(size)
        if len(data) != size:
            raise WeightsError(f"tensor {name} is cut short")
        return np.frombuffer(data, dtype=dtype).reshape(shape).astype(np.float32)

    def rows(self, name: str) -> RowTable:
        """A 2-D tensor whose rows are read from disk the first time they are gathered."""
        dtype, shape, offset, _ = self._entry(name)
        if len(shape) != 2:
            raise WeightsError(f"tensor {name} is not a table of rows")
        return RowTable(self.path, dtype, shape, offset)


class RowTable:
    """An embedding table that holds only the rows a caller has used.

    A memory map would do the same on paper, but the kernel maps the cached pages around each
    touched one ("fault-around", 64 KiB), whatever ``madvise`` says: gathering the 1,145 word pieces of
    a spreadsheet made 31 MiB of the 47 MiB table resident instead of 5. Here the table is an
    anonymous mapping that is never touched until a row is read into it from the file.
    """

    def __init__(self, path: Path, dtype: np.dtype, shape: tuple[int, ...], offset: int):
        self.shape = (int(shape[0]), int(shape[1]))
        self._path, self._dtype, self._offset = path, dtype, offset
        self._row_bytes = dtype.itemsize * self.shape[1]
        self._buffer = mmap.mmap(-1, max(1, self.shape[0] * self.shape[1] * 4))
        if hasattr(mmap, "MADV_NOHUGEPAGE"):
            self._buffer.madvise(mmap.MADV_NOHUGEPAGE)  # a huge page would make 2 MiB resident per row
        self._table = np.frombuffer(self._buffer, dtype=np.float32, count=self.shape[0] * self.shape[1]).reshape(
            self.shape
        )
        self._loaded = np.zeros(self.shape[0], dtype=bool)
        self._lock = threading.Lock()

    def take(self, ids: np.ndarray) -> np.ndarray:
        """``table[ids]`` as a new float32 array; rows not read yet are read first."""
        wanted = np.unique(ids)
        if wanted.size and (wanted[0] < 0 or wanted[-1] >= self.shape[0]):
            raise IndexError("row index out of range")
        missing = wanted[~self._loaded[wanted]]
        if missing.size:
            with self._lock, self._path.open("rb") as f:
                for row in missing[~self._loaded[missing]]:
                    f.seek(self._offset + int(row) * self._row_bytes)
                    data = f.read(self._row_bytes)
                    if len(data) != self._row_bytes:
                        raise WeightsError(f"{self._path.name} is cut short")
                    self._table[row] = np.frombuffer(data, dtype=self._dtype)
                    self._loaded[row] = True
        return np.take(self._table, ids, axis=0)

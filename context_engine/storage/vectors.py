"""How a vector is written into SQL: pgvector's text form, bound as a parameter and cast."""

from __future__ import annotations

from collections.abc import Sequence


def vector_literal(vector: Sequence[float]) -> str:
    """``[x1,x2,...]`` with 7 significant digits (float32 precision), for ``CAST(:p AS vector)``."""
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"

"""How a vector is written into SQL: pgvector's text form for one query vector, pgvector's binary
form (through the ``pgvector`` package's psycopg adapters) for the many vectors a write stores."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from pgvector.psycopg import register_vector_async
from sqlalchemy.ext.asyncio import AsyncConnection


def vector_literal(vector: Sequence[float]) -> str:
    """``[x1,x2,...]`` with 7 significant digits (float32 precision), for ``CAST(:p AS vector)``."""
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"


async def register_vector_types(conn: AsyncConnection) -> None:
    """Teach this pooled connection's psycopg connection pgvector's types (once per connection), so
    float32 arrays bind as ``vector`` in binary: no text formatting in Python, no parsing in the server.

    Call it before binding :func:`vector_array` values; the ``vector`` extension must exist.
    """
    raw: Any = (await conn.get_raw_connection()).driver_connection
    if raw.adapters.types.get("vector") is None:
        await register_vector_async(raw)


def vector_array(vectors: Sequence[Sequence[float]]) -> list[np.ndarray]:
    """Vectors as float32 arrays, bound as ``vector[]`` on a connection :func:`register_vector_types` prepared."""
    return [np.asarray(v, dtype=np.float32) for v in vectors]

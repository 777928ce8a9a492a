"""The SQL of batch embedding: the job table (``ce_embedding_batches``) and the writes a job makes.

A job's vectors are paired with the document's rows by position, and written only while the job is
still the document's live one (:func:`live_version`, under a row lock on the document). A later
ingest of the document writes a new version and leaves the document in another status, or submits
a new job that marks this one superseded, so a late poll never writes onto another version's rows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from context_engine.embeddings.batches import BatchHandle
from context_engine.storage.vectors import vector_literal

#: from the statement's start (stable within it, as a distributed UPDATE requires; see repository._LEASE_UNTIL)
_UNTIL = "statement_timestamp() + make_interval(secs => CAST(:t AS double precision))"


@dataclass(frozen=True)
class PendingBatch:
    """One job waiting for a poll, with the document it embeds."""

    row_id: int
    document_id: str
    name: str
    source_id: str
    version: int
    handle: dict[str, Any]
    chunk_count: int
    tokens: int


async def chunk_texts(
    conn: AsyncConnection, document_id: str, version: int, *, after: int, limit: int
) -> list[tuple[int, str]]:
    """``(position, text)`` of up to ``limit`` chunks of ``version`` past position ``after``, in order."""
    rows = await conn.execute(
        text(
            "SELECT position, text FROM ce_chunks WHERE document_id = CAST(:d AS uuid) AND version = :v "
            "AND position > :after ORDER BY position LIMIT :n"
        ),
        {"d": document_id, "v": version, "after": after, "n": limit},
    )
    return [(int(r[0]), str(r[1])) for r in rows]


async def mark_pending(
    conn: AsyncConnection,
    document_id: str,
    holder: str,
    *,
    handle: BatchHandle,
    version: int,
    tokens: int,
) -> list[dict[str, Any]] | None:
    """The job is submitted: the document leaves the run's lease for ``batch_pending``, any older job
    of it is superseded and this one recorded. Answers the superseded jobs' handles (to cancel at
    the provider once this commits), or None (nothing changed) when the run lost its lease."""
    progress = {"done": 0, "total": handle.count, "tokens": 0}
    moved = await conn.scalar(
        text(
            "UPDATE ce_documents SET status = 'batch_pending', failure_reason = NULL, error = NULL, "
            "lease_holder = NULL, lease_until = NULL, "
            "meta = jsonb_set(meta, '{embedding_progress}', CAST(:p AS jsonb)), updated_at = now() "
            "WHERE id = CAST(:d AS uuid) AND lease_holder = CAST(:h AS uuid) RETURNING 1"
        ),
        {"d": document_id, "h": holder, "p": json.dumps(progress)},
    )
    if moved is None:
        return None
    superseded = await conn.execute(
        text(
            "UPDATE ce_embedding_batches SET state = 'superseded', poll_holder = NULL, poll_until = NULL, "
            "finished_at = now(), message = 'a later ingest of the document submitted another job' "
            "WHERE document_id = CAST(:d AS uuid) AND state = 'pending' RETURNING handle"
        ),
        {"d": document_id},
    )
    handles = [dict(row[0]) for row in superseded]
    await conn.execute(
        text(
            "INSERT INTO ce_embedding_batches (document_id, version, content_hash, provider, batch_id, handle, "
            "chunk_count, tokens) SELECT d.id, :v, d.content_hash, :p, :b, CAST(:hd AS jsonb), :n, :t "
            "FROM ce_documents d WHERE d.id = CAST(:d AS uuid)"
        ),
        {
            "d": document_id,
            "v": version,
            "p": handle.provider,
            "b": handle.batch_id,
            "hd": json.dumps(handle.to_dict()),
            "n": handle.count,
            "t": tokens,
        },
    )
    return handles


async def pending_batches(conn: AsyncConnection) -> list[PendingBatch]:
    """Every job still waiting, oldest first."""
    rows = await conn.execute(
        text(
            "SELECT b.id, b.document_id, d.name, d.source_id, b.version, b.handle, b.chunk_count, b.tokens "
            "FROM ce_embedding_batches b JOIN ce_documents d ON d.id = b.document_id "
            "WHERE b.state = 'pending' ORDER BY b.submitted_at, b.id"
        )
    )
    return [
        PendingBatch(int(r[0]), str(r[1]), str(r[2]), str(r[3]), int(r[4]), dict(r[5]), int(r[6]), int(r[7]))
        for r in rows
    ]


async def claim(conn: AsyncConnection, row_id: int, holder: str, seconds: float) -> bool:
    """Take a waiting job for one poll; False when another poller holds it."""
    found = await conn.scalar(
        text(
            f"UPDATE ce_embedding_batches SET poll_holder = CAST(:h AS uuid), poll_until = {_UNTIL} "
            "WHERE id = :id AND state = 'pending' "
            "AND (poll_holder IS NULL OR poll_until <= statement_timestamp()) RETURNING 1"
        ),
        {"id": row_id, "h": holder, "t": seconds},
    )
    return found is not None


async def release(conn: AsyncConnection, row_id: int, holder: str, provider_status: str | None) -> None:
    """The job is still waiting (or could not be asked): let go of it and note what the provider said."""
    await conn.execute(
        text(
            "UPDATE ce_embedding_batches SET poll_holder = NULL, poll_until = NULL, polled_at = now(), "
            "provider_status = coalesce(:ps, provider_status) WHERE id = :id AND poll_holder = CAST(:h AS uuid)"
        ),
        {"id": row_id, "h": holder, "ps": provider_status},
    )


Liveness = Literal["live", "superseded", "taken"]


async def live_version(
    conn: AsyncConnection, row_id: int, document_id: str, holder: str, seconds: float
) -> tuple[Liveness, int]:
    """Whether this poll may still write the job's vectors, with the document's current version.

    Row-locks the document, then the job, until the caller's transaction ends (the order every
    writer of both takes), so no new version can be written between this check and the caller's
    writes. ``live``: the document still waits for this job with the content it was submitted for
    (the claim is renewed); ``taken``: another poller holds the job; ``superseded``: the document
    has moved on (a new version, another job, deleted).
    """
    doc = (
        await conn.execute(
            text(
                "SELECT version, status, content_hash, chunk_count FROM ce_documents "
                "WHERE id = CAST(:d AS uuid) FOR UPDATE"
            ),
            {"d": document_id},
        )
    ).first()
    job = (
        await conn.execute(
            text(
                "SELECT state, poll_holder = CAST(:h AS uuid), content_hash, chunk_count "
                # the document too: a distributed (Citus) schema locks a row only by its shard's key
                "FROM ce_embedding_batches WHERE id = :id AND document_id = CAST(:d AS uuid) FOR UPDATE"
            ),
            {"id": row_id, "h": holder, "d": document_id},
        )
    ).first()
    if job is None or job[0] != "pending":
        return "superseded", 0
    if not job[1]:
        return "taken", 0
    if doc is None or doc[1] != "batch_pending" or (doc[2], doc[3]) != (job[2], job[3]):
        return "superseded", 0
    await conn.execute(
        text(f"UPDATE ce_embedding_batches SET poll_until = {_UNTIL} WHERE id = :id"), {"id": row_id, "t": seconds}
    )
    return "live", int(doc[0])


async def store_by_position(
    conn: AsyncConnection,
    document_id: str,
    version: int,
    positions: Sequence[int],
    vectors: Sequence[Sequence[float]],
    embedding_key: str,
) -> None:
    """One UPDATE for a page of a job's results: the vector of input ``i`` onto the row at position ``i``
    of the document's current ``version``."""
    await conn.execute(
        text(
            "UPDATE ce_chunks c SET embedding = CAST(v.e AS vector), embedding_key = :k "
            "FROM unnest(CAST(:ps AS integer[]), CAST(:vs AS text[])) AS v(p, e) "
            "WHERE c.document_id = CAST(:d AS uuid) AND c.version = :v AND c.valid_to IS NULL AND c.position = v.p"
        ),
        {
            "d": document_id,
            "v": version,
            "ps": list(positions),
            "vs": [vector_literal(x) for x in vectors],
            "k": embedding_key,
        },
    )


async def missing_vectors(conn: AsyncConnection, document_id: str, version: int) -> int:
    """Rows of the document's current ``version`` still without a vector."""
    return int(
        await conn.scalar(
            text(
                "SELECT count(*) FROM ce_chunks WHERE document_id = CAST(:d AS uuid) AND version = :v "
                "AND valid_to IS NULL AND embedding IS NULL"
            ),
            {"d": document_id, "v": version},
        )
    )


async def finish(
    conn: AsyncConnection, row_id: int, document_id: str, provider_status: str, progress: dict[str, int]
) -> None:
    """Every vector is stored: the document is complete and the job done (after :func:`live_version`)."""
    await conn.execute(
        text(
            "UPDATE ce_documents SET status = 'completed', failure_reason = NULL, error = NULL, "
            "meta = jsonb_set(meta, '{embedding_progress}', CAST(:p AS jsonb)), updated_at = now() "
            "WHERE id = CAST(:d AS uuid)"
        ),
        {"d": document_id, "p": json.dumps(progress)},
    )
    await _close(conn, row_id, "completed", provider_status, None)


async def fail(
    conn: AsyncConnection,
    row_id: int,
    document_id: str,
    *,
    provider_status: str,
    message: str,
    progress: dict[str, int],
) -> None:
    """The job ended without every vector: the document goes back to ``embedding`` (resumable, with
    failure code ``batch_failed``), keeping the vectors already stored (after :func:`live_version`)."""
    await conn.execute(
        text(
            "UPDATE ce_documents SET status = 'embedding', failure_reason = 'batch_failed', error = :e, "
            "meta = jsonb_set(meta, '{embedding_progress}', CAST(:p AS jsonb)), updated_at = now() "
            "WHERE id = CAST(:d AS uuid)"
        ),
        {"d": document_id, "e": message, "p": json.dumps(progress)},
    )
    await _close(conn, row_id, "failed", provider_status, message)


async def supersede(conn: AsyncConnection, row_id: int) -> None:
    """The document has moved on: the job is closed without a write."""
    await conn.execute(
        text(
            "UPDATE ce_embedding_batches SET state = 'superseded', poll_holder = NULL, poll_until = NULL, "
            "finished_at = now(), message = 'the document was ingested again or removed before the job finished' "
            "WHERE id = :id AND state = 'pending'"
        ),
        {"id": row_id},
    )


async def _close(conn: AsyncConnection, row_id: int, state: str, provider_status: str, message: str | None) -> None:
    await conn.execute(
        text(
            "UPDATE ce_embedding_batches SET state = :s, provider_status = :ps, message = :m, poll_holder = NULL, "
            "poll_until = NULL, polled_at = now(), finished_at = now() WHERE id = :id"
        ),
        {"id": row_id, "s": state, "ps": provider_status, "m": message},
    )

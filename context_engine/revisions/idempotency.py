"""Idempotency keys for ingest and delete: a retry returns the first answer and writes nothing.

Why a claim row and not a unique constraint on the documents: the work (extract, chunk, embed)
runs in several transactions and can take minutes. The request that does the work owns the key by
a session advisory lock (:mod:`context_engine.storage.session_locks`), so of any number of
concurrent callers with one key exactly one works while the others wait their turn (no connection
held), then find its recorded answer and return it. The claim row is written before the work and
its answer recorded after, only for an outcome that happened: if the work raises (or answers that
it could not be admitted), the claim is removed and the next call with the key does the work. A
claim left pending by a process that died is taken over at once: its lock died with it. A key
sent with other content is refused. Keys are per source and live in Postgres.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.errors import InvalidRequest
from context_engine.revisions.errors import IdempotencyInProgress, IdempotencyKeyReused
from context_engine.storage import session_locks

MAX_KEY_CHARS = 200
#: how long a retry waits for the first request's answer before it reports the key still in progress
WAIT_SECONDS = 300.0


@dataclass(frozen=True)
class Outcome:
    """What the request that owned the key answered (``result`` is the operation's own record)."""

    document_id: str | None
    version: int | None
    revision: int | None
    result: dict[str, Any]
    replayed: bool


def check_key(key: Any) -> str:
    """A key is a non-empty string of at most ``MAX_KEY_CHARS`` characters."""
    if not isinstance(key, str) or not key.strip():
        raise InvalidRequest("idempotency key must be a non-empty string", code="invalid_idempotency_key")
    if len(key) > MAX_KEY_CHARS:
        raise InvalidRequest(
            f"idempotency key is {len(key)} characters; the most is {MAX_KEY_CHARS}", code="invalid_idempotency_key"
        )
    return key


def fingerprint(operation: str, fields: dict[str, Any]) -> str:
    """A digest of everything that makes two requests the same request."""
    body = json.dumps({"op": operation, **fields}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(body.encode()).hexdigest()


async def _claim(db: AsyncEngine, source_id: str, key: str, operation: str, digest: str) -> bool:
    async with db.begin() as conn:
        won = await conn.scalar(
            text(
                "INSERT INTO ce_idempotency_keys (source_id, key, operation, request_hash) VALUES (:s, :k, :o, :h) "
                "ON CONFLICT (source_id, key) DO NOTHING RETURNING 1"
            ),
            {"s": source_id, "k": key, "o": operation, "h": digest},
        )
    return won is not None


async def _read(db: AsyncEngine, source_id: str, key: str) -> dict[str, Any] | None:
    async with db.connect() as conn:
        row = (
            (
                await conn.execute(
                    text(
                        "SELECT operation, request_hash, state, document_id, version, revision, result "
                        "FROM ce_idempotency_keys WHERE source_id = :s AND key = :k"
                    ),
                    {"s": source_id, "k": key},
                )
            )
            .mappings()
            .first()
        )
    return dict(row) if row else None


async def _record(db: AsyncEngine, source_id: str, key: str, outcome: Outcome) -> None:
    async with db.begin() as conn:
        await conn.execute(
            text(
                "UPDATE ce_idempotency_keys SET state = 'done', document_id = CAST(:d AS uuid), version = :v, "
                "revision = :r, result = CAST(:res AS jsonb), finished_at = now() WHERE source_id = :s AND key = :k"
            ),
            {
                "s": source_id,
                "k": key,
                "d": outcome.document_id,
                "v": outcome.version,
                "r": outcome.revision,
                "res": json.dumps(outcome.result, default=str),
            },
        )


async def _release(db: AsyncEngine, source_id: str, key: str) -> None:
    async with db.begin() as conn:
        await conn.execute(
            text("DELETE FROM ce_idempotency_keys WHERE source_id = :s AND key = :k AND state = 'pending'"),
            {"s": source_id, "k": key},
        )


async def run_once(
    db: AsyncEngine,
    *,
    source_id: str,
    key: str,
    operation: str,
    digest: str,
    work: Callable[[], Awaitable[Outcome]],
    wait_seconds: float = WAIT_SECONDS,
) -> Outcome:
    """``work()``'s outcome the first time ``key`` is used in ``source_id``, the recorded one after.

    If ``work`` raises, the claim is released (nothing was recorded) and a retry runs it again.
    Raises ``IdempotencyInProgress`` (retryable) when the request holding the key is still running
    after ``wait_seconds``, ``IdempotencyKeyReused`` when the key belongs to other content.
    """
    answered = _answer(await _read(db, source_id, key), source_id, key, operation, digest)
    if answered is not None:
        return answered
    locks = session_locks.locks_for(db)
    held = await locks.acquire(session_locks.idempotency_key(source_id, key), wait_seconds)
    if held is None:
        raise IdempotencyInProgress(
            f"the request holding idempotency key {key!r} is still running; retry later",
            details={"key": key, "source_id": source_id},
        )
    try:
        row = await _read(db, source_id, key)
        answered = _answer(row, source_id, key, operation, digest)
        if answered is not None:
            return answered
        if row is None:
            await _claim(db, source_id, key, operation, digest)
        # else: a pending claim of the same request whose owner died (its lock is ours now): take it over
        try:
            outcome = await work()
        except BaseException:
            await asyncio.shield(_release(db, source_id, key))
            raise
        await _record(db, source_id, key, outcome)
        return outcome
    finally:
        await locks.release(held)


def _answer(row: dict[str, Any] | None, source_id: str, key: str, operation: str, digest: str) -> Outcome | None:
    """The recorded answer of the key, ``None`` while it has none; refuses other content."""
    if row is None:
        return None
    if row["request_hash"] != digest or row["operation"] != operation:
        raise IdempotencyKeyReused(
            f"idempotency key {key!r} was already used in source {source_id!r} for a different "
            f"{row['operation']} request; send a new key for new content",
            details={"key": key, "source_id": source_id},
        )
    if row["state"] != "done":
        return None
    return Outcome(
        str(row["document_id"]) if row["document_id"] else None,
        row["version"],
        row["revision"],
        dict(row["result"] or {}),
        replayed=True,
    )

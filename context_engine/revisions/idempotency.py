"""Idempotency keys for ingest and delete: a retry returns the first answer and writes nothing.

Why a claim row and not a unique constraint on the documents: the work (extract, chunk, embed)
runs in several transactions and can take minutes, so the key is claimed first, in its own short
transaction (``INSERT ... ON CONFLICT DO NOTHING``); of any number of concurrent callers with one key
exactly one inserts the claim and does the work, and records its answer on the claim. The others
wait for that record on short connections of their own (none is held while waiting) and return it.
A key sent with other content is refused. Keys are per source and live in Postgres, so they
survive restarts; a claim left pending by a process that died is taken over after ``STALE_AFTER``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.errors import InvalidRequest
from context_engine.revisions.errors import IdempotencyInProgress, IdempotencyKeyReused

MAX_KEY_CHARS = 200
#: seconds after which a pending claim is presumed abandoned (its holder died mid-run)
STALE_AFTER = 900
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


async def _take_over_stale(db: AsyncEngine, source_id: str, key: str) -> bool:
    async with db.begin() as conn:
        got = await conn.scalar(
            text(
                "UPDATE ce_idempotency_keys SET claimed_at = now() WHERE source_id = :s AND key = :k "
                "AND state = 'pending' AND claimed_at < now() - make_interval(secs => :stale) RETURNING 1"
            ),
            {"s": source_id, "k": key, "stale": STALE_AFTER},
        )
    return got is not None


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
    """
    deadline = time.monotonic() + wait_seconds
    pause = 0.02
    while True:
        if await _claim(db, source_id, key, operation, digest):
            break
        row = await _read(db, source_id, key)
        if row is None:  # the holder failed and released it: claim again
            continue
        if row["request_hash"] != digest or row["operation"] != operation:
            raise IdempotencyKeyReused(
                f"idempotency key {key!r} was already used in source {source_id!r} for a different "
                f"{row['operation']} request; send a new key for new content",
                details={"key": key, "source_id": source_id},
            )
        if row["state"] == "done":
            return Outcome(
                str(row["document_id"]) if row["document_id"] else None,
                row["version"],
                row["revision"],
                dict(row["result"] or {}),
                replayed=True,
            )
        if await _take_over_stale(db, source_id, key):
            break
        if time.monotonic() >= deadline:
            raise IdempotencyInProgress(
                f"the request holding idempotency key {key!r} is still running; retry later",
                details={"key": key, "source_id": source_id},
            )
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.5)
    try:
        outcome = await work()
    except BaseException:
        await asyncio.shield(_release(db, source_id, key))
        raise
    await _record(db, source_id, key, outcome)
    return outcome

"""Revision handles: the numbers a non-trusted caller is given instead of the store's revisions.

Why: the store's revision counts every tenant's writes, so two revisions a tenant is told (its own
two writes, a stats call before and after) would differ by the number of writes of everyone else.
A handle is the revision passed through a keyed permutation of ``[0, 2**52)``: the same revision
always gives the same handle and the engine maps a handle back exactly, so a handle works as
``as_of`` or ``min_revision``, but handles have no order and their differences count nothing.
Without the key (kept in ``ce_meta``, written once by migration 0022) nobody can compute the handle
of a revision, so probing ``as_of`` with guessed numbers finds no revision either.

The domain stays below ``2**53`` so a handle survives any JSON parser that reads numbers as doubles.
"""

from __future__ import annotations

import hashlib
import hmac
from weakref import WeakKeyDictionary

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.errors import ConfigError

#: the ``ce_meta`` key holding the permutation's key
KEY_NAME = "revision_handle_key"
#: handles and revisions are integers in ``[0, 2**DOMAIN_BITS)``
DOMAIN_BITS = 52
_HALF = DOMAIN_BITS // 2
_MASK = (1 << _HALF) - 1
_ROUNDS = 8

_cache: WeakKeyDictionary[AsyncEngine, tuple[Handles, Handles]] = WeakKeyDictionary()


class Handles:
    """A keyed permutation (an 8-round Feistel network with HMAC-SHA256 rounds) between revisions
    and handles."""

    def __init__(self, key: bytes, purpose: bytes = b"revision") -> None:
        self._key = key
        self._purpose = purpose  # one key, separate permutations: a revision's handle is no chunk's

    def _round(self, index: int, half: int) -> int:
        message = self._purpose + b"/" + bytes([index]) + half.to_bytes(4, "big")
        digest = hmac.new(self._key, message, hashlib.sha256).digest()
        return int.from_bytes(digest[:4], "big") & _MASK

    def encode(self, revision: int) -> int:
        """The handle of ``revision``."""
        if not 0 <= revision < 1 << DOMAIN_BITS:
            raise ValueError("revision outside the handle domain")
        left, right = revision >> _HALF, revision & _MASK
        for index in range(_ROUNDS):
            left, right = right, left ^ self._round(index, right)
        return (left << _HALF) | right

    def decode(self, handle: int) -> int | None:
        """The revision ``handle`` stands for, or ``None`` when it is no handle at all."""
        if not 0 <= handle < 1 << DOMAIN_BITS:
            return None
        left, right = handle >> _HALF, handle & _MASK
        for index in reversed(range(_ROUNDS)):
            left, right = right ^ self._round(index, left), left
        return (left << _HALF) | right


async def for_db(db: AsyncEngine) -> Handles:
    """The store's permutation of revisions, read from ``ce_meta`` once per connection pool."""
    return (await _both(db))[0]


async def chunks_for_db(db: AsyncEngine) -> Handles:
    """The store's permutation of chunk ids: those come from one sequence for every tenant, so the
    gap between two of a caller's chunk ids would count the chunks others stored in between."""
    return (await _both(db))[1]


async def _both(db: AsyncEngine) -> tuple[Handles, Handles]:
    found = _cache.get(db)
    if found is None:
        async with db.connect() as conn:
            value = await conn.scalar(text("SELECT value FROM ce_meta WHERE key = :k"), {"k": KEY_NAME})
        if not value:
            raise ConfigError("the store has no revision handle key yet: run `context-engine migrate`")
        key = str(value).encode()
        found = _cache[db] = (Handles(key), Handles(key, b"chunk"))
    return found

"""HTTP access policy of a route: scopes granted by the host's ``auth`` and a per-caller rate limit.

Scopes come from the host's ``auth`` callable, which may now return more than ``True``:

- ``True`` (or any value without scopes): authenticated with every scope;
- a mapping with a ``scopes`` key, or an object with a ``scopes`` attribute: exactly those scopes
  (an iterable of strings, or one space-separated string as OAuth writes them); ``None`` there
  again means every scope.

The same result may report an ``identity`` (key or attribute, e.g. the API key's id): the rate
limit counts per identity when given, else per set of principals, so two keys of one team share
nothing and an anonymous caller shares one bucket with every other anonymous caller.

The limiter is an in-process sliding window: exact (no burst at a window edge), per process (a
deployment with several workers multiplies the effective limit by their number).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

KNOWLEDGE_SCOPE = "knowledge"
WINDOW_SECONDS = 60.0

#: the paths that read or change the knowledge base: its passages (``/search``, ``/knowledge/query``),
#: its documents and their history (``/documents...``) and its counts (``/stats``). One door to the
#: same passages needs the same scope as every other, so they all need ``knowledge``.
KNOWLEDGE_PATHS = ("/search", "/knowledge/", "/documents", "/stats")


def scope_for(path: str) -> str | None:
    """The scope the host's ``auth`` must grant for a route (``None``: no scope is asked)."""
    return KNOWLEDGE_SCOPE if path.startswith(KNOWLEDGE_PATHS) else None


def granted_scopes(auth_result: Any) -> frozenset[str] | None:
    """The scopes an ``auth`` result grants; ``None`` means every scope."""
    if isinstance(auth_result, Mapping):
        scopes = auth_result.get("scopes")
    else:
        scopes = getattr(auth_result, "scopes", None)
    if scopes is None:
        return None
    if isinstance(scopes, str):
        return frozenset(scopes.split())
    if isinstance(scopes, Iterable):
        return frozenset(str(s) for s in scopes)
    return frozenset()


def caller_identity(auth_result: Any, principals: Any) -> str:
    """The rate-limit key: the identity ``auth`` reported, else the caller's principals."""
    if isinstance(auth_result, Mapping):
        identity = auth_result.get("identity")
    else:
        identity = getattr(auth_result, "identity", None)
    if identity is not None:
        return f"identity:{identity}"
    if isinstance(principals, tuple):
        return "principals:" + "\x1f".join(sorted(principals))
    return "trusted"


class SlidingWindowLimiter:
    """At most ``limit`` hits per key in any ``window`` seconds."""

    def __init__(self, window: float = WINDOW_SECONDS, clock: Callable[[], float] = time.monotonic):
        self._window = window
        self._clock = clock
        self._hits: dict[str, deque[float]] = {}
        self._lock = threading.Lock()
        self._calls = 0

    def hit(self, key: str, limit: int) -> int | None:
        """Count one hit; returns None when allowed, else the whole seconds until one would be."""
        now = self._clock()
        with self._lock:
            self._calls += 1
            if self._calls % 1024 == 0:
                self._sweep(now)
            hits = self._hits.setdefault(key, deque())
            while hits and hits[0] <= now - self._window:
                hits.popleft()
            if len(hits) >= limit:
                return max(1, math.ceil(hits[len(hits) - limit] + self._window - now))
            hits.append(now)
            return None

    def _sweep(self, now: float) -> None:
        """Forget keys whose every hit has left the window (the map stays bounded by active callers)."""
        for key in [k for k, v in self._hits.items() if not v or v[-1] <= now - self._window]:
            del self._hits[key]

"""Run the async engine from a synchronous framework (Flask, Django views).

One long-lived event loop on a daemon thread serves every sync request in the process, so the
engine's pool for that loop is opened once and reused, instead of a new loop (and new
connections) per request.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="context-engine-loop", daemon=True)
            thread.start()
            _loop = loop
        return _loop


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the shared background loop and wait for its result."""
    return asyncio.run_coroutine_threadsafe(coro, _background_loop()).result()

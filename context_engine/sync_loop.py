"""Run the async engine from synchronous code (Flask and Django views, LangChain and LlamaIndex sync calls).

One long-lived event loop on a daemon thread serves every sync request in the process, so the
engine's pool for that loop is opened once and reused, instead of a new loop (and new
connections) per request.

Hosts close the engine from an exit hook (``atexit``). By then the interpreter has shut down its
thread pools, and closing needs one (the embedded server is released off the loop), so the
loop's executor runs such late calls inline instead of failing.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


class ExitSafeExecutor(ThreadPoolExecutor):
    """A thread pool that, once the interpreter refuses new threaded work, runs a call inline."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        try:
            return super().submit(fn, *args, **kwargs)
        except RuntimeError:  # "cannot schedule new futures after (interpreter) shutdown"
            done: Future[T] = Future()
            try:
                done.set_result(fn(*args, **kwargs))
            except Exception as exc:
                done.set_exception(exc)
            return done


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            loop.set_default_executor(ExitSafeExecutor(thread_name_prefix="context-engine-bridge"))
            thread = threading.Thread(target=loop.run_forever, name="context-engine-loop", daemon=True)
            thread.start()
            _loop = loop
        return _loop


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the shared background loop and wait for its result.

    Called from a coroutine already on that loop it would wait for itself forever, so it refuses.
    """
    loop = _background_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        coro.close()
        raise RuntimeError("a sync call was made from the engine's own background loop; await the async method")
    return asyncio.run_coroutine_threadsafe(coro, loop).result()

"""Waiting on a condition, never on the clock.

A test that sleeps a fixed time, or gives an operation a tight deadline, fails when the machine is
busy. These helpers poll a condition instead; their deadline only guards against a real hang, so
it is set far above anything a loaded machine needs (``HANG_GUARD``) and says what never happened.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

#: seconds before a wait is declared a hang: minutes, not the seconds a quiet machine needs
HANG_GUARD = 600.0
#: how often a condition is polled
POLL_SECONDS = 0.05

T = TypeVar("T")


def until(check: Callable[[], object], what: str, *, deadline: float = HANG_GUARD) -> None:
    """Block until ``check()`` is truthy; fail naming ``what`` only after ``deadline`` seconds."""
    give_up = time.monotonic() + deadline
    while not check():
        if time.monotonic() > give_up:
            raise AssertionError(f"never happened: {what}")
        time.sleep(POLL_SECONDS)


async def until_async(
    check: Callable[[], Awaitable[object] | object], what: str, *, deadline: float = HANG_GUARD
) -> None:
    """``until`` inside an event loop; ``check`` may be a plain function or return an awaitable."""
    give_up = time.monotonic() + deadline
    while True:
        result = check()
        if isinstance(result, Awaitable):
            result = await result
        if result:
            return
        if time.monotonic() > give_up:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(POLL_SECONDS)


async def finishes(work: Awaitable[T], what: str, *, deadline: float = HANG_GUARD) -> T:
    """Await ``work``; only a hang (``deadline`` seconds) fails, never a slow machine."""
    try:
        return await asyncio.wait_for(work, timeout=deadline)
    except TimeoutError:
        raise AssertionError(f"hung: {what}") from None

"""The library's one background loop for sync callers (Flask, Django, LangChain and LlamaIndex sync calls)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from context_engine.sync_loop import run
from routing_core import sync_bridge


def test_sync_callers_share_one_loop_on_its_own_thread() -> None:
    async def where() -> tuple[asyncio.AbstractEventLoop, int]:
        return asyncio.get_running_loop(), threading.get_ident()

    first, second = run(where()), sync_bridge.run(where())
    assert first == second and first[1] != threading.get_ident()


def test_a_sync_call_from_the_loop_itself_is_refused_instead_of_hanging() -> None:
    async def nested() -> str:
        with pytest.raises(RuntimeError, match="await the async method"):
            run(asyncio.sleep(0, result="never"))
        return "refused"

    assert run(nested()) == "refused"

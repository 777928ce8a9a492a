"""Shared pieces of the tool tests: an engine with a secret key, and reading the audit table."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from context_engine import ContextEngine
from context_engine.hooks import Hooks, ToolCallEvent
from tests.conftest import make_config

SECRET_KEY = "tool-test-secret-key-0123456789"


class HookLog:
    """Collects every ``on_tool_call`` event."""

    def __init__(self) -> None:
        self.events: list[ToolCallEvent] = []

    def __call__(self, event: ToolCallEvent) -> None:
        self.events.append(event)


@pytest.fixture
def hook_log() -> HookLog:
    return HookLog()


@pytest.fixture
async def tools_engine(database_url: str, hook_log: HookLog) -> AsyncIterator[ContextEngine]:
    """An engine with a ``secret_key`` (tool configs are encrypted under it) and a tool-call hook."""
    config = make_config(database_url, secret_key=SECRET_KEY)
    async with ContextEngine(config, hooks=Hooks(on_tool_call=hook_log)) as eng:
        yield eng


def table_rows(database_url: str, query: str) -> list[dict[str, Any]]:
    """Rows read straight from the database, bypassing the engine."""
    with psycopg.connect(database_url) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        cur.execute(query)
        return list(cur.fetchall())


def other_database(url: str, name: str) -> str:
    """``url`` pointing at database ``name`` on the same server (socket-directory URLs included)."""
    head, _, query = url.partition("?")
    return f"{head.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")

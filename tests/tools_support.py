"""Shared pieces of the tool tests: an engine with a secret key, and reading the audit table."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
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


def as_user(url: str, user: str, password: str) -> str:
    """``url`` logging in as ``user`` with ``password`` (same server, same database)."""
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{user}:{password}@{rest.split('@', 1)[1]}"


READER_PASSWORD = "pw-reader-7d2e90c4b1"


def create_reader(database_url: str, *grants: str) -> tuple[str, str]:
    """A new least-privilege login role on ``database_url``'s database (CONNECT, USAGE on public,
    then each of ``grants`` run with ``{role}`` filled in): its name and its URL."""
    role = f"reader_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD '{READER_PASSWORD}'")
        conn.execute(f'GRANT CONNECT ON DATABASE "{database_name(database_url)}" TO "{role}"')
        conn.execute(f'GRANT USAGE ON SCHEMA public TO "{role}"')
        for grant in grants:
            conn.execute(grant.format(role=f'"{role}"'))
    return role, as_user(database_url, role, READER_PASSWORD)


def drop_role(database_url: str, role: str) -> None:
    """Drop ``role`` after revoking what it holds here (the database's own grants included)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'DROP OWNED BY "{role}"')
        conn.execute(f'DROP ROLE IF EXISTS "{role}"')


def database_name(url: str) -> str:
    return url.partition("?")[0].rsplit("/", 1)[1]


@pytest.fixture
def reader_url(database_url: str) -> Iterator[str]:
    """A least-privilege role on the engine's own database (the embedded default's shape)."""
    role, url = create_reader(database_url)
    try:
        yield url
    finally:
        drop_role(database_url, role)

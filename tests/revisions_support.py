"""Helpers of the revision tests: a second, empty database beside a test's own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg


def _admin_url(url: str) -> tuple[str, str, str]:
    head, _, query = url.partition("?")
    root, name = head.rsplit("/", 1)
    return root, name, query


@contextmanager
def fresh_database(url: str) -> Iterator[str]:
    """Create the (empty) database named by ``url`` on the same server, drop it afterwards."""
    root, name, query = _admin_url(url)
    admin = f"{root}/postgres" + (f"?{query}" if query else "")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield url
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def sibling_url(url: str, suffix: str) -> str:
    """The URL of a database next to ``url``'s, its name suffixed."""
    root, name, query = _admin_url(url)
    return f"{root}/{name}{suffix}" + (f"?{query}" if query else "")

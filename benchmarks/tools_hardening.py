"""What the governed-tool hardening costs per call.

Run: ``python benchmarks/tools_hardening.py [--calls 100] [--database-url URL]``. Without
``--database-url`` a throwaway embedded PostgreSQL is started in a temporary directory; the URL
given must be able to create a role (one is created and dropped).

* ``role check`` — the least-privilege check a db tool runs before every statement, alone, on an
  open connection of a least-privilege role (one round trip).
* ``db call`` — a whole ``execute_tool`` of ``SELECT 1`` through a db tool: connect, check,
  statement, audit row. The check is part of it.
* ``secret forms`` — ``secret_values`` of an http config with four secrets, every encoding
  included (done once per call).
* ``scrub`` — scrubbing a 20 KB result of those forms.

Figures only, no assertions: compare them with an earlier run on the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg

from context_engine import ContextEngine, ContextEngineConfig
from context_engine.storage import embedded
from context_engine.tools import ToolConfig, db_role
from context_engine.tools.reader_role import reader_url
from context_engine.tools.secrets import scrub, secret_values

HTTP_CONFIG = {
    "url": "https://svc:p%40ss@api.example.com/v1/items?sig=abc%2Fdef%2B123",
    "headers": {"Authorization": "Bearer tok-0123456789abcdef", "X-Api-Key": 'k"ey/with+odd=chars'},
    "query": {"api_key": "qs+ABC/def=ghi&j k"},
}


async def timed(label: str, calls: int, fn: Callable[[], Awaitable[Any]]) -> None:
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        await fn()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    p95 = samples[int(len(samples) * 0.95) - 1]
    print(f"{label:14s} median {statistics.median(samples):8.3f} ms   p95 {p95:8.3f} ms   ({calls} calls)")


async def main(calls: int, database_url: str) -> None:
    role = f"bench_reader_{uuid.uuid4().hex[:8]}"
    password = uuid.uuid4().hex
    with psycopg.connect(database_url, autocommit=True) as conn:
        database = conn.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
        conn.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD '{password}'")
        conn.execute(f'GRANT CONNECT ON DATABASE "{database}" TO "{role}"')
    tool_url = reader_url(database_url, role, password)
    config = ContextEngineConfig(database_url=database_url, secret_key="b" * 32, storage={"auto_migrate": True})
    try:
        async with ContextEngine(config) as engine:
            await engine.register_tool(ToolConfig(name="bench", kind="db", config={"database_url": tool_url}))
            async with await psycopg.AsyncConnection.connect(tool_url) as conn:

                async def check() -> None:
                    async with conn.cursor() as cur:
                        await cur.execute(db_role.CHECK_SQL, db_role.check_params())
                        await cur.fetchone()

                await timed("role check", calls, check)
            await timed("db call", calls, lambda: engine.execute_tool("db_bench", {"query": "SELECT 1"}, principals=[]))

        async def forms() -> None:
            secret_values(HTTP_CONFIG)

        await timed("secret forms", calls, forms)
        found = secret_values(HTTP_CONFIG)
        result = {"items": [{"id": i, "text": "plain words " * 10} for i in range(150)]}

        async def scrubbed() -> None:
            scrub(result, found)

        await timed("scrub", calls, scrubbed)
        print(f"forms per config: {len(found)}")
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--database-url")
    args = parser.parse_args()
    print(f"load average: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.database_url:
        asyncio.run(main(args.calls, args.database_url))
        return
    base = Path(tempfile.mkdtemp(prefix="ce-bench-"))
    pgdata, url = embedded.acquire(base)
    try:
        asyncio.run(main(args.calls, url))
    finally:
        embedded.release(pgdata)
        embedded.remove(base)


if __name__ == "__main__":
    run()

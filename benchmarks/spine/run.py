"""Spine benchmark: ingest throughput and search latency, direct and through each adapter.

Ingests N short generated documents into a fresh embedded PostgreSQL with the local embedding
model, then runs each of Q searches directly on the engine and through FastAPI, Flask and Django
served over real HTTP on 127.0.0.1, interleaved query by query so every path sees the same load.
Prints documents/s (with and without the time spent inside the embedding model), search p50/p95 in
milliseconds, and for each adapter whether its p50 stays within the budget of 1.2 x the direct
p50 + 3 ms. ``GET /health`` through each adapter (no engine call, no database) shows the floor:
what the HTTP server, the framework and the request lifecycle cost on their own.

    .venv/bin/python benchmarks/spine/run.py [--docs 2000] [--queries 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from context_engine import TRUSTED, ContextEngine, ContextEngineConfig
from context_engine.embeddings.base import Embedder, InputKind
from context_engine.embeddings.factory import build_embedder
from context_engine.storage import embedded
from routing_core import sync_bridge

WORDS = (
    "leave policy holiday contract invoice supplier notice payroll benefit pension travel expense "
    "incident runbook restart queue worker deploy release rollback backup database index search "
    "customer renewal discount quarter revenue forecast budget audit compliance security access "
    "laptop badge onboarding training review promotion salary bonus overtime shift roster"
).split()


class TimedEmbedder(Embedder):
    """Delegates to the real model and adds up the seconds spent inside it."""

    def __init__(self, inner: Embedder):
        self.inner = inner
        self.provider, self.model, self.dim = inner.provider, inner.model, inner.dim
        self.max_input_tokens = inner.max_input_tokens
        self.seconds = 0.0

    async def embed(self, texts: list[str], *, kind: InputKind = "document") -> list[list[float]]:
        started = time.perf_counter()
        try:
            return await self.inner.embed(texts, kind=kind)
        finally:
            self.seconds += time.perf_counter() - started

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _doc(rng: random.Random, i: int) -> str:
    sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 14))).capitalize() + "." for _ in range(5)]
    return f"# Note {i}\n\n" + " ".join(sentences)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _row(label: str, times: list[float]) -> str:
    ms = [t * 1000 for t in times]
    return f"| {label:<24} | {len(ms):>5} | {statistics.median(ms):>8.1f} | {_pct(ms, 0.95):>8.1f} |"


def _serve_uvicorn(app: Any, port: int) -> Any:
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    return server


def _serve_wsgi(app: Any, port: int) -> Any:
    import logging

    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = make_server("127.0.0.1", port, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _apps(engine: ContextEngine) -> dict[str, tuple[str, Any]]:
    from fastapi import FastAPI
    from flask import Flask

    from context_engine import create_django_urlpatterns, create_flask_blueprint, create_router

    def allow(_request: Any) -> bool:
        return True

    def caller(_request: Any) -> Any:
        return list(CALLER)  # the direct searches' principals, so both paths run the same query

    fast = FastAPI()
    fast.include_router(create_router(engine, auth=allow, principals=caller))
    flask_app = Flask("bench")
    flask_app.register_blueprint(create_flask_blueprint(engine, auth=allow, principals=caller))

    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            DEBUG=False,
            ALLOWED_HOSTS=["*"],
            ROOT_URLCONF=__name__,
            SECRET_KEY="bench",
            MIDDLEWARE=[],
            INSTALLED_APPS=[],
        )
        django.setup()
    global urlpatterns
    urlpatterns = create_django_urlpatterns(engine, auth=allow, principals=caller)
    from django.core.wsgi import get_wsgi_application

    return {"fastapi": ("asgi", fast), "flask": ("wsgi", flask_app), "django": ("wsgi", get_wsgi_application())}


urlpatterns: list[Any] = []
#: the principals every search runs as, directly and over HTTP
CALLER = ("group:1", "group:2")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    rng = random.Random(7)
    data_dir = Path(tempfile.mkdtemp(prefix="ce-bench-"))
    config = ContextEngineConfig(storage={"data_dir": data_dir})
    embedder = TimedEmbedder(build_embedder(config.embedding))
    try:
        async with ContextEngine(config, embedder=embedder) as engine:
            await engine.stats(principals=TRUSTED)  # start the server and migrate outside the timing
            started = time.perf_counter()
            for i in range(args.docs):
                acl = [] if i % 3 == 0 else [f"group:{i % 7}"]
                await engine.ingest(text=_doc(rng, i), name=f"note-{i}", acl=acl)
            total = time.perf_counter() - started
            queries = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))) for _ in range(args.queries)]
            without = args.docs / (total - embedder.seconds)
            print(f"machine: {os.cpu_count()} cores")
            print(
                f"ingest: {args.docs} documents in {total:.1f} s = {args.docs / total:.1f} docs/s; "
                f"embedding took {embedder.seconds:.1f} s; without it {without:.1f} docs/s"
            )
            await _searches(engine, queries)
    finally:
        embedded.remove(data_dir)  # stops the server if closing the engine left it running, then deletes


async def _searches(engine: ContextEngine, queries: list[str]) -> None:
    """Each query directly, then through each adapter, interleaved so all paths see the same load."""
    servers: list[tuple[str, Any]] = []
    clients: dict[str, httpx.AsyncClient] = {}
    for port, (name, (kind, app)) in enumerate(_apps(engine).items(), start=18731):
        servers.append((kind, _serve_uvicorn(app, port) if kind == "asgi" else _serve_wsgi(app, port)))
        clients[name] = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60)
    await asyncio.sleep(1.0)
    loop = asyncio.get_running_loop()
    direct: list[float] = []
    stages: dict[str, list[float]] = {}
    off_loop: list[float] = []
    off_loop_stages: dict[str, list[float]] = {}
    over_http: dict[str, list[float]] = {name: [] for name in clients}
    floor: dict[str, list[float]] = {name: [] for name in clients}
    inside: dict[str, dict[str, list[float]]] = {name: {} for name in clients}  # the engine's stages, in the server
    try:
        for client in clients.values():  # each mount opens its own pool on its own loop: not timed
            (await client.post("/search", json={"query": "warm up"})).raise_for_status()
        for q in queries:
            t0 = time.perf_counter()
            result = await engine.search(q, principals=list(CALLER), top_k=10)
            direct.append(time.perf_counter() - t0)
            for stage, ms in result.usage["timings_ms"].items():
                stages.setdefault(stage, []).append(ms)
            # the same call on the adapters' shared loop, no HTTP: what running off this loop costs
            t0 = time.perf_counter()
            other = await loop.run_in_executor(
                None, sync_bridge.run, engine.search(q, principals=list(CALLER), top_k=10)
            )
            off_loop.append(time.perf_counter() - t0)
            for stage, ms in other.usage["timings_ms"].items():
                off_loop_stages.setdefault(stage, []).append(ms)
            for name, client in clients.items():
                t0 = time.perf_counter()
                response = await client.post("/search", json={"query": q, "top_k": 10})
                over_http[name].append(time.perf_counter() - t0)
                response.raise_for_status()
                for stage, ms in response.json()["usage"]["timings_ms"].items():
                    inside[name].setdefault(stage, []).append(ms)
                t0 = time.perf_counter()
                (await client.get("/health")).raise_for_status()
                floor[name].append(time.perf_counter() - t0)
    finally:
        for client in clients.values():
            await client.aclose()
        for kind, server in servers:
            if kind == "asgi":
                server.should_exit = True
            else:
                server.shutdown()
    print()
    print("| path                     |     n |  p50 ms  |  p95 ms  |")
    print("|--------------------------|-------|----------|----------|")
    print(_row("engine.search (direct)", direct))
    print(_row("direct, on the shared loop", off_loop))
    for name in clients:
        print(_row(f"{name} over HTTP", over_http[name]))
        print(_row(f"{name} GET /health", floor[name]))
    medians = ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in stages.items())
    print(f"\nmedian ms per stage of the direct searches (legs run concurrently): {medians}")
    spent = ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in off_loop_stages.items())
    print(f"median ms per stage of the same searches on the shared loop (no HTTP): {spent}")
    for name, by_stage in inside.items():
        spent = ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in by_stage.items())
        print(f"median ms per stage of the same searches inside the {name} server: {spent}")
    budget = 1.2 * statistics.median(direct) * 1000 + 3.0
    verdicts = []
    for name, times in over_http.items():
        p50 = statistics.median(times) * 1000
        verdicts.append(f"{name} {p50:.1f} ms ({'within' if p50 <= budget else 'OVER'})")
    print(f"budget 1.2 x direct p50 + 3 ms = {budget:.1f} ms: " + "; ".join(verdicts))


if __name__ == "__main__":
    asyncio.run(main())

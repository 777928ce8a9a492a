"""Load benchmark: ``POST /search`` at 32 concurrent connections through FastAPI, Flask and Django.

Starts an embedded PostgreSQL in a temporary directory, ingests ``--docs`` short generated
documents through the engine, then starts three real server processes on 127.0.0.1, all on that
one database: the FastAPI routes on uvicorn, and the Flask and Django routes on gunicorn (one
worker, ``gthread``, 32 threads). Each server in turn takes ``--seconds`` of ``POST /search`` from
``--connections`` concurrent keep-alive connections (random queries drawn from the corpus
vocabulary); then ``engine.search`` is called directly, in this process, from as many concurrent
tasks for the same time with the same queries. Prints requests, errors (non-2xx answers and
exceptions), throughput and p50/p99 latency per path, with the load average before and after each.

The default embedder is a stand-in (hashed vectors of the local model's width, computed on a
worker thread): the documents and the queries, in every process, are embedded by it, so the
vector leg runs at full cost but ranks nothing meaningful and no model's CPU time is measured.
``--embedder local`` uses the local model for both (the ingest then takes several minutes).

    .venv/bin/python benchmarks/load/run.py                          # 2,000 documents, 60 s per path
    .venv/bin/python benchmarks/load/run.py --docs 200 --seconds 10  # a smoke run

The server processes import this file as a module (``run``) and build their app with the
factories below from the environment variables ``LOADBENCH_DATABASE_URL`` and ``LOADBENCH_EMBEDDER``.
Everything started is stopped and the temporary directory removed at the end, on Ctrl-C too.
Tables go to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from context_engine import TRUSTED, ContextEngine, ContextEngineConfig
from context_engine.embeddings.base import Embedder
from context_engine.storage import embedded

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(HERE) not in sys.path:  # the sibling benchmark's stand-in embedder, also when imported by a server
    sys.path.insert(0, str(HERE))

from fairness import StandInEmbedder  # noqa: E402

WORDS = (
    "leave policy holiday contract invoice supplier notice payroll benefit pension travel expense "
    "incident runbook restart queue worker deploy release rollback backup database index search "
    "customer renewal discount quarter revenue forecast budget audit compliance security access "
    "laptop badge onboarding training review promotion salary bonus overtime shift roster"
).split()
#: who every search runs as, directly and over HTTP (sent in ``X-Principals``)
CALLER = ["group:1", "group:2"]
URL_VARIABLE = "LOADBENCH_DATABASE_URL"
EMBEDDER_VARIABLE = "LOADBENCH_EMBEDDER"


# --- the server side: each server process builds one app from the environment ---------------------


def _engine_from_env() -> ContextEngine:
    config = ContextEngineConfig(database_url=os.environ[URL_VARIABLE])  # type: ignore[arg-type]
    return ContextEngine(config, embedder=_embedder(os.environ.get(EMBEDDER_VARIABLE, "stand-in")))


def _embedder(name: str) -> Embedder | None:
    """The stand-in, or ``None`` for the engine's configured (local) model."""
    return StandInEmbedder() if name == "stand-in" else None


def _allow(_request: Any) -> bool:
    return True  # a benchmark on 127.0.0.1: everyone is admitted


def _principals(request: Any) -> list[str]:
    raw = request.headers.get("X-Principals", "")
    return [p.strip() for p in raw.split(",") if p.strip()]


def fastapi_app() -> Any:
    """The FastAPI routes (``uvicorn --factory run:fastapi_app``)."""
    from fastapi import FastAPI

    from context_engine import create_router

    app = FastAPI()
    app.include_router(create_router(_engine_from_env(), auth=_allow, principals=_principals))
    return app


def flask_app() -> Any:
    """The Flask routes (``gunicorn 'run:flask_app()'``)."""
    from flask import Flask

    from context_engine import create_flask_blueprint

    app = Flask("loadbench")
    app.register_blueprint(create_flask_blueprint(_engine_from_env(), auth=_allow, principals=_principals))
    return app


urlpatterns: list[Any] = []


def django_app() -> Any:
    """The Django routes (``gunicorn 'run:django_app()'``); this module is the URLconf."""
    import django
    from django.conf import settings
    from django.core.wsgi import get_wsgi_application

    from context_engine import create_django_urlpatterns

    settings.configure(
        DEBUG=False,
        ALLOWED_HOSTS=["*"],
        ROOT_URLCONF=__name__,
        SECRET_KEY="loadbench",
        MIDDLEWARE=[],
        INSTALLED_APPS=[],
    )
    django.setup()
    urlpatterns.extend(create_django_urlpatterns(_engine_from_env(), auth=_allow, principals=_principals))
    return get_wsgi_application()


# --- the benchmark side -----------------------------------------------------------------------------


@dataclass
class Tally:
    """What one path answered during its timed window."""

    latencies_ms: list[float] = field(default_factory=list)
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    seconds: float = 0.0
    load_before: float = 0.0
    load_after: float = 0.0

    @property
    def requests(self) -> int:
        return len(self.latencies_ms)

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())


def _document(rng: random.Random, i: int) -> str:
    sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 14))).capitalize() + "." for _ in range(5)]
    return f"# Note {i}\n\n" + " ".join(sentences)


def _queries(rng: random.Random, count: int) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 5))) for _ in range(count)]


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))] if ordered else float("nan")


def _load() -> float:
    return os.getloadavg()[0]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def _ingest(engine: ContextEngine, docs: int, at_once: int) -> float:
    """Ingest ``docs`` generated documents (a third public, the rest in one of 7 groups); the seconds taken."""
    rng = random.Random(7)
    texts = [_document(rng, i) for i in range(docs)]
    gate = asyncio.Semaphore(at_once)

    async def one(i: int) -> None:
        async with gate:
            acl = [] if i % 3 == 0 else [f"group:{i % 7}"]
            report = await engine.ingest(text=texts[i], name=f"note-{i}", acl=acl)
            failed = [d for d in report.documents if d.status != "completed"]
            if failed:
                raise RuntimeError(f"document {i} was not stored: {failed[0].failure_reason}: {failed[0].error}")
            if (i + 1) % 500 == 0:
                _progress(f"  {i + 1} documents ...")

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(docs)))
    return time.perf_counter() - started


def _start_servers(url: str, embedder: str, threads: int) -> dict[str, tuple[subprocess.Popen[bytes], int]]:
    """uvicorn for FastAPI, gunicorn (gthread) for Flask and Django; each on a free port of 127.0.0.1."""
    env = dict(os.environ)
    env[URL_VARIABLE] = url
    env[EMBEDDER_VARIABLE] = embedder
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    servers: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    apps = {"fastapi (uvicorn)": None, "flask (gunicorn)": "flask_app", "django (gunicorn)": "django_app"}
    for name, app in apps.items():
        port = _free_port()
        command = _uvicorn(port) if app is None else _gunicorn(f"run:{app}()", port, threads)
        servers[name] = (subprocess.Popen(command, env=env), port)
    return servers


def _uvicorn(port: int) -> list[str]:
    where = ["--app-dir", str(HERE), "--host", "127.0.0.1", "--port", str(port)]
    quiet = ["--log-level", "warning", "--no-access-log"]
    return [sys.executable, "-m", "uvicorn", "--factory", "run:fastapi_app", *where, *quiet]


def _gunicorn(app: str, port: int, threads: int) -> list[str]:
    """One worker process with ``threads`` threads: every request shares the worker's one engine and pool."""
    where = ["--chdir", str(HERE), "--bind", f"127.0.0.1:{port}"]
    workers = ["--workers", "1", "--worker-class", "gthread", "--threads", str(threads), "--timeout", "120"]
    return [sys.executable, "-m", "gunicorn", *where, *workers, "--log-level", "warning", app]


def _stop_servers(servers: dict[str, tuple[subprocess.Popen[bytes], int]]) -> None:
    for process, _port in servers.values():
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process, _port in servers.values():
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def _wait_ready(client: httpx.AsyncClient, name: str, process: subprocess.Popen[bytes]) -> None:
    """Until ``GET /health`` answers, then a few searches (the pool opens, the model loads): not timed."""
    for _ in range(240):
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with status {process.returncode} before it answered")
        try:
            if (await client.get("/health")).status_code == 200:
                break
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.5)
    else:
        raise RuntimeError(f"{name} did not answer GET /health within 120 s")
    for query in ("warm up", "leave policy", "invoice supplier"):
        (await client.post("/search", json={"query": query, "top_k": 10})).raise_for_status()


async def _drive(call: Any, queries: list[str], connections: int, seconds: float) -> Tally:
    """``connections`` workers each calling ``call(query)`` back to back until ``seconds`` are up."""
    tally = Tally(load_before=_load())
    deadline = time.perf_counter() + seconds

    async def worker(seed: int) -> None:
        rng = random.Random(seed)
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            try:
                error = await call(rng.choice(queries))
            except Exception as exc:  # a failed request is a figure of the run, not the end of it
                error = type(exc).__name__
            tally.latencies_ms.append((time.perf_counter() - started) * 1000)
            if error:
                tally.errors[error] += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker(seed) for seed in range(connections)))
    tally.seconds = time.perf_counter() - started
    tally.load_after = _load()
    return tally


async def _over_http(client: httpx.AsyncClient, queries: list[str], connections: int, seconds: float) -> Tally:
    headers = {"X-Principals": ",".join(CALLER)}

    async def call(query: str) -> str | None:
        response = await client.post("/search", json={"query": query, "top_k": 10}, headers=headers)
        return None if response.is_success else f"HTTP {response.status_code}"

    return await _drive(call, queries, connections, seconds)


async def _direct(engine: ContextEngine, queries: list[str], connections: int, seconds: float) -> Tally:
    async def call(query: str) -> str | None:
        await engine.search(query, principals=list(CALLER), top_k=10)
        return None

    return await _drive(call, queries, connections, seconds)


def _table(rows: dict[str, Tally]) -> str:
    lines = [
        "| path | requests | errors | req/s | p50 ms | p99 ms | load avg before / after |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for name, t in rows.items():
        ms = t.latencies_ms
        lines.append(
            f"| {name} | {t.requests:,} | {t.error_count} | {t.requests / t.seconds:.1f} | "
            f"{_percentile(ms, 0.5):.1f} | {_percentile(ms, 0.99):.1f} | {t.load_before:.2f} / {t.load_after:.2f} |"
        )
    return "\n".join(lines)


async def run(args: argparse.Namespace, url: str) -> None:
    config = ContextEngineConfig(database_url=url, storage={"auto_migrate": True})  # type: ignore[arg-type]
    rows: dict[str, Tally] = {}
    async with ContextEngine(config, embedder=_embedder(args.embedder)) as engine:
        await engine.stats(principals=TRUSTED)  # migrate outside the timing
        _progress(f"ingesting {args.docs} documents (embedder: {args.embedder}) ...")
        ingest_seconds = await _ingest(engine, args.docs, args.ingest_concurrency)
        queries = _queries(random.Random(11), 2000)
        servers = _start_servers(url, args.embedder, args.connections)
        try:
            for name, (process, port) in servers.items():
                limits = httpx.Limits(max_connections=args.connections, max_keepalive_connections=args.connections)
                async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60, limits=limits) as client:
                    await _wait_ready(client, name, process)
                    _progress(f"{name}: {args.connections} connections for {args.seconds} s ...")
                    rows[name] = await _over_http(client, queries, args.connections, args.seconds)
        finally:
            _stop_servers(servers)
        await engine.search("warm up", principals=list(CALLER), top_k=10)
        _progress(f"engine.search direct: {args.connections} tasks for {args.seconds} s ...")
        rows["engine.search (direct, in-process)"] = await _direct(engine, queries, args.connections, args.seconds)

    print(
        f"\nPOST /search, {args.connections} concurrent connections, {args.seconds:g} s per path, "
        f"{args.docs:,} documents, embedder {args.embedder}"
        + (" (hashed stand-in vectors for documents and queries alike)" if args.embedder == "stand-in" else "")
        + f"; {os.cpu_count()} cores; ingest {ingest_seconds:.1f} s\n"
    )
    print(_table(rows))
    for name, t in rows.items():
        if t.errors:
            print(f"errors of {name}: " + ", ".join(f"{kind} x{n}" for kind, n in t.errors.most_common()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=60.0, help="timed window per path")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--embedder", choices=["stand-in", "local"], default="stand-in")
    parser.add_argument("--ingest-concurrency", type=int, default=4, help="documents ingested at once")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ce-loadbench-"))
    try:
        _pgdata, url = embedded.acquire(base)
        asyncio.run(run(args, url))
    except KeyboardInterrupt:
        _progress("interrupted")
    finally:
        embedded.remove(base)  # stops the server whoever still holds it, then deletes the directory
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

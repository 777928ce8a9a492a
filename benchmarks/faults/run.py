"""The write path under faults: concurrent writers of one document, killed hosts, a hostile file.

Prints, per phase, what was admitted, lost and duplicated, and how long recovery took:

* **writers**: ``--writers`` concurrent ingests of one ``(source_id, name)`` from two engines (two
  pools, two lock connections, as two processes would have), each its own text and idempotency key,
  each retried with the same key while it is told ``in_progress``; then every key sent again.
  Admitted = versions the writers were told they stored; lost = admitted versions missing from the
  history or holding another writer's text; duplicated = versions written twice for one key.
* **kills**: a child process ingests a large document and is killed with SIGKILL mid-embedding,
  ``--kills`` times; recovery = from the kill until ``resume_embeddings`` completes the document
  (and, on the last round, until a re-ingest of the same file is admitted).
* **hostile file**: a CSV of ``--rows`` rows is ingested while one-line ingests keep arriving; then
  a document of ``--big-chunks`` chunks embeds while one-line ingests keep arriving. The one-line
  latencies are what a small caller sees beside them.
* **list**: ``ingest_many`` of 1,000 identical ``{"text": "0"}`` entries.

The embedding provider is a small OpenAI-compatible server on 127.0.0.1 started here (hashed
vectors, ``--provider-ms`` per request), so the child processes can use it too. Starts the embedded
PostgreSQL in a temporary directory unless ``--database-url`` is given (an empty database).

    .venv/bin/python benchmarks/faults/run.py
    .venv/bin/python benchmarks/faults/run.py --writers 50 --kills 3 --rows 2000000 --big-chunks 50000
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from sqlalchemy import text

from context_engine import TRUSTED, ContextEngine, ContextEngineConfig, ContextEngineError
from context_engine.hooks import Hooks, ProgressEvent
from context_engine.storage import embedded

ROOT = Path(__file__).resolve().parents[2]
DIM = 16


# ---------------------------------------------------------------------- the fake provider
def _vector(value: str) -> list[float]:
    digest = hashlib.sha256(value.encode()).digest()
    raw = [b / 255.0 + 0.01 for b in digest[:DIM]]
    norm = sum(x * x for x in raw) ** 0.5
    return [x / norm for x in raw]


def start_provider(delay: float) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
            if delay:
                time.sleep(delay)
            data = [{"index": i, "embedding": _vector(t)} for i, t in enumerate(body["input"])]
            payload = json.dumps({"data": data, "usage": {"prompt_tokens": 0, "total_tokens": 0}}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


def settings(url: str, provider: str, **ingest: Any) -> dict[str, Any]:
    return {
        "database_url": url,
        "storage": {"auto_migrate": True},
        "embedding": {
            "provider": "custom",
            "base_url": provider,
            "model": "fake-embed",
            "dim": DIM,
            "api_key": "bench-key",
            "max_retries": 2,
            "max_batch_items": 32,
        },
        "ingest": ingest,
    }


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


async def scalar(engine: ContextEngine, sql: str, **params: Any) -> Any:
    db = await engine._ready()
    async with db.connect() as conn:
        return await conn.scalar(text(sql), params)


# ---------------------------------------------------------------------- writers
async def writers_phase(url: str, provider: str, count: int) -> None:
    config = ContextEngineConfig(**settings(url, provider, write_wait_seconds=1.0))  # type: ignore[arg-type]
    name = f"contended-{uuid.uuid4().hex[:6]}.md"
    bodies = [f"Version {i} of the contended notes: crate {i} goes to pier {i % 7}." for i in range(count)]
    keys = [f"w{i}-{uuid.uuid4().hex[:6]}" for i in range(count)]
    busy_answers = 0
    async with ContextEngine(config) as one, ContextEngine(config) as two:
        engines = [one, two]

        async def write(i: int) -> Any:
            nonlocal busy_answers
            while True:
                report = (await engines[i % 2].ingest(text=bodies[i], name=name, idempotency_key=keys[i])).documents[0]
                if report.skip_reason != "in_progress":
                    return report
                busy_answers += 1
                await asyncio.sleep(0.05)

        started = time.monotonic()
        reports = await asyncio.gather(*(write(i) for i in range(count)))
        elapsed = time.monotonic() - started
        doc_id = reports[0].document_id
        versions = await one.document_versions(doc_id, principals=TRUSTED)
        admitted = [r for r in reports if r.status == "completed"]
        lost = 0
        for i, report in enumerate(reports):
            stored = await one.get_document(doc_id, principals=TRUSTED, version=report.version)
            lost += stored.text != bodies[i]
        by_version = [r.version for r in admitted]
        duplicated = len(versions) - len(set(by_version))
        replay_mismatch = 0
        for i in range(count):
            again = (await engines[1 - i % 2].ingest(text=bodies[i], name=name, idempotency_key=keys[i])).documents[0]
            replay_mismatch += again.version != reports[i].version
        froms = [v.valid_from for v in versions]
    print("\n## writers: concurrent versions of one document")
    print(
        "| writers | admitted | versions in history | lost | duplicated | replays answering another's | "
        "busy answers retried | seconds |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {count} | {len(admitted)} | {len(versions)} | {lost} | {duplicated} | {replay_mismatch} | "
        f"{busy_answers} | {elapsed:.1f} |"
    )
    print(f"revisions strictly increasing: {froms == sorted(set(froms))}")


# ---------------------------------------------------------------------- kills
HOST = """
import asyncio, json, sys
from context_engine import ContextEngine, ContextEngineConfig

async def main() -> None:
    async with ContextEngine(ContextEngineConfig(**json.loads(sys.argv[1]))) as engine:
        with open(sys.argv[2], encoding="utf-8") as handle:
            await engine.ingest(text=handle.read(), name="killed-ledger")

asyncio.run(main())
"""


async def kills_phase(url: str, provider: str, slow_provider: str, rounds: int, sections: int, base: Path) -> None:
    config = ContextEngineConfig(**settings(url, provider))  # type: ignore[arg-type]
    rows = []
    embedding_started: list[float] = []

    def on_progress(event: ProgressEvent) -> None:
        # the run is admitted (owns the document) once it starts embedding
        if (event.stage, event.state) == ("embed", "started") and event.name == "killed-ledger":
            embedding_started.append(time.monotonic())

    async with ContextEngine(config, hooks=Hooks(on_progress=on_progress)) as engine:
        await engine.revision()
        for round_no in range(rounds):
            source = base / f"ledger-{round_no}.md"
            source.write_text(
                "\n\n".join(
                    f"# Entry {round_no}.{i}\n\nCrate {i} of round {round_no} bound for pier 7."
                    for i in range(sections)
                ),
                encoding="utf-8",
            )
            child_settings = json.dumps(settings(url, slow_provider))
            env = dict(os.environ, PYTHONPATH=str(ROOT))
            host = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                HOST,
                child_settings,
                str(source),
                env=env,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 300
            while True:  # until the host has stored some vectors but not all
                embedded_now = await scalar(
                    engine,
                    "SELECT count(*) FROM ce_chunks c JOIN ce_documents d ON d.id = c.document_id "
                    "WHERE d.name = 'killed-ledger' AND d.status = 'embedding' AND c.valid_to IS NULL "
                    "AND c.embedding IS NOT NULL",
                )
                if embedded_now and embedded_now >= 64:
                    break
                if time.monotonic() > deadline or host.returncode is not None:
                    raise SystemExit("the host never got to embedding")
                await asyncio.sleep(0.05)
            host.send_signal(signal.SIGKILL)
            await host.wait()
            killed_at = time.monotonic()
            doc_id = str(await scalar(engine, "SELECT id FROM ce_documents WHERE name = 'killed-ledger'"))
            missing = await scalar(
                engine,
                "SELECT count(*) FROM ce_chunks WHERE document_id = CAST(:d AS uuid) AND valid_to IS NULL "
                "AND embedding IS NULL",
                d=doc_id,
            )
            attempts = 0
            while True:
                attempts += 1
                if round_no == rounds - 1:  # the last round: re-post the same file instead of resuming
                    report = await engine.ingest(text=source.read_text(encoding="utf-8"), name="killed-ledger")
                else:
                    report = await engine.resume_embeddings(doc_id)
                if all(d.skip_reason != "in_progress" for d in report.documents):
                    break
                await asyncio.sleep(0.05)
            recovered = time.monotonic() - killed_at
            admitted = next((t - killed_at for t in embedding_started if t >= killed_at), float("nan"))
            first_answer = attempts
            done = await engine.get_document(doc_id, principals=TRUSTED, include_text=False)
            current = await scalar(
                engine,
                "SELECT count(*) FROM ce_chunks WHERE document_id = CAST(:d AS uuid) AND valid_to IS NULL",
                d=doc_id,
            )
            recovered_by = "re-ingest" if round_no == rounds - 1 else "resume"
            progress = done.meta.get("embedding_progress")
            rows.append(
                f"| {round_no} | {recovered_by} | {missing} | {first_answer} | {admitted:.2f} | {recovered:.2f} | "
                f"{done.status} | {current} | {progress} |"
            )
    print("\n## kills: a host killed (SIGKILL) mid-embedding")
    print(
        "| round | recovered by | vectors missing at the kill | calls until admitted | seconds kill -> embedding "
        "again | seconds kill -> complete | status | current chunks | embedding_progress |"
    )
    print("|---:|---|---:|---:|---:|---:|---|---:|---|")
    for row in rows:
        print(row)


# ---------------------------------------------------------------------- hostile file and a large document
async def one_liners(
    engine: ContextEngine, until: asyncio.Future[Any], latencies: list[float], starts: list[float] | None = None
) -> None:
    i = 0
    while not until.done():
        started = time.monotonic()
        report = (await engine.ingest(text=f"One line {uuid.uuid4().hex}.", name=f"line-{i}")).documents[0]
        latencies.append(time.monotonic() - started)
        if starts is not None:
            starts.append(started)
        assert report.status == "completed", report
        i += 1
        await asyncio.sleep(0.2)


async def hostile_phase(url: str, provider: str, rows: int, big_chunks: int, base: Path) -> None:
    config = ContextEngineConfig(**settings(url, provider))  # type: ignore[arg-type]
    csv_path = base / "hostile.csv"
    with csv_path.open("w", encoding="utf-8") as handle:
        handle.write("id,a,b\n")
        for i in range(rows):
            handle.write(f"{i},{i % 97},x{i % 13}\n")
    size_mb = csv_path.stat().st_size / 1e6
    async with ContextEngine(config) as engine:
        await engine.revision()
        # the hostile CSV
        latencies: list[float] = []
        started = time.monotonic()
        hostile = asyncio.ensure_future(engine.ingest(file=csv_path, name="hostile.csv"))
        lines = asyncio.ensure_future(one_liners(engine, hostile, latencies))
        outcome = "stored"
        try:
            await hostile
        except ContextEngineError as exc:
            outcome = f"{exc.status} {exc.code}: {exc.message[:60]}"
        refused_after = time.monotonic() - started
        await lines
        print("\n## hostile file and a large document beside one-line ingests")
        print("| load | outcome | seconds | one-line ingests meanwhile | their p50 s | p95 s | max s |")
        print("|---|---|---:|---:|---:|---:|---:|")
        print(
            f"| CSV, {rows:,} rows ({size_mb:.1f} MB) | {outcome} | {refused_after:.1f} | {len(latencies)} | "
            f"{statistics.median(latencies) if latencies else float('nan'):.2f} | "
            f"{percentile(latencies, 0.95):.2f} | {max(latencies, default=float('nan')):.2f} |"
        )
        # a large document: admitted (under every cap) and embedded beside small ones
        big = "\n\n".join(f"# Section {i}\n\nLedger {i} lists crate {i} for pier {i % 7}." for i in range(big_chunks))
        latencies = []
        starts: list[float] = []
        embedding_from: list[float] = []
        engine.hooks = Hooks(
            on_progress=lambda e: (
                embedding_from.append(time.monotonic())
                if (e.stage, e.state, e.name) == ("embed", "started", "large.md")
                else None
            )
        )
        started = time.monotonic()
        large = asyncio.ensure_future(engine.ingest(text=big, name="large.md"))
        lines = asyncio.ensure_future(one_liners(engine, large, latencies, starts))
        report = (await large).documents[0]
        took = time.monotonic() - started
        await lines
        split = embedding_from[0] if embedding_from else float("inf")
        phases = {
            "extracted and written (one transaction)": [
                lat for lat, at in zip(latencies, starts, strict=True) if at < split
            ],
            "embedding": [lat for lat, at in zip(latencies, starts, strict=True) if at >= split],
        }
        for phase, values in phases.items():
            print(
                f"| Markdown, {report.chunks:,} chunks: {phase} | {report.status} | {took:.1f} | {len(values)} | "
                f"{statistics.median(values) if values else float('nan'):.2f} | "
                f"{percentile(values, 0.95):.2f} | {max(values, default=float('nan')):.2f} |"
            )


# ---------------------------------------------------------------------- the list
async def list_phase(url: str, provider: str) -> None:
    config = ContextEngineConfig(**settings(url, provider))  # type: ignore[arg-type]
    async with ContextEngine(config) as engine:
        await engine.revision()
        started = time.monotonic()
        report = await engine.ingest_many([{"text": "0"}] * 1000)
        took = time.monotonic() - started
        docs = await scalar(engine, "SELECT count(*) FROM ce_documents WHERE name LIKE 'untitled-%'")
        route_status, route_took = await _list_over_http(engine)
    print("\n## a list of 1,000 identical entries")
    print("| door | entries | completed | skipped (unchanged) | documents stored | seconds |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| `ingest_many` | 1000 | {report.totals['completed']} | {report.totals['skipped']} | {docs} | {took:.2f} |")
    print(f"| `POST /documents` (FastAPI, in process) | 1000 | HTTP {route_status} | | | {route_took:.2f} |")


async def _list_over_http(engine: ContextEngine) -> tuple[int, float]:
    """The same list through the FastAPI adapter (another text, so it is new content)."""
    import httpx
    from fastapi import FastAPI

    from adapters.fastapi import create_router

    app = FastAPI()
    app.include_router(create_router(engine, auth=lambda request: True, principals=lambda request: TRUSTED))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench") as client:
        started = time.monotonic()
        response = await client.post("/documents", json=[{"text": "1"}] * 1000, timeout=600)
        return response.status_code, time.monotonic() - started


async def run(args: argparse.Namespace, url: str, base: Path) -> None:
    server, provider = start_provider(args.provider_ms / 1000)
    slow, slow_provider = start_provider(max(args.provider_ms, 20) / 1000)
    try:
        print(f"load before: {os.getloadavg()}")
        await writers_phase(url, provider, args.writers)
        await kills_phase(url, provider, slow_provider, args.kills, args.kill_sections, base)
        await list_phase(url, provider)
        await hostile_phase(url, provider, args.rows, args.big_chunks, base)
        print(f"\nload after: {os.getloadavg()}")
    finally:
        server.shutdown()
        slow.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, default=50)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--kill-sections", type=int, default=1500)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--big-chunks", type=int, default=50_000)
    parser.add_argument("--provider-ms", type=float, default=5.0, help="the fake provider's time per request")
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ce-faults-"))
    try:
        if args.database_url:
            asyncio.run(run(args, args.database_url, base))
            return
        pgdata, url = embedded.acquire(base / "pg")
        try:
            asyncio.run(run(args, url, base))
        finally:
            embedded.release(pgdata)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

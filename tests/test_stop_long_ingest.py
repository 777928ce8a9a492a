"""SIGTERM stops a server that is in the middle of a long ingest, and the document stays resumable.

The server is the real ``context-engine serve`` in a child process; its embedding provider is a fake
OpenAI-compatible server on 127.0.0.1 that answers the first few requests and then holds every
other one until the test lets go. The process must exit while the provider is still holding (so it
did not wait for the ingest to finish); then the document is resumed to completion here.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from context_engine import TRUSTED, ContextEngine
from tests.conftest import make_config
from tests.fakes.http_server import (  # noqa: F401
    FakeHTTPServer,
    Target,
    fake_embedding,
    fake_http_server,
    fake_openai_embeddings,
)

DIM = 8
ROOT = Path(__file__).resolve().parents[1]
SECTIONS = 300


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for(check: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=30).status_code == 200
    except httpx.TransportError:
        return False


def test_sigterm_stops_a_server_mid_ingest_and_the_document_resumes(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    ok = fake_openai_embeddings(DIM)
    hold = threading.Event()
    seen = {"requests": 0}

    def held(body: Any, headers: dict[str, str], target: Target) -> Any:
        seen["requests"] += 1
        if seen["requests"] > 3:
            hold.wait(120)
        return ok(body, headers, target)

    fake_http_server.route("POST", "/v1/embeddings", held)
    port = _free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "CE_STORAGE__AUTO_MIGRATE": "true",
        "CE_EMBEDDING__PROVIDER": "custom",
        "CE_EMBEDDING__BASE_URL": fake_http_server.url("/v1"),
        "CE_EMBEDDING__MODEL": "fake-embed",
        "CE_EMBEDDING__DIM": str(DIM),
        "CE_EMBEDDING__API_KEY": "test-key",
        "CE_EMBEDDING__MAX_RETRIES": "0",
        "CE_EMBEDDING__MAX_BATCH_ITEMS": "2",
    }
    argv = [sys.executable, "-m", "context_engine.cli", "serve", "--port", str(port)]
    argv += ["--database-url", database_url, "--trusted", "--shutdown-seconds", "1"]
    server = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    posted: dict[str, Any] = {}
    try:
        _wait_for(lambda: _answers(f"http://127.0.0.1:{port}/stats"), 120, "the server to answer")
        body = {
            "text": "\n\n".join(f"# Part {i}\n\nLine {i} lists crate {i}." for i in range(SECTIONS)),
            "name": "long",
        }

        def post() -> None:
            try:
                posted["response"] = httpx.post(f"http://127.0.0.1:{port}/documents", json=body, timeout=120)
            except httpx.TransportError as exc:
                posted["error"] = exc

        poster = threading.Thread(target=post, daemon=True)
        poster.start()
        _wait_for(lambda: seen["requests"] > 3, 120, "the ingest to be embedding")
        server.send_signal(signal.SIGTERM)
        _out, err = server.communicate(timeout=90)
        # it stopped while the provider still held the ingest's requests: it did not wait for the ingest
        assert not hold.is_set()
    finally:
        hold.set()
        if server.poll() is None:
            server.kill()
            server.wait()
    poster.join(timeout=60)
    assert server.returncode in (0, -signal.SIGTERM), err
    assert "response" not in posted or posted["response"].status_code != 201  # the ingest was cut short

    asyncio.run(_resume(database_url, fake_http_server))


async def _resume(database_url: str, server: FakeHTTPServer) -> None:
    async with ContextEngine(make_config(database_url, embedding=fake_embedding(server, DIM))) as engine:
        docs = (await engine.list_documents(principals=TRUSTED)).documents
        assert [(d.name, d.status, d.chunk_count) for d in docs] == [("long", "embedding", SECTIONS)]
        resumed = (await engine.resume_embeddings()).documents
        assert [d.status for d in resumed] == ["completed"]
        doc = await engine.get_document(docs[0].id, principals=TRUSTED, include_text=False)
        progress = doc.meta["embedding_progress"]
        assert (progress["done"], progress["total"]) == (SECTIONS, SECTIONS)

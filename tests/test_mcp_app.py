"""``create_mcp_app`` and ``context-engine mcp`` over real HTTP with the MCP SDK's own client.

Mounted in FastAPI beside ordinary routes, the host's resolvers run on every call and read the
incoming request through ``current_request()``; a resolver answering None fails the call rather
than opening the corpus; redaction and host runners apply per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from fastapi import FastAPI
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from context_engine import ContextEngine
from context_engine.mcp import create_mcp_app, current_request
from context_engine.mcp.app import HOST_ERROR
from context_engine.redaction import RedactionPolicy, RedactionRule
from tests import test_knowledge_tool_doors as doors
from tests.test_knowledge_tool_doors import Corpus, ServerThread
from tests.waiting import HANG_GUARD

# the doors suite's module fixtures, for a database and corpus of this module's own
module_database = doors.module_database
tool_engine = doors.tool_engine
corpus = doors.corpus

ROOT = Path(__file__).resolve().parent.parent
TOKENS = {"token-hr": ["group:hr"], "token-legal": ["group:legal"]}


async def call(url: str, args: dict[str, Any], headers: dict[str, str] | None = None) -> dict[str, Any]:
    async with httpx2.AsyncClient(headers=headers or {}, timeout=60) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            result = await client.call_tool("search_knowledge_base", args)
    assert result.structured_content is not None
    return result.structured_content


@contextlib.contextmanager
def serve(app: Any) -> Iterator[str]:
    with ServerThread(app) as base:
        yield base


def names(answer: dict[str, Any]) -> set[str]:
    return {d["name"] for d in answer["documents"]}


@pytest.mark.parametrize("started_by", ["host lifespan", "first request"])
async def test_mounted_in_fastapi_resolves_the_caller_per_call(
    tool_engine: ContextEngine, corpus: Corpus, started_by: str
) -> None:
    seen_paths: list[str] = []

    async def principals() -> list[str]:  # async, reading the host's own auth from the request
        request = current_request()
        assert request is not None
        seen_paths.append(request.url.path)
        token = (request.headers.get("authorization") or "").removeprefix("Bearer ")
        return TOKENS.get(token, [])

    mcp_app = create_mcp_app(tool_engine, principals=principals, scope=lambda: ["hr", "legal"])

    @contextlib.asynccontextmanager
    async def close_on_shutdown(_app: FastAPI) -> AsyncIterator[None]:
        yield
        await mcp_app.aclose()

    app = FastAPI(lifespan=mcp_app.lifespan if started_by == "host lifespan" else close_on_shutdown)

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    app.mount("/mcp", mcp_app)
    with serve(app) as base:
        async with httpx.AsyncClient() as http:
            assert (await http.get(base + "/health")).json() == {"status": "ok"}
        url = base + "/mcp/"
        hr = await call(url, {"action": "discover"}, {"authorization": "Bearer token-hr"})
        legal = await call(url, {"action": "discover"}, {"authorization": "Bearer token-legal"})
        anonymous = await call(url, {"action": "discover"})
    assert names(hr) == {"leave-policy.md", "holidays.txt"}
    assert names(legal) == {"holidays.txt", "contract.md"}
    assert names(anonymous) == {"holidays.txt"}
    assert seen_paths and all(p.startswith("/mcp") for p in seen_paths)


@pytest.mark.parametrize("which", ["principals", "scope"])
async def test_a_resolver_answering_none_fails_the_call(tool_engine: ContextEngine, corpus: Corpus, which: str) -> None:
    resolvers: dict[str, Any] = {"principals": lambda: [], "scope": lambda: ["hr"]}
    resolvers[which] = lambda: None
    with serve(create_mcp_app(tool_engine, **resolvers)) as base:
        answer = await call(base + "/mcp", {"action": "list"})
    assert answer == {"success": False, "error": HOST_ERROR}


async def test_redaction_and_key_are_resolved_per_call(tool_engine: ContextEngine, corpus: Corpus) -> None:
    policy = RedactionPolicy(rules=[RedactionRule(name="invoice", pattern=r"\b2525\b")])
    hashing = RedactionPolicy(rules=[RedactionRule(name="invoice", pattern=r"\b2525\b", action="hash")])
    keys = iter(["tenant-a", "tenant-b"])
    with serve(create_mcp_app(tool_engine, principals=[], scope=["finance"], redaction=lambda: policy)) as base:
        masked = await call(base + "/mcp", {"action": "get_doc", "document_id": corpus["invoice-2525.txt"]})
    assert "2525" not in masked["document"]["text"] and "[INVOICE]" in masked["document"]["text"]
    assert "2525" not in masked["document"]["name"]
    app = create_mcp_app(
        tool_engine, principals=[], scope=["finance"], redaction=hashing, secret_key=lambda: next(keys)
    )
    args = {"action": "get_chunks", "document_id": corpus["invoice-2525.txt"]}
    with serve(app) as base:
        first = await call(base + "/mcp", args)
        second = await call(base + "/mcp", args)
    a, b = first["chunks"][0]["text"], second["chunks"][0]["text"]
    assert "2525" not in a and "2525" not in b
    assert a != b  # a key per tenant: the same value hashes to different tokens


async def test_host_compute_runner_turns_compute_on_and_is_masked(tool_engine: ContextEngine, corpus: Corpus) -> None:
    calls: list[dict[str, Any]] = []

    async def my_compute(instruction: str, *, source_ids: Any, document_ids: Any, principals: Any) -> dict[str, Any]:
        calls.append({"instruction": instruction, "source_ids": source_ids, "document_ids": document_ids,
                      "principals": principals})
        return {"result": 2020, "note": "ask ada@example.com", "documents_used": ["costs.csv"]}

    policy = RedactionPolicy(rules=[RedactionRule(name="email", detector="email")])
    app = create_mcp_app(tool_engine, principals=["group:hr"], scope=["finance", "sheets"], redaction=policy,
                         compute=my_compute)
    with serve(app) as base:
        answer = await call(base + "/mcp", {"action": "compute", "query": "total amount", "source_ids": ["finance",
                                                                                                         "legal"]})
        found = await call(base + "/mcp", {"action": "discover", "source_ids": ["finance"]})
    assert answer["success"] is True and answer["result"] == 2020
    assert "ada@example.com" not in json.dumps(answer) and "[EMAIL]" in answer["note"]
    assert calls == [{"instruction": "total amount", "source_ids": ["finance"], "document_ids": None,
                      "principals": ("group:hr",)}]
    assert "OFF" not in found["available_actions"]["compute"]
    assert "OFF" in found["available_actions"]["map_reduce"]


async def test_map_reduce_is_refused_over_sheets_before_the_runner(tool_engine: ContextEngine, corpus: Corpus) -> None:
    calls: list[dict[str, Any]] = []

    async def my_map_reduce(instruction: str, **kwargs: Any) -> dict[str, Any]:
        calls.append(kwargs)
        return {"results": [], "processed": len(kwargs["document_ids"])}

    sheets = await tool_engine.search_knowledge_base(
        action="map_reduce", query="does it mention north?", principals=[], scope=["sheets"], map_reduce=my_map_reduce
    )
    assert sheets["success"] is False and sheets["next_action"]["action"] == "compute"
    assert calls == []
    mixed = await tool_engine.search_knowledge_base(
        action="map_reduce", query="does it mention north?", principals=[], scope=["finance"], map_reduce=my_map_reduce
    )
    assert mixed["success"] is True and mixed["hint"]["action"] == "compute"
    (only,) = calls
    expected = {corpus[n] for n in ("costs.csv", "invoice-2525.txt", "config.json", "broken.pdf")}
    assert set(only["document_ids"]) == expected and only["limit"] == 25 and only["principals"] == ()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _wait_for_port(port: int, proc: asyncio.subprocess.Process, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            assert proc.returncode is None, "context-engine mcp exited"
            assert time.monotonic() < deadline, "context-engine mcp did not start"
            await asyncio.sleep(0.2)


async def test_cli_serves_one_database_anonymously(module_database: str, corpus: Corpus) -> None:
    port = _free_port()
    script = (
        "import argparse, sys\n"
        "from context_engine.cli import mcp as cli\n"
        "parser = argparse.ArgumentParser(); sub = parser.add_subparsers(dest='command')\n"
        "cli.add_parser(sub)\n"
        "sys.exit(cli.run(parser.parse_args(sys.argv[1:])))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, "mcp", "--database-url", module_database, "--port", str(port),
        stderr=asyncio.subprocess.PIPE, env=env, cwd=ROOT,
    )
    try:
        await _wait_for_port(port, proc, HANG_GUARD)
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:  # as the README shows it
            result = await client.call_tool("search_knowledge_base", {"action": "list"})
        answer = result.structured_content
    finally:
        proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert names(answer) == {"holidays.txt", "costs.csv", "sales.xlsx", "budget.csv", "invoice-2525.txt",
                             "config.json", "broken.pdf", "manual.md", "wide.csv"}  # anonymous: no ACL'd document
    text = err.decode()
    assert "anonymous" in text and "UNSCOPED" in text


async def test_host_header_checks_follow_allowed_hosts(tool_engine: ContextEngine, corpus: Corpus) -> None:
    """By default only the loopback names reach the tool (DNS rebinding); a listed name does too;
    ``allowed_hosts=None`` leaves the decision to the host's own server."""
    default = create_mcp_app(tool_engine, principals=[], scope=["hr"])
    with serve(default) as base:
        assert names(await call(base + "/mcp", {"action": "list"})) == {"holidays.txt"}
        async with httpx.AsyncClient() as http:
            rebound = await http.post(
                base + "/mcp",
                headers={"host": "attacker.example", "content-type": "application/json",
                         "accept": "application/json, text/event-stream"},
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            )
            foreign = await http.post(
                base + "/mcp",
                headers={"origin": "http://attacker.example", "content-type": "application/json",
                         "accept": "application/json, text/event-stream"},
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            )
    assert rebound.status_code == 421 and foreign.status_code == 403
    named = create_mcp_app(tool_engine, principals=[], scope=["hr"], allowed_hosts=["knowledge.example.com"])
    with serve(named) as base:
        answer = await call(base + "/mcp", {"action": "list"}, {"host": "knowledge.example.com"})
    assert names(answer) == {"holidays.txt"}
    open_app = create_mcp_app(tool_engine, principals=[], scope=["hr"], allowed_hosts=None)
    with serve(open_app) as base:
        answer = await call(base + "/mcp", {"action": "list"}, {"host": "knowledge.example.com"})
    assert names(answer) == {"holidays.txt"}
    guarded = create_mcp_app(tool_engine, principals=[], scope=["hr"], allowed_hosts=["127.0.0.1:*"])
    with serve(guarded) as base:
        assert names(await call(base + "/mcp", {"action": "list"})) == {"holidays.txt"}
        async with httpx.AsyncClient() as http:
            refused = await http.post(
                base + "/mcp",
                headers={"host": "attacker.example", "content-type": "application/json",
                         "accept": "application/json, text/event-stream"},
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            )
    assert refused.status_code == 421

"""What the governed path adds to a tool call, and what result shaping costs.

Run: ``python benchmarks/tools_overhead.py [--calls 200] [--rows 10000] [--database-url URL]``.
Without ``--database-url`` a throwaway embedded PostgreSQL is started in a temporary directory.

* ``fn`` — a function tool that returns at once: the lookup, argument check, audit row and hook
  are all there is, so this is the path's own cost.
* ``http`` — an http tool against a local server, next to the same request sent with a bare
  ``httpx`` client: the difference is config decryption, the egress check, scrubbing and the audit.
* ``gated`` — open an approval, approve it, claim and run it: the approval round trip.
* ``shape`` — ``shape_result`` of a table in json and tsv mode with the default budget, and
  ``rows_to_tsv`` of the whole table.

Figures only, no assertions: compare them with an earlier run on the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from context_engine import ContextEngine, ContextEngineConfig
from context_engine.tools import ToolConfig, resolve_approval, rows_to_tsv
from context_engine.tools.shaping import shape_result

BODY = json.dumps({"temp": 21, "city": "Oslo", "items": [{"i": i} for i in range(20)]}).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve() -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/w"


async def timed(calls: int, fn: Callable[[int], Awaitable[Any]]) -> tuple[float, float]:
    """Median and p95 milliseconds of ``calls`` sequential awaits (after 10 warm-up calls)."""
    for i in range(10):
        await fn(i)
    samples = []
    for i in range(calls):
        started = time.perf_counter()
        await fn(i)
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.95) - 1]


async def run(args: argparse.Namespace) -> None:
    data: dict[str, Any] = {"secret_key": "benchmark-secret-key"}
    if args.database_url:
        data.update(database_url=args.database_url, storage={"auto_migrate": True})
    else:
        data["storage"] = {"data_dir": tempfile.mkdtemp(prefix="ce-bench-tools-")}
    server, url = serve()
    async with ContextEngine(ContextEngineConfig(**data)) as engine:
        engine.register_function_tool(lambda n: {"n": n}, name="echo")
        engine.register_function_tool(lambda n: {"n": n}, name="gated", requires_approval=True)
        config = {"url": url, "headers": {"Authorization": "Bearer x-benchmark-token"}, "allowed_hosts": ["127.0.0.1"]}
        await engine.register_tool(ToolConfig(name="bench", kind="http", config=config))

        fn = await timed(args.calls, lambda i: engine.execute_tool("fn_echo", {"n": i}, principals=["u"]))
        http = await timed(args.calls, lambda i: engine.execute_tool("http_bench", {"n": i}, principals=["u"]))
        async with httpx.AsyncClient() as client:
            bare = await timed(args.calls, lambda i: client.get(url, params={"n": i}))

        async def gated_round(i: int) -> None:
            ask = await engine.execute_tool("fn_gated", {"n": i}, principals=["u"], approval_scope="bench")
            await resolve_approval(engine, ask["approval_required"]["approval_id"], "approved", approver="bench")
            done = await engine.execute_tool("fn_gated", {"n": i}, principals=["u"], approval_scope="bench")
            assert "result" in done

        gated = await timed(max(args.calls // 4, 10), gated_round)
    server.shutdown()

    rows = [
        {"id": i, "name": f"customer {i}", "note": None if i % 3 else "a\tb", "total": i * 1.5}
        for i in range(args.rows)
    ]
    shape = {}
    for mode in ("json", "tsv"):
        started = time.perf_counter()
        shape_result({"rows": rows}, mode=mode)  # type: ignore[arg-type]
        shape[mode] = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    rows_to_tsv(rows)
    whole = (time.perf_counter() - started) * 1000

    print(f"{'path':<34} {'median ms':>10} {'p95 ms':>8}")
    for label, (median, p95) in (
        ("fn tool via execute_tool", fn),
        ("http tool via execute_tool", http),
        ("same GET with a bare httpx client", bare),
        ("gated: ask, approve, claim + run", gated),
    ):
        print(f"{label:<34} {median:>10.2f} {p95:>8.2f}")
    print(f"\nshape_result of {args.rows} rows, default budget: json {shape['json']:.1f} ms, tsv {shape['tsv']:.1f} ms")
    print(f"rows_to_tsv of all {args.rows} rows: {whole:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--database-url")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()

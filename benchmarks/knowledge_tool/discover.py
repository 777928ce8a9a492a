"""``discover`` on a scope of 2,000 documents: wall time per call, p50 and p95.

Run from the repository root::

    python benchmarks/knowledge_tool/discover.py [--docs 2000] [--runs 40] [--database-url URL]

The corpus is generated: Markdown documents with headings (about 70%), CSV spreadsheets (20%) and
JSON documents (10%), spread over four sources, half of them behind an ACL, each with a few
attributes so ``fields_by_type`` has work to do. Vectors come from a hashing stand-in embedder:
``discover`` never reads a vector, so the model's speed would only lengthen the setup. Without
``--database-url`` a throwaway embedded server is used.

Each case calls ``engine.search_knowledge_base(action="discover", ...)`` ``--runs`` times after two
warm-up calls and reports nearest-rank p50 / p95 in milliseconds. The target is p50 < 300 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import shutil
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from context_engine import TRUSTED, UNSCOPED, ContextEngine, ContextEngineConfig, Scope
from context_engine.embeddings.base import Embedder, InputKind
from context_engine.storage import embedded

SOURCES = ("hr", "finance", "legal", "ops")
DIM = 384


class HashEmbedder(Embedder):
    """Deterministic hashed unit vectors: enough for ingest, never read by discover."""

    provider, model, dim, max_input_tokens = "bench", "hash", DIM, 100_000

    async def embed(self, texts: list[str], *, kind: InputKind = "document") -> list[list[float]]:
        out = []
        for text in texts:
            raw = b"".join(hashlib.sha256(f"{i}:{text}".encode()).digest() for i in range(DIM * 4 // 32))
            values = [x / 2**31 - 1.0 for x in struct.unpack(f">{DIM}I", raw[: DIM * 4])]
            norm = sum(v * v for v in values) ** 0.5 or 1.0
            out.append([v / norm for v in values])
        return out


def document(i: int) -> dict[str, Any]:
    source = SOURCES[i % len(SOURCES)]
    acl = [f"group:{source}"] if i % 2 else []
    attributes = {"year": 2020 + i % 5, "owner": f"team-{i % 7}"}
    if i % 10 < 7:
        sections = "\n\n".join(f"## Section {s} of {i}\nClause {s} text for document {i}." for s in range(3 + i % 4))
        return {"text": f"# Policy {i}\n\n{sections}", "name": f"policy-{i}.md", "source_id": source, "acl": acl,
                "attributes": attributes}
    if i % 10 < 9:
        rows = "\n".join(f"r{r},{r * i % 97},{2020 + r % 4}" for r in range(30))
        return {"file": f"region,amount,year\n{rows}\n".encode(), "name": f"sheet-{i}.csv", "source_id": source,
                "acl": acl, "attributes": attributes}
    body = json.dumps({"id": i, "kind": "config", "owner": f"team-{i % 7}", "limits": {"max": i}})
    return {"file": body.encode(), "name": f"config-{i}.json", "source_id": source, "acl": acl,
            "attributes": attributes}


async def ingest(engine: ContextEngine, count: int) -> None:
    gate = asyncio.Semaphore(4)

    async def one(i: int) -> None:
        async with gate:
            await engine.ingest(**document(i))

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(count)))
    print(f"ingested {count} documents in {time.perf_counter() - started:.1f} s", flush=True)


def nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q * len(ordered) + 0.5) - 1))]


async def measure(engine: ContextEngine, runs: int, **kwargs: Any) -> tuple[list[float], dict[str, Any]]:
    answer: dict[str, Any] = {}
    for _ in range(2):
        answer = await engine.search_knowledge_base(action="discover", **kwargs)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        answer = await engine.search_knowledge_base(action="discover", **kwargs)
        times.append((time.perf_counter() - t0) * 1000)
    assert answer["success"], answer
    return times, answer


async def run(args: argparse.Namespace) -> None:
    scratch: Path | None = None
    pgdata = None
    url = args.database_url
    if url is None:
        scratch = Path(tempfile.mkdtemp(prefix="ce-bench-kt-"))
        pgdata, url = embedded.acquire(scratch)
    try:
        config = ContextEngineConfig(database_url=url, storage={"auto_migrate": True})  # type: ignore[arg-type]
        async with ContextEngine(config, embedder=HashEmbedder()) as engine:
            await ingest(engine, args.docs)
            cases = {
                "trusted, UNSCOPED (all documents)": {"principals": TRUSTED, "scope": UNSCOPED},
                "one group, ceiling of 2 sources": {"principals": ["group:hr"], "scope": ["hr", "finance"]},
                "anonymous, UNSCOPED": {"principals": [], "scope": UNSCOPED},
                "trusted, 100 per page": {"principals": TRUSTED, "scope": UNSCOPED, "limit": 100},
                "trusted, 20 named documents": {"principals": TRUSTED, "scope": Scope()},
            }
            listed = await engine.search_knowledge_base(action="list", limit=20, principals=TRUSTED, scope=UNSCOPED)
            cases["trusted, 20 named documents"]["document_ids"] = [d["id"] for d in listed["documents"]]
            print(f"\ndiscover over {args.docs} documents, {args.runs} runs each (ms)")
            print(f"{'case':<38} {'in scope':>8} {'listed':>6} {'p50':>8} {'p95':>8} {'mean':>8}")
            for name, kwargs in cases.items():
                times, answer = await measure(engine, args.runs, **kwargs)
                in_scope = sum(t["count"] for t in answer["document_types"])
                print(
                    f"{name:<38} {in_scope:>8} {answer['count']:>6} {nearest_rank(times, 0.5):>8.1f} "
                    f"{nearest_rank(times, 0.95):>8.1f} {statistics.fmean(times):>8.1f}"
                )
    finally:
        if pgdata is not None:
            embedded.release(pgdata)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--database-url", help="PostgreSQL URL (a scratch database); omit for an embedded server")
    asyncio.run(run(parser.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

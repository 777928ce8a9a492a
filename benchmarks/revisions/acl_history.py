"""What "revocation reaches history" costs: a caller's search, list and stats as of a past revision,
against the same reads as a trusted caller (no ACL at all) and against the caller's current reads.

Run from the repository root::

    python benchmarks/revisions/acl_history.py --docs 3000 --queries 40

A generated corpus (short documents from a 60-word vocabulary, each under one of eight group ACLs
or public) is ingested through ``ingest_many`` on an embedded PostgreSQL under ``benchmarks/.cache``;
its revision is recorded, then a quarter of the documents are re-ACLed (a new version each) and a
tenth deleted. The caller holds two groups. Every past read of the caller carries the condition that
the document's ACL of today (its last one, once deleted) admits it, as well as the row's own ACL of
then; a trusted caller's carries neither. The vectors come from a bag-of-words hash, so the figures
are those of the database, not of an embedding model.

Printed: p50/p95 milliseconds per read kind, and the ratio of the caller's past read to its current one.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg

from context_engine import TRUSTED, ContextEngine
from context_engine.config import ContextEngineConfig
from context_engine.embeddings.base import Embedder, InputKind
from context_engine.storage import embedded

CACHE = Path(__file__).resolve().parent.parent / ".cache"
WORDS = [f"w{i:02d}" for i in range(60)]
GROUPS = [f"group:{i}" for i in range(8)]
CALLER = ["group:0", "group:1"]


class HashEmbedder(Embedder):
    """A deterministic bag-of-words vector: no model time in the figures."""

    provider, model, dim, max_input_tokens = "bench", "hash-words", 64, 512

    async def embed(self, texts: list[str], *, kind: InputKind = "document") -> list[list[float]]:
        out = []
        for text in texts:
            vec = [0.0] * self.dim
            for word in text.lower().split():
                vec[int(hashlib.sha256(word.encode()).hexdigest(), 16) % self.dim] += 1.0
            out.append(vec)
        return out

    async def aclose(self) -> None:
        return None


def database_url(name: str) -> str:
    _pgdata, base = embedded.acquire(CACHE / "pg")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    head, _, query = base.partition("?")
    return f"{head.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")


async def timed(n: int, read: Callable[[int], Awaitable[Any]]) -> list[float]:
    out = []
    for i in range(n):
        started = time.perf_counter()
        await read(i)
        out.append((time.perf_counter() - started) * 1000)
    return out


def summary(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


async def main(docs: int, queries: int) -> int:
    rng = random.Random(7)
    config = ContextEngineConfig(database_url=database_url("bench_acl_history"), storage={"auto_migrate": True})
    async with ContextEngine(config, embedder=HashEmbedder()) as engine:
        batch = []
        for i in range(docs):
            acl = [] if i % 9 == 0 else [GROUPS[i % len(GROUPS)]]
            text = " ".join(rng.choice(WORDS) for _ in range(30))
            batch.append({"text": text, "name": f"d{i}.md", "acl": acl})
        ids: list[str] = []
        for start in range(0, docs, 500):
            report = await engine.ingest_many(batch[start : start + 500], principals=TRUSTED)
            ids += [item.report.document_id for item in report.items if item.report is not None]  # type: ignore[misc]
        r0 = await engine.revision()
        for doc_id in rng.sample(ids, len(ids) // 4):
            await engine.update_document(doc_id, acl=[rng.choice(GROUPS)], principals=TRUSTED)
        deleted = set(rng.sample(ids, len(ids) // 10))
        for doc_id in deleted:
            try:
                await engine.delete_document(doc_id, principals=TRUSTED)
            except Exception:
                pass
        texts = [" ".join(rng.choice(WORDS) for _ in range(3)) for _ in range(queries)]
        runs: dict[str, list[float]] = {}
        for label, who, as_of in (
            ("caller, current", CALLER, None),
            ("caller, as of r0", CALLER, r0),
            ("trusted, as of r0", TRUSTED, r0),
        ):
            runs[f"search: {label}"] = await timed(
                queries, lambda i, w=who, a=as_of: engine.search(texts[i], principals=w, top_k=10, as_of=a)
            )
            runs[f"list 200: {label}"] = await timed(
                queries // 4 or 1, lambda i, w=who, a=as_of: engine.list_documents(principals=w, limit=200, as_of=a)
            )
            runs[f"stats: {label}"] = await timed(
                queries // 4 or 1, lambda i, w=who, a=as_of: engine.stats(principals=w, as_of=a)
            )
    print(f"{docs} documents, {queries} queries; caller holds {CALLER}")
    print(f"{'read':40} {'p50 ms':>9} {'p95 ms':>9}")
    for label, values in runs.items():
        p50, p95 = summary(values)
        print(f"{label:40} {p50:9.1f} {p95:9.1f}")
    for kind in ("search", "list 200", "stats"):
        past = summary(runs[f"{kind}: caller, as of r0"])[0]
        now = summary(runs[f"{kind}: caller, current"])[0]
        print(f"{kind}: caller's past read / its current read at p50 = {past / now:.2f}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=3000)
    parser.add_argument("--queries", type=int, default=40)
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.docs, args.queries)))

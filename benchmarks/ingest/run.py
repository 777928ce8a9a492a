"""Ingestion benchmark: peak memory, chunks/s, and the provider calls a one-paragraph edit costs.

Generates its inputs at run time in a temporary directory (a ~22 MB CSV with varied columns, a
200-page PDF, a few hundred Markdown notes), starts the embedded PostgreSQL there and runs three
measurements through the real ``ContextEngine``:

1. peak RSS of a fresh child process (this script's ``child`` sub-command) that does only one ingest
   of the CSV or the PDF, with the baseline RSS of the same process before it ingests: after imports
   and engine start, and after warming the embedder. The CSV runs with the local model and with a
   stand-in embedder (hashed vectors, same tokenizer, so the chunks are identical) that shows the
   pipeline's own memory without the model; ``prepare`` alone (extraction + chunking) is measured too;
2. chunks/s of ``prepare`` alone and of ``engine.ingest`` end to end with the local model;
3. HTTP requests and inputs sent to an OpenAI-compatible provider (a fake server on 127.0.0.1 in
   this process) when one paragraph of a 100-chunk document changes and it is ingested again.

    .venv/bin/python benchmarks/ingest/run.py                          # everything (about an hour)
    .venv/bin/python benchmarks/ingest/run.py --csv-embedder stand-in  # no local model on the CSV

Linux only (reads ``/proc/self/status``, resets ``VmHWM`` through ``/proc/self/clear_refs``). Tables go to
stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import datetime as dt
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

from context_engine import TRUSTED, ContextEngine, ContextEngineConfig
from context_engine.embeddings.base import Embedder, InputKind
from context_engine.embeddings.local import LocalEmbedder
from context_engine.ingest.pipeline import chunk_stream, prepare
from context_engine.storage import embedded

# the PDF writer the tests use (one text page per entry), so the benchmark's PDF is one they cover
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.filegen import make_pdf

DIM = 384  # all-MiniLM-L6-v2; the stand-in and the fake provider use the same width, so one database serves all

WORDS = (
    "the a of to and in is for on with as by at from that this be are was it or an which their "
    "report revenue growth quarter costs supplier contract board budget hiring engineer customer renewal "
    "invoice payment overdue refund shipment warehouse inventory forecast audit compliance security access "
    "policy leave holiday travel expense incident runbook restart queue worker deploy release rollback "
    "backup database index search latency throughput region cluster replica migration schema tenant "
    "permission document chunk retrieval ranking meeting agenda decision owner deadline milestone risk "
    "approval vendor pricing discount margin churn pipeline onboarding training review promotion salary"
).split()
CITIES = ["Berlin", "Lyon", "Porto", "Oslo", "Kraków", "Zürich", "Dublin", "Turin", "Ghent", "Malmö"]
FIRST = ["Ana", "Bram", "Chloé", "Dmitri", "Eva", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kira", "Luca"]
LAST = ["Novak", "Silva", "Dubois", "Berg", "Rossi", "Keller", "Murphy", "Jansen", "Kowalski", "Larsen"]
STATUSES = ["paid", "pending", "overdue", "refunded", "cancelled"]
CSV_HEADER = [
    "order_id", "order_date", "customer", "email", "city", "sku", "quantity", "unit_price", "total", "paid",
    "status", "notes",
]  # fmt: skip


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def out(message: str = "") -> None:
    print(message, flush=True)


def status_kb(name: str) -> int:
    """A ``kB`` line of /proc/self/status (``VmRSS`` now, ``VmHWM`` the peak so far)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    raise KeyError(name)


def reset_peak() -> None:
    """Reset VmHWM to the current RSS (Linux >= 4.0), so the next reading is the peak from here on."""
    Path("/proc/self/clear_refs").write_text("5")


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def mb(kb: float) -> str:
    return f"{kb / 1024:.0f}"


# ------------------------------------------------------------------------------------------ inputs


def sentence(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high))).capitalize() + "."


def paragraph(rng: random.Random, sentences: int) -> str:
    return " ".join(sentence(rng, 8, 16) for _ in range(sentences))


def write_csv(path: Path, target_bytes: int, rng: random.Random) -> int:
    """Orders with ids, ISO dates, names, e-mails, decimals, booleans and free text (some quoted)."""
    rows = 0
    start = dt.date(2023, 1, 1)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_HEADER)
        while handle.tell() < target_bytes:
            rows += 1
            first, last = rng.choice(FIRST), rng.choice(LAST)
            quantity = rng.randint(1, 40)
            price = rng.uniform(0.5, 900)
            notes = sentence(rng, 3, 14)
            if rng.random() < 0.1:
                notes = f'{notes} Customer said "call back", urgent'
            writer.writerow(
                [
                    rows,
                    (start + dt.timedelta(days=rng.randint(0, 900))).isoformat(),
                    f"{first} {last}",
                    f"{first.lower()}.{last.lower()}{rng.randint(1, 99)}@example.com",
                    rng.choice(CITIES),
                    f"SKU-{rng.randint(1000, 9999)}-{rng.choice('ABCDEFGH')}",
                    quantity,
                    f"{price:.2f}",
                    f"{price * quantity:.2f}",
                    rng.choice(["true", "false"]),
                    rng.choice(STATUSES),
                    notes,
                ]
            )
    return rows


def write_pdf(path: Path, pages: int, rng: random.Random) -> None:
    """Report-like pages: a heading line and five paragraphs of 4-7 wrapped lines, blank lines between."""
    content: list[list[str]] = []
    for number in range(1, pages + 1):
        lines = [f"{number}. {sentence(rng, 3, 6)[:-1]}", ""]
        for _ in range(5):
            words = paragraph(rng, rng.randint(3, 5)).split()
            lines += [" ".join(words[i : i + 13]) for i in range(0, len(words), 13)]
            lines.append("")
        content.append(lines)
    path.write_bytes(make_pdf(["\n".join(lines) for lines in content]))


def markdown_notes(count: int, rng: random.Random) -> list[str]:
    """Notes with a title, 2-4 sections of 1-3 paragraphs, now and then a list or a table."""
    notes = []
    for i in range(count):
        parts = [f"# {sentence(rng, 3, 6)[:-1]} ({i})"]
        for _ in range(rng.randint(2, 4)):
            parts.append(f"## {sentence(rng, 2, 4)[:-1]}")
            parts += [paragraph(rng, rng.randint(2, 5)) for _ in range(rng.randint(1, 3))]
            if rng.random() < 0.2:
                parts.append("\n".join(f"- {sentence(rng, 4, 9)}" for _ in range(rng.randint(3, 6))))
            if rng.random() < 0.1:
                rows = [f"| {rng.choice(CITIES)} | {rng.randint(1, 999)} | {rng.choice(STATUSES)} |" for _ in range(5)]
                parts.append("\n".join(["| city | count | status |", "|---|---:|---|", *rows]))
        notes.append("\n\n".join(parts) + "\n")
    return notes


# -------------------------------------------------------------------------------------- embedders


class StandInEmbedder(Embedder):
    """Hashed unit vectors, no model: the pipeline's memory and time without the forward pass.

    Counts tokens with the local model's own tokenizer, so the chunks are exactly the local model's,
    and reports provider ``local`` so requests are batched as the local model's are (64 per call).
    """

    provider = "local"
    model = "stand-in-hash"

    def __init__(self, tokenizer: LocalEmbedder):
        self._tokenizer = tokenizer
        self.dim = DIM
        self.max_input_tokens = tokenizer.max_input_tokens

    def count_tokens(self, text: str) -> int:
        return self._tokenizer.count_tokens(text)

    async def embed(self, texts: list[str], *, kind: InputKind = "document") -> list[list[float]]:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
            vector = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            out[i] = vector / np.linalg.norm(vector)
        return out.tolist()  # type: ignore[no-any-return]


class TimedEmbedder(Embedder):
    """Delegates to the real model and adds up the wall-clock seconds while at least one call runs.

    The pipeline runs up to ``embedding.max_concurrency`` calls at once, so summing each call's own
    time would count the overlap several times.
    """

    def __init__(self, inner: Embedder):
        self.inner = inner
        self.provider, self.model, self.dim = inner.provider, inner.model, inner.dim
        self.max_input_tokens = inner.max_input_tokens
        self.seconds = 0.0
        self._running = 0
        self._since = 0.0

    async def embed(self, texts: list[str], *, kind: InputKind = "document") -> list[list[float]]:
        if self._running == 0:
            self._since = time.perf_counter()
        self._running += 1
        try:
            return await self.inner.embed(texts, kind=kind)
        finally:
            self._running -= 1
            if self._running == 0:
                self.seconds += time.perf_counter() - self._since

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    async def aclose(self) -> None:
        await self.inner.aclose()


def engine_config(url: str, **embedding: Any) -> ContextEngineConfig:
    return ContextEngineConfig(database_url=url, storage={"auto_migrate": True}, embedding=embedding or {})


# ---------------------------------------------------------------------------- 1. RSS (child side)


async def child_ingest(path: Path, embedder_name: str, url: str, source_id: str) -> dict[str, Any]:
    local = LocalEmbedder()
    embedder = TimedEmbedder(local if embedder_name == "local" else StandInEmbedder(local))
    async with ContextEngine(engine_config(url), embedder=embedder) as engine:
        await engine.stats(principals=TRUSTED)  # pool open, schema checked
        after_start = status_kb("VmRSS")
        await embedder.embed(["warm up the tokenizer and, for the local model, its weights"])
        after_warm, hwm_before = status_kb("VmRSS"), status_kb("VmHWM")
        reset_peak()
        embedder.seconds = 0.0
        started = time.perf_counter()
        report = await engine.ingest(file=path, name=path.name, source_id=source_id)
        seconds = time.perf_counter() - started
        doc = report.documents[0]
        return {
            "after_start_kb": after_start,
            "after_warm_kb": after_warm,
            "hwm_before_kb": hwm_before,
            "hwm_kb": status_kb("VmHWM"),
            "seconds": seconds,
            "embed_seconds": embedder.seconds,
            "chunks": doc.chunks,
            "status": doc.status,
            "error": doc.error,
        }


def child_prepare(path: Path) -> dict[str, Any]:
    local = LocalEmbedder()
    after_start = status_kb("VmRSS")
    local.count_tokens("warm up the tokenizer")
    after_warm, hwm_before = status_kb("VmRSS"), status_kb("VmHWM")
    reset_peak()
    budget = min(ContextEngineConfig().ingest.chunk_tokens, local.max_input_tokens)
    started = time.perf_counter()
    prepared = prepare(chunk_stream(path, path.name, None, budget, local.count_tokens, None), local.count_tokens)
    return {
        "after_start_kb": after_start,
        "after_warm_kb": after_warm,
        "hwm_before_kb": hwm_before,
        "hwm_kb": status_kb("VmHWM"),
        "seconds": time.perf_counter() - started,
        "chunks": prepared.chunk_count,
        "status": "prepared",
        "error": None,
    }


def child_main(args: argparse.Namespace) -> None:
    path = Path(args.file)
    if args.mode == "prepare":
        result = child_prepare(path)
    else:
        result = asyncio.run(child_ingest(path, args.embedder, os.environ["BENCH_DATABASE_URL"], args.source_id))
    print(json.dumps(result), flush=True)


# --------------------------------------------------------------------------- 1. RSS (parent side)


@dataclass
class RssRun:
    label: str
    result: dict[str, Any]


def run_child(label: str, argv: list[str], url: str) -> RssRun:
    """One fresh interpreter per measurement; it reports its own VmRSS/VmHWM.

    The parent's view (``os.wait4`` or ``RUSAGE_CHILDREN``) is not used: Linux folds the high-water
    mark of the memory the child had before ``exec`` into ``ru_maxrss``, and ``subprocess`` spawns with
    ``vfork``, so that is this parent's own peak: every child would report at least that.
    """
    log(f"  child: {label} ({load()}) ...")
    env = {**os.environ, "BENCH_DATABASE_URL": url}
    done = subprocess.run([sys.executable, __file__, "child", *argv], stdout=subprocess.PIPE, env=env, check=True)
    result = json.loads(done.stdout.decode().strip().splitlines()[-1])
    log(f"  child: {label}: {result['chunks']} chunks in {result['seconds']:.1f} s, peak {mb(result['hwm_kb'])} MB")
    return RssRun(label, result)


def rss_table(runs: list[RssRun]) -> str:
    lines = [
        "| child process | status | chunks | s | RSS after start | after warm-up | peak before ingest "
        "| **peak during ingest** | peak - warm-up |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        r = run.result
        lines.append(
            f"| {run.label} | {r['status']} | {r['chunks']:,} | {r['seconds']:.1f} | {mb(r['after_start_kb'])} "
            f"| {mb(r['after_warm_kb'])} | {mb(r['hwm_before_kb'])} | **{mb(r['hwm_kb'])}** "
            f"| {mb(r['hwm_kb'] - r['after_warm_kb'])} |"
        )
    return "\n".join(lines)


# ----------------------------------------------------------------------------------- 2. throughput


@dataclass
class Rate:
    label: str
    docs: int
    chunks: int
    seconds: float
    embed_seconds: float | None = None

    def line(self) -> str:
        without = ""
        if self.embed_seconds is not None:
            without = f"{self.chunks / (self.seconds - self.embed_seconds):.1f} ({self.embed_seconds:.1f} s embedding)"
        return (
            f"| {self.label} | {self.docs:,} | {self.chunks:,} | {self.seconds:.1f} | "
            f"**{self.chunks / self.seconds:.1f}** | {without} |"
        )


def prepare_rate(label: str, sources: list[tuple[bytes | Path, str, str | None]], local: LocalEmbedder) -> Rate:
    budget = min(ContextEngineConfig().ingest.chunk_tokens, local.max_input_tokens)
    chunks = 0
    started = time.perf_counter()
    for source, name, mime in sources:
        streamed = chunk_stream(source, name, mime, budget, local.count_tokens, None)
        chunks += prepare(streamed, local.count_tokens).chunk_count
    return Rate(label, len(sources), chunks, time.perf_counter() - started)


async def ingest_rates(url: str, notes: list[str], pdf: Path, pdf_label: str) -> list[Rate]:
    embedder = TimedEmbedder(LocalEmbedder())
    rates = []
    async with ContextEngine(engine_config(url), embedder=embedder) as engine:
        await engine.stats(principals=TRUSTED)
        await embedder.embed(["warm up"])
        embedder.seconds = 0.0
        chunks = 0
        started = time.perf_counter()
        for i, note in enumerate(notes):
            report = await engine.ingest(text=note, name=f"note-{i}.md", source_id="throughput")
            assert report.documents[0].status == "completed", report.documents[0]
            chunks += report.documents[0].chunks
        rates.append(Rate("Markdown notes, `engine.ingest`", len(notes), chunks, time.perf_counter() - started))
        rates[-1].embed_seconds, embedder.seconds = embedder.seconds, 0.0
        started = time.perf_counter()
        report = await engine.ingest(file=pdf, name=pdf.name, source_id="throughput")
        assert report.documents[0].status == "completed", report.documents[0]
        rates.append(
            Rate(f"{pdf_label}, `engine.ingest`", 1, report.documents[0].chunks, time.perf_counter() - started)
        )
        rates[-1].embed_seconds = embedder.seconds
    return rates


# ------------------------------------------------------------------------------------ 3. re-ingest


@dataclass
class FakeEmbeddings:
    """OpenAI ``POST /v1/embeddings`` on 127.0.0.1: hashed vectors, and the size of every request."""

    inputs_per_request: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> tuple[ThreadingHTTPServer, str]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            wbufsize = -1  # one write per reply, no Nagle: otherwise each keep-alive request waits ~40 ms
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                with fake.lock:
                    fake.inputs_per_request.append(len(texts))
                data = [{"object": "embedding", "index": i, "embedding": hashed(t)} for i, t in enumerate(texts)]
                tokens = sum(len(t.split()) for t in texts)
                payload = json.dumps(
                    {"object": "list", "data": data, "model": body.get("model"),
                     "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
                ).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        host, port = server.server_address[:2]
        return server, f"http://{host!s}:{port}/v1"

    def take(self) -> tuple[int, int]:
        """(requests, inputs) since the last call."""
        with self.lock:
            counts, self.inputs_per_request = self.inputs_per_request, []
        return len(counts), sum(counts)


def hashed(text: str) -> list[float]:
    seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
    vector = np.random.default_rng(seed).standard_normal(DIM)
    return (vector / np.linalg.norm(vector)).tolist()  # type: ignore[no-any-return]


def sized_paragraph(rng: random.Random, low: int, high: int) -> str:
    """A paragraph of ``low``..``high`` UTF-8 bytes (the words are ASCII)."""
    while True:
        words: list[str] = []
        while len(" ".join(words)) + 1 < low:
            words.append(rng.choice(WORDS))
        text = " ".join(words).capitalize() + "."
        if len(text) <= high:
            return text


def sectioned_doc(paragraphs: list[str]) -> str:
    """One heading per paragraph: each paragraph is its own chunk."""
    return "# Handbook\n\n" + "\n\n".join(f"## Topic {i}\n\n{p}" for i, p in enumerate(paragraphs)) + "\n"


def packed_doc(paragraphs: list[str]) -> str:
    """No headings: the chunker packs neighbouring paragraphs up to its token budget."""
    return "\n\n".join(paragraphs) + "\n"


async def reingest_rows(url: str, rng: random.Random) -> list[tuple[str, str, str, int, int]]:
    """(document, step, chunks, requests, inputs) per ingest of the two 100-chunk documents."""
    fake = FakeEmbeddings()
    server, base_url = fake.start()
    rows = []
    try:
        config = engine_config(url, provider="custom", base_url=base_url, model="fake-embedding", dim=DIM)
        async with ContextEngine(config) as engine:
            await engine.stats(principals=TRUSTED)

            async def step(doc: str, label: str, text: str, name: str) -> None:
                report = (await engine.ingest(text=text, name=name, source_id="reingest")).documents[0]
                requests, inputs = fake.take()
                chunks = str(report.chunks) if report.status != "skipped" else "—"
                rows.append((doc, f"{label} ({report.status})", chunks, requests, inputs))

            one = [paragraph(rng, 4) for _ in range(100)]
            edited = list(one)
            edited[50] = paragraph(rng, 4)
            doc = "100 sections, one paragraph each"
            await step(doc, "first ingest", sectioned_doc(one), "sectioned.md")
            await step(doc, "same text again", sectioned_doc(one), "sectioned.md")
            await step(doc, "paragraph 51 rewritten", sectioned_doc(edited), "sectioned.md")
            added = [*edited[:10], paragraph(rng, 4), *edited[10:]]
            await step(doc, "a new paragraph inserted after the 10th", sectioned_doc(added), "sectioned.md")

            # paragraphs of 230-245 bytes (78-83 estimated tokens): exactly three fill a 256-token chunk
            short = [sized_paragraph(rng, 230, 245) for _ in range(300)]
            grown = list(short)
            grown[150] = short[150] + " " + sentence(rng, 10, 14)
            doc = "300 paragraphs, no headings (three per chunk)"
            await step(doc, "first ingest", packed_doc(short), "packed.md")
            await step(doc, "paragraph 151 rewritten, same length", packed_doc(_same_length(short, 150)), "packed.md")
            await step(doc, "paragraph 151 grown by one sentence", packed_doc(grown), "packed.md")
    finally:
        server.shutdown()
        server.server_close()
    return rows


def _same_length(paragraphs: list[str], index: int) -> list[str]:
    """The paragraph with its words reversed: new text, same words, same length."""
    changed = list(paragraphs)
    changed[index] = " ".join(reversed(paragraphs[index].split()))
    return changed


# ------------------------------------------------------------------------------------------- main


def main(args: argparse.Namespace) -> None:
    wall = time.perf_counter()
    out(f"machine: {os.cpu_count()} cores; at start {load()}")
    out(f"python {sys.version.split()[0]}; run started {dt.datetime.now().isoformat(timespec='seconds')}\n")
    rng = random.Random(11)
    work = Path(tempfile.mkdtemp(prefix="ce-bench-ingest-"))
    pgdata: Path | None = None
    try:
        log("generating inputs ...")
        csv_path, pdf_path = work / "orders.csv", work / "report.pdf"
        rows = write_csv(csv_path, int(args.csv_mb * 1_000_000), rng)
        write_pdf(pdf_path, args.pdf_pages, rng)
        notes = markdown_notes(args.md_docs, rng)
        note_bytes = sum(len(n.encode()) for n in notes)
        out(
            f"inputs: CSV {csv_path.stat().st_size / 1e6:.1f} MB ({rows:,} rows x {len(CSV_HEADER)} columns); "
            f"PDF {args.pdf_pages} pages, {pdf_path.stat().st_size / 1e6:.2f} MB; "
            f"{len(notes)} Markdown notes, {note_bytes / 1e6:.2f} MB\n"
        )
        pgdata, url = embedded.acquire(work / "pg")
        asyncio.run(_migrate(url))

        log(f"3. re-ingest through the fake OpenAI-compatible provider ({load()}) ...")
        changes = asyncio.run(reingest_rows(url, rng))
        out("Re-ingest through an OpenAI-compatible provider (fake server on 127.0.0.1), per ingest call:\n")
        out("| document | step | chunks | HTTP requests | inputs embedded |\n|---|---|---:|---:|---:|")
        for doc, step, chunks, requests, inputs in changes:
            out(f"| {doc} | {step} | {chunks} | {requests} | {inputs} |")
        out()

        log(f"2. throughput ({load()}) ...")
        pdf_label = f"{args.pdf_pages}-page PDF"
        local = LocalEmbedder()
        local.count_tokens("warm up")
        md_sources: list[tuple[bytes | Path, str, str | None]] = [
            (n.encode(), f"note-{i}.md", "text/markdown") for i, n in enumerate(notes)
        ]
        rates = [
            prepare_rate("Markdown notes, `prepare`", md_sources, local),
            prepare_rate(f"{pdf_label}, `prepare`", [(pdf_path, pdf_path.name, None)], local),
        ]
        rates += asyncio.run(ingest_rates(url, notes, pdf_path, pdf_label))

        log(f"1. peak RSS of one ingest per child process ({load()}) ...")
        csv_label = f"{csv_path.stat().st_size / 1e6:.1f} MB CSV"
        csv_embedders = ["stand-in", "local"] if args.csv_embedder == "both" else [args.csv_embedder]
        runs = [
            run_child(f"{pdf_label}, `prepare` only", ["--file", str(pdf_path), "--mode", "prepare"], url),
            run_child(
                f"{pdf_label}, `engine.ingest`, local model", ["--file", str(pdf_path), "--embedder", "local"], url
            ),
            run_child(f"{csv_label}, `prepare` only", ["--file", str(csv_path), "--mode", "prepare"], url),
        ]
        for name in csv_embedders:
            argv = ["--file", str(csv_path), "--embedder", name, "--source-id", f"rss-{name}"]
            label = "local model" if name == "local" else "stand-in embedder"
            runs.append(run_child(f"{csv_label}, `engine.ingest`, {label}", argv, url))
        for run in runs:  # the CSV's rates come from its RSS runs
            if run.label.startswith(csv_label):
                r = run.result
                rates.append(Rate(run.label, 1, r["chunks"], r["seconds"], r.get("embed_seconds")))
        out("Throughput (one document at a time; local all-MiniLM-L6-v2 where a model embeds):\n")
        out("| input | documents | chunks | s | chunks/s | chunks/s without the embedding time |")
        out("|---|---:|---:|---:|---:|---:|")
        out("\n".join(rate.line() for rate in rates))
        out("\nRSS of a fresh child process doing one ingest, MiB (PostgreSQL's own processes not counted):\n")
        out(rss_table(runs))
    finally:
        if pgdata is not None:
            embedded.release(pgdata)
        embedded.remove(work)  # stops the server if the release left it running, then deletes
    out(f"at end {load()}; wall time {time.perf_counter() - wall:.0f} s")


async def _migrate(url: str) -> None:
    async with ContextEngine(engine_config(url), embedder=StandInEmbedder(LocalEmbedder())) as engine:
        await engine.stats(principals=TRUSTED)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    child = sub.add_parser("child", help="internal: one measured ingest, prints a JSON line")
    child.add_argument("--file", required=True)
    child.add_argument("--mode", choices=["prepare", "ingest"], default="ingest")
    child.add_argument("--embedder", choices=["local", "stand-in"], default="local")
    child.add_argument("--source-id", default="rss")
    parser.add_argument("--csv-mb", type=float, default=22.0, help="size of the generated CSV in MB (10^6 bytes)")
    parser.add_argument("--pdf-pages", type=int, default=200)
    parser.add_argument("--md-docs", type=int, default=300, help="Markdown notes for the throughput table")
    parser.add_argument(
        "--csv-embedder",
        choices=["both", "stand-in", "local"],
        default="both",
        help="embedder of the CSV's RSS run; 'local' embeds ~44,000 chunks (about 55 minutes on 2 cores)",
    )
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse()
    if arguments.command == "child":
        child_main(arguments)
    else:
        main(arguments)

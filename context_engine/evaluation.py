"""Retrieval-quality evaluation on BEIR-format data: metrics, baselines and the harness core.

One harness serves two callers: ``benchmarks/beir`` (SciFact, the figures in benchmarks/README.md)
and ``context-engine eval --data DIR`` (a user's own data). Both ingest the corpus through the real
engine, send every test query through ``ContextEngine.search`` and score the ranked documents, so a
setting is judged by exactly the code path that will serve it.

Why each leg is also run alone, and why two baselines run in the same process: hybrid search is only
worth its cost when the fused ranking beats each of its legs *and* a well-kept lexical library
(BM25) and exact dense search over the same vectors. Figures from another run, another machine or
another paper are not comparable, so the baselines are recomputed here, on the same corpus and
queries, every time.

BEIR format: ``corpus.jsonl[.gz]`` (``_id``, ``title``, ``text``), ``queries.jsonl[.gz]`` (``_id``,
``text``) and ``qrels/<split>.tsv`` (``query-id``, ``corpus-id``, ``score``, one header line).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import json
import math
import os
import re
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from context_engine.embeddings.base import Embedder, InputKind
from context_engine.embeddings.tokens import head_tokens as head_tokens  # the benchmark scripts import it here

Progress = Callable[[str, int, int], None]

# ---------------------------------------------------------------------------------------------- data


@dataclass
class BeirDataset:
    """A BEIR dataset restricted to the queries that have judgements in the chosen split."""

    name: str
    #: corpus id -> (title, text), in file order
    corpus: dict[str, tuple[str, str]]
    #: query id -> text, only queries judged in ``qrels``
    queries: dict[str, str]
    #: query id -> {corpus id: graded relevance}
    qrels: dict[str, dict[str, int]]
    #: SHA-256 of the corpus file's uncompressed bytes (names caches, so a changed corpus misses)
    corpus_sha256: str


def _open_jsonl(folder: Path, stem: str) -> tuple[Path, Iterator[str]]:
    for candidate in (folder / f"{stem}.jsonl", folder / f"{stem}.jsonl.gz"):
        if candidate.is_file():
            if candidate.suffix == ".gz":
                return candidate, iter(gzip.open(candidate, "rt", encoding="utf-8"))
            return candidate, iter(candidate.open("r", encoding="utf-8"))
    raise FileNotFoundError(f"{folder} has no {stem}.jsonl or {stem}.jsonl.gz (is it a BEIR-format folder?)")


def load_beir(data_dir: str | os.PathLike[str], *, split: str = "test") -> BeirDataset:
    """Read a BEIR-format folder; ids stay strings even when they look like numbers."""
    folder = Path(data_dir)
    qrels_path = folder / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        raise FileNotFoundError(f"{qrels_path} not found: a BEIR folder needs qrels/{split}.tsv")
    qrels: dict[str, dict[str, int]] = {}
    with qrels_path.open("r", encoding="utf-8") as handle:
        for number, line in enumerate(handle):
            parts = line.rstrip("\r\n").split("\t")
            if number == 0 and parts[0].lower().startswith("query"):
                continue  # the header line
            if len(parts) < 3 or not parts[0]:
                continue
            qrels.setdefault(parts[0], {})[parts[1]] = int(float(parts[2]))

    digest = hashlib.sha256()
    corpus: dict[str, tuple[str, str]] = {}
    _, lines = _open_jsonl(folder, "corpus")
    for line in lines:
        digest.update(line.encode("utf-8"))
        if not line.strip():
            continue
        row = json.loads(line)
        corpus[str(row["_id"])] = (str(row.get("title") or ""), str(row.get("text") or ""))

    queries: dict[str, str] = {}
    _, lines = _open_jsonl(folder, "queries")
    for line in lines:
        if line.strip():
            row = json.loads(line)
            if str(row["_id"]) in qrels:
                queries[str(row["_id"])] = str(row["text"])
    missing = sorted(set(qrels) - set(queries))
    if missing:
        raise ValueError(f"{len(missing)} judged queries are missing from queries.jsonl (first: {missing[0]})")
    qrels = {q: rels for q, rels in qrels.items() if q in queries}
    return BeirDataset(folder.name, corpus, queries, qrels, digest.hexdigest())


def document_markdown(title: str, text: str) -> str:
    """The ingested form of one corpus document: the title as a Markdown heading over the text.

    As a heading the title becomes each chunk's ``section`` and stays out of the chunk text, so a
    long abstract is not split into a title-only chunk and a title-less rest (a plain first line
    would be). Whether the section is embedded and indexed is the engine's setting, not ours.
    """
    title = " ".join(title.split())
    return f"# {title}\n\n{text}" if title else text


# ------------------------------------------------------------------------------------------- metrics


def ndcg_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int = 10) -> float:
    """nDCG@k with linear gains, as BEIR (pytrec_eval) computes it."""
    dcg = sum(relevant.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranked[:k]))
    ideal = sorted((g for g in relevant.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int = 100) -> float:
    wanted = {doc for doc, g in relevant.items() if g > 0}
    if not wanted:
        return 0.0
    return len(wanted.intersection(ranked[:k])) / len(wanted)


def mrr_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int = 10) -> float:
    for i, doc in enumerate(ranked[:k]):
        if relevant.get(doc, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (no interpolation), so p95 is a latency some query really had."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def dedupe_documents(pairs: Iterable[tuple[str, float]]) -> list[str]:
    """Document ids by their best-scoring passage: max score per document, ties in given order."""
    best: dict[str, float] = {}
    order: dict[str, int] = {}
    for i, (doc, score) in enumerate(pairs):
        if doc not in best or score > best[doc]:
            best[doc] = score
        order.setdefault(doc, i)
    return sorted(best, key=lambda d: (-best[d], order[d]))


@dataclass
class RunResult:
    """One configuration's scores over all queries."""

    name: str
    ndcg10: float
    recall100: float
    mrr10: float
    p50_ms: float | None = None
    p95_ms: float | None = None
    #: "engine" (through ContextEngine.search) or "baseline" (computed beside it)
    kind: str = "engine"
    note: str = ""
    #: query id -> ranked corpus ids (kept for fusion experiments and per-query inspection)
    rankings: dict[str, list[str]] = field(default_factory=dict, repr=False)


def score_run(
    name: str,
    rankings: Mapping[str, Sequence[str]],
    qrels: Mapping[str, Mapping[str, int]],
    latencies_ms: Sequence[float] | None = None,
    *,
    kind: str = "engine",
    note: str = "",
    recall_rankings: Mapping[str, Sequence[str]] | None = None,
) -> RunResult:
    """Mean metrics over every judged query (a query with no result scores 0, it is not skipped).

    ``recall_rankings`` (default: ``rankings``) is the deeper list Recall@100 is computed on.
    """
    ids = list(qrels)
    deep = rankings if recall_rankings is None else recall_rankings
    ndcg = statistics.fmean(ndcg_at_k(rankings.get(q, []), qrels[q], 10) for q in ids)
    recall = statistics.fmean(recall_at_k(deep.get(q, []), qrels[q], 100) for q in ids)
    mrr = statistics.fmean(mrr_at_k(rankings.get(q, []), qrels[q], 10) for q in ids)
    return RunResult(
        name=name,
        ndcg10=ndcg,
        recall100=recall,
        mrr10=mrr,
        p50_ms=percentile(latencies_ms, 50) if latencies_ms else None,
        p95_ms=percentile(latencies_ms, 95) if latencies_ms else None,
        kind=kind,
        note=note,
        rankings={q: list(r) for q, r in deep.items()},
    )


def rrf_documents(rankings: Sequence[Sequence[str]], k: int, weights: Sequence[float] | None = None) -> list[str]:
    """Weighted reciprocal rank fusion of document rankings (the plain BM25 + dense baseline)."""
    weights = weights or [1.0] * len(rankings)
    scores: dict[str, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        for rank, doc in enumerate(ranking, start=1):
            scores[doc] = scores.get(doc, 0.0) + weight / (k + rank)
    return sorted(scores, key=lambda d: (-scores[d], d))


# -------------------------------------------------------------------------------- embedding cache


class CachingEmbedder(Embedder):
    """The real embedder, with document vectors remembered on disk by the SHA-256 of their text.

    Why: the local model embeds a few dozen chunks a second on a small machine, so re-embedding a
    5,000-document corpus for every lexical or fusion experiment would cost minutes each time. A
    hit returns the vector this same model computed earlier for this exact text; a miss calls the
    model. Query vectors are never cached, so measured search latency includes the query embedding.
    The provider, model, width and key are the wrapped model's, so the engine stores the same
    embedding key it would without the cache.
    """

    def __init__(self, inner: Embedder, path: Path | None):
        self.inner = inner
        self.provider = inner.provider
        self.model = inner.model
        self.dim = inner.dim
        self.max_input_tokens = inner.max_input_tokens
        self.path = path
        self._index: dict[bytes, int] = {}
        self._vectors: list[np.ndarray] = []
        self._unsaved = 0
        self.hits = 0
        self.misses = 0
        if path is not None and path.is_file():
            with np.load(path) as data:
                if int(data["dim"]) == self.dim and str(data["key"]) == inner.key:
                    matrix = data["vectors"].astype(np.float32)
                    self._vectors = list(matrix)
                    hashes = data["hashes"]
                    if hashes.dtype.kind == "S":  # written by an earlier version: numpy strips trailing NULs
                        self._index = {bytes(h).ljust(32, b"\0"): i for i, h in enumerate(hashes)}
                    else:
                        self._index = {row.tobytes(): i for i, row in enumerate(hashes)}

    @property
    def key(self) -> str:
        return self.inner.key

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def __len__(self) -> int:
        return len(self._vectors)

    @staticmethod
    def _digest(text: str) -> bytes:
        return hashlib.sha256(text.encode("utf-8")).digest()

    async def embed(self, texts: list[str], *, kind: InputKind = "document") -> list[list[float]]:
        if kind != "document":
            return await self.inner.embed(texts, kind=kind)
        digests = [self._digest(t) for t in texts]
        todo: dict[bytes, int] = {}  # each missing text once, however often it repeats
        for i, d in enumerate(digests):
            if d not in self._index:
                todo.setdefault(d, i)
        self.hits += len(texts) - len(todo)
        if todo:
            self.misses += len(todo)
            fresh = await self.inner.embed([texts[i] for i in todo.values()], kind=kind)
            for digest, vector in zip(todo, fresh, strict=True):
                if digest not in self._index:
                    self._index[digest] = len(self._vectors)
                    self._vectors.append(np.asarray(vector, dtype=np.float32))
                    self._unsaved += 1
        return [self._vectors[self._index[d]].tolist() for d in digests]

    async def warm(self, texts: Sequence[str], *, batch: int = 64, progress: Progress | None = None) -> int:
        """Embed every uncached text in large length-sorted batches (much faster than per document).

        Returns how many texts were embedded. Saves every few batches so an interrupted run keeps
        what it computed.
        """
        missing = sorted({t for t in texts if self._digest(t) not in self._index}, key=len)
        for start in range(0, len(missing), batch):
            await self.embed(missing[start : start + batch])
            if progress is not None:
                progress("embed", min(start + batch, len(missing)), len(missing))
            if self._unsaved >= 1024:
                self.save()
        self.save()
        return len(missing)

    def vectors_for(self, texts: Sequence[str]) -> np.ndarray:
        """Cached vectors of ``texts`` as a matrix (every text must have been embedded)."""
        return np.stack([self._vectors[self._index[self._digest(t)]] for t in texts]) if texts else np.empty((0, 0))

    def save(self) -> None:
        """Write the cache atomically (a crash mid-write leaves the previous file intact)."""
        if self.path is None or self._unsaved == 0:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp.npz")
        # raw bytes, not an "S32" string array: numpy would drop a digest's trailing NUL bytes
        hashes = np.zeros((len(self._index), 32), dtype=np.uint8)
        for digest, i in self._index.items():
            hashes[i] = np.frombuffer(digest, dtype=np.uint8)
        np.savez(
            tmp,
            hashes=hashes,
            vectors=np.stack(self._vectors).astype(np.float32),
            dim=np.int64(self.dim),
            key=np.str_(self.inner.key),
        )
        os.replace(tmp, self.path)
        self._unsaved = 0

    async def aclose(self) -> None:
        self.save()
        await self.inner.aclose()


def cache_file(cache_dir: Path, embedder: Embedder, corpus_sha256: str, layout: str) -> Path:
    """Cache path keyed by model, corpus hash and chunking layout (vectors are looked up by text hash)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", embedder.key).strip("-")
    return cache_dir / slug / f"{corpus_sha256[:16]}-{layout}.npz"


# ----------------------------------------------------------------------------------------- baselines


def bm25_baseline(
    dataset: BeirDataset, *, stem: bool = True, k1: float = 1.5, b: float = 0.75, depth: int = 100
) -> RunResult:
    """BM25 from the ``bm25s`` library over title + text, English stop words, Snowball stemming.

    Needs the ``bench`` extra (``pip install "pg-context-engine[bench]"``).
    """
    import bm25s

    stemmer = None
    if stem:
        import Stemmer

        stemmer = Stemmer.Stemmer("english")
    ids = list(dataset.corpus)
    texts = [f"{t} {x}".strip() for t, x in dataset.corpus.values()]
    retriever = bm25s.BM25(k1=k1, b=b)
    retriever.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    rankings: dict[str, list[str]] = {}
    latencies: list[float] = []
    depth = min(depth, len(ids))
    for qid, query in dataset.queries.items():
        started = time.perf_counter()
        tokens = bm25s.tokenize([query], stopwords="en", stemmer=stemmer, show_progress=False)
        if not tokens.vocab:  # every query word was a stop word
            docs, scores = np.empty((1, 0), dtype=int), np.empty((1, 0))
        else:
            docs, scores = retriever.retrieve(tokens, k=depth, show_progress=False, n_threads=1)
        rankings[qid] = [ids[int(d)] for d, s in zip(docs[0], scores[0], strict=True) if s > 0]
        latencies.append((time.perf_counter() - started) * 1000)
    name = "BM25 (bm25s, stemmed)" if stem else "BM25 (bm25s, no stemming)"
    return score_run(
        name, rankings, dataset.qrels, latencies, kind="baseline", note=f"k1={k1} b={b}, title + text, stop words"
    )


async def dense_baseline(
    dataset: BeirDataset, embedder: Embedder, *, depth: int = 100, progress: Progress | None = None
) -> RunResult:
    """Exact (brute-force) cosine search with the engine's own model over whole documents.

    Each document is title + text cut to the model's input window, one vector per document, as
    sentence-transformers evaluates BEIR; latency is the query embedding plus one matrix product.
    """
    ids = list(dataset.corpus)
    limit = embedder.max_input_tokens
    # the dense baseline embeds each document cut to the model's window, as sentence-transformers does;
    # our embedders refuse over-long documents rather than truncate, so the cut is made here
    texts = [head_tokens(f"{t} {x}".strip(), limit, embedder.count_tokens) for t, x in dataset.corpus.values()]
    if isinstance(embedder, CachingEmbedder):
        await embedder.warm(texts, progress=progress)
        matrix = embedder.vectors_for(texts)
    else:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), 64):
            vectors.extend(await embedder.embed(texts[start : start + 64]))
            if progress is not None:
                progress("embed documents", min(start + 64, len(texts)), len(texts))
        matrix = np.asarray(vectors, dtype=np.float32)
    matrix = matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    rankings: dict[str, list[str]] = {}
    latencies: list[float] = []
    depth = min(depth, len(ids))
    for qid, query in dataset.queries.items():
        started = time.perf_counter()
        q = np.asarray((await embedder.embed([query], kind="query"))[0], dtype=np.float32)
        sims = matrix @ (q / max(float(np.linalg.norm(q)), 1e-12))
        top = np.argpartition(-sims, depth - 1)[:depth]
        top = top[np.lexsort((top, -sims[top]))]
        rankings[qid] = [ids[int(i)] for i in top]
        latencies.append((time.perf_counter() - started) * 1000)
    return score_run(
        "dense exact (numpy, whole document)",
        rankings,
        dataset.qrels,
        latencies,
        kind="baseline",
        note=f"{embedder.model}, title + text cut to {limit} tokens",
    )


def rrf_baseline(name: str, runs: Sequence[RunResult], qrels: Mapping[str, Mapping[str, int]], k: int) -> RunResult:
    """Plain RRF of baseline rankings: what fusing the two libraries would give without our engine."""
    rankings = {q: rrf_documents([r.rankings.get(q, []) for r in runs], k)[:100] for q in qrels}
    return score_run(name, rankings, qrels, None, kind="baseline", note=f"k={k}, equal weights")


# ------------------------------------------------------------------------------------------ harness

#: how the table names a built-in leg measured alone; a registered leg is named after itself
_LEG_LABELS = {"fts": "full-text leg alone", "trigram": "trigram leg alone", "vector": "vector leg alone"}


#: a leg's ``usage`` reason that says it returns nothing on this store for any query (graph mode off)
_IDLE_REASONS = frozenset({"graph_disabled", "no_graph_documents"})


def leg_label(leg: str) -> str:
    """The row name of a leg measured alone."""
    return _LEG_LABELS.get(leg, f"{leg} leg alone")


def idle_legs(usage: dict[str, Any]) -> dict[str, str]:
    """Legs whose report in a search's ``usage`` says they can return nothing here, with the reason."""
    return {
        leg: str(report["reason"])
        for leg, report in usage.items()
        if isinstance(report, dict) and report.get("reason") in _IDLE_REASONS
    }


def leg_configurations(config: Any) -> dict[str, dict[str, Any]]:
    """Each registered leg the configuration uses, alone, then the configured fusion.

    A leg runs alone by weighting the others 0 (a leg weighted 0 does not run); a leg the
    configuration switches off is not measured, since it would not serve a single search.
    """
    from context_engine.retrieval import registry

    weights = registry.weights(config.fusion.weights)
    legs = list(weights)
    out: dict[str, dict[str, Any]] = {}
    for leg in legs:
        if weights.get(leg, 0) > 0:
            alone = {other: 0.0 for other in legs} | {leg: 1.0}
            out[leg_label(leg)] = {"fusion": {"weights": alone}}
    out["fused (configured)"] = {}
    return out


@dataclass
class EvalReport:
    """Everything ``format_table`` prints, plus per-query rankings for further analysis."""

    dataset: str
    documents: int
    chunks: int
    queries: int
    ingest_seconds: float
    text_search_config: str
    settings: dict[str, Any]
    rows: list[RunResult]
    notes: list[str] = field(default_factory=list)
    #: configuration name -> query id -> the raw hits ``(chunk_id, document corpus id, score, similarity)``
    hits: dict[str, dict[str, list[tuple[int, str, float, float | None]]]] = field(default_factory=dict, repr=False)

    def row(self, name: str) -> RunResult:
        return next(r for r in self.rows if r.name == name)


@contextlib.contextmanager
def overridden(engine: Any, overrides: Mapping[str, Any]) -> Iterator[None]:
    """Run with some search/fusion settings changed, on the same engine, pool and data.

    The engine reads ``engine.config`` on every search, so swapping in a modified copy changes
    the next search only; the original object is put back afterwards.
    """
    original = engine.config
    data = original.model_dump()
    for section, values in overrides.items():
        merged = dict(data.get(section) or {})
        merged.update(values)
        data[section] = merged
    engine.config = type(original).model_validate(data)
    try:
        yield
    finally:
        engine.config = original


async def ingest_dataset(
    engine: Any,
    dataset: BeirDataset,
    *,
    source_id: str,
    concurrency: int = 4,
    progress: Progress | None = None,
) -> tuple[int, float]:
    """Ingest each corpus document as its own document (name = corpus id); returns (failed, seconds).

    Unchanged documents are skipped by the engine, so re-running on the same database is quick.
    """
    from context_engine.principals import TRUSTED

    started = time.perf_counter()
    gate = asyncio.Semaphore(concurrency)
    done = failed = 0
    total = len(dataset.corpus)

    async def one(doc_id: str, title: str, body: str) -> None:
        nonlocal done, failed
        async with gate:
            report = await engine.ingest(
                text=document_markdown(title, body),
                name=doc_id,
                source_id=source_id,
                mime="text/markdown",
                principals=TRUSTED,
            )
        failed += int(report.documents[0].status == "failed")
        done += 1
        if progress is not None and (done % 100 == 0 or done == total):
            progress("ingest", done, total)

    await asyncio.gather(*(one(i, t, x) for i, (t, x) in dataset.corpus.items()))
    return failed, time.perf_counter() - started


async def run_queries(
    engine: Any,
    dataset: BeirDataset,
    name: str,
    *,
    source_id: str | None,
    top_k: int = 100,
    progress: Progress | None = None,
) -> tuple[RunResult, dict[str, list[tuple[int, str, float, float | None]]]]:
    """Every judged query through ``engine.search``, one at a time so latency is per query.

    The engine ranks chunks; BEIR judges documents. Each document is ranked by its best chunk among
    the ``top_k`` returned (max score per document), and nDCG@10 and MRR@10 are computed on the
    first ten documents of that list, Recall@100 on all of it. Asking for only 10 chunks would
    often return fewer than 10 documents, since both halves of a split abstract can rank.
    """
    from context_engine.principals import TRUSTED

    scope = [source_id] if source_id is not None else None
    rankings: dict[str, list[str]] = {}
    raw: dict[str, list[tuple[int, str, float, float | None]]] = {}
    latencies: list[float] = []
    for n, (qid, query) in enumerate(dataset.queries.items(), start=1):
        started = time.perf_counter()
        result = await engine.search(query, source_ids=scope, principals=TRUSTED, top_k=top_k)
        latencies.append((time.perf_counter() - started) * 1000)
        raw[qid] = [(h.chunk_id, h.document_name, h.score, h.similarity) for h in result.hits]
        rankings[qid] = dedupe_documents((h.document_name, h.score) for h in result.hits)
        if progress is not None and (n % 50 == 0 or n == len(dataset.queries)):
            progress(name, n, len(dataset.queries))
    return score_run(name, rankings, dataset.qrels, latencies), raw


def describe_settings(config: Any) -> dict[str, Any]:
    """The settings that decide ranking, for the report header."""
    from context_engine.retrieval import registry

    search, fusion = config.search, config.fusion
    return {
        "lexical_match": search.lexical_match,
        "lexical_rank": search.lexical_rank,
        "bm25": f"k1={search.bm25.k1} b={search.bm25.b}" if search.lexical_rank == "bm25" else None,
        "lexical_normalization": search.lexical_normalization if search.lexical_rank != "bm25" else None,
        "candidates": search.candidates,
        "trgm_max_query_words": search.trgm_max_query_words,
        "vector_floor": search.vector_floor,
        "fusion_k": fusion.k,
        "weights": registry.weights(fusion.weights),
    }


async def run_eval(
    data_dir: str | os.PathLike[str],
    database_url: str | None = None,
    *,
    config: Any = None,
    embedder: Embedder | None = None,
    split: str = "test",
    top_k: int = 100,
    configurations: Mapping[str, Mapping[str, Any]] | None = None,
    baselines: Sequence[str] = ("bm25",),
    baseline_embedder: Embedder | None = None,
    source_id: str | None = None,
    scope_searches: bool | None = None,
    keep: bool = False,
    ingest: bool = True,
    progress: Progress | None = None,
) -> EvalReport:
    """Ingest a BEIR-format folder through the engine and score search leg by leg, fused, and baselines.

    ``database_url=None`` uses ``config.storage.data_dir``'s embedded server when set, else a
    throwaway embedded server in a temporary folder, so a trial never writes into your store.
    In a database that outlives the run the corpus goes into its own source (``eval-<folder>``),
    every search is scoped to it, and it is deleted afterwards unless ``keep`` (a rerun then
    skips the unchanged documents).
    ``scope_searches=False`` searches the whole database (for a database holding nothing else, so
    the vector leg takes the same plan an unscoped application call takes).
    ``baselines`` picks from ``bm25``, ``bm25-nostem``, ``dense`` and ``bm25+dense`` (plain RRF of
    the two library rankings; implies both); ``baseline_embedder`` (default: the engine's) embeds
    the dense baseline's documents and must be the same model. ``ingest=False`` trusts that the
    source already holds this corpus (a benchmark that has just checked).
    """
    import tempfile

    from context_engine.config import ContextEngineConfig
    from context_engine.engine import ContextEngine
    from context_engine.storage import embedded

    dataset = load_beir(data_dir, split=split)
    if config is None:
        config = ContextEngineConfig()
    else:
        config = config.model_copy(deep=True)
    if database_url is not None:
        config.database_url = database_url
    config.search.max_top_k = max(config.search.max_top_k, top_k)
    source_id = source_id or f"eval-{dataset.name}"
    throwaway: Path | None = None
    if config.database_url is None and config.storage.data_dir is None:
        throwaway = Path(tempfile.mkdtemp(prefix="ce-eval-"))
        config.storage.data_dir = throwaway
    if scope_searches is None:
        scope_searches = throwaway is None
    configurations = dict(configurations if configurations is not None else leg_configurations(config))
    rows: list[RunResult] = []
    hits: dict[str, dict[str, list[tuple[int, str, float, float | None]]]] = {}
    notes: list[str] = []
    try:
        async with ContextEngine(config, embedder=embedder) as engine:
            failed, seconds = 0, 0.0
            if ingest:
                failed, seconds = await ingest_dataset(engine, dataset, source_id=source_id, progress=progress)
            if failed:
                notes.append(f"{failed} documents failed to ingest and count as never retrieved")
            stats = await engine.stats(source_ids=[source_id], principals=_trusted())
            settings = describe_settings(engine.config)
            first = await engine.search(
                next(iter(dataset.queries.values())),
                source_ids=[source_id] if scope_searches else None,
                principals=_trusted(),
                top_k=top_k,
            )
            for leg, reason in idle_legs(first.usage).items():  # a row of zeros would read as a measurement
                if configurations.pop(leg_label(leg), None) is not None:
                    notes.append(f"{leg_label(leg)} not measured: it returns nothing here ({reason})")
            for name, overrides in configurations.items():
                with overridden(engine, overrides):
                    result, raw = await run_queries(
                        engine,
                        dataset,
                        name,
                        source_id=source_id if scope_searches else None,
                        top_k=top_k,
                        progress=progress,
                    )
                rows.append(result)
                hits[name] = raw
            probe = await engine.search(
                next(iter(dataset.queries.values())),
                source_ids=[source_id] if scope_searches else None,
                principals=_trusted(),
                top_k=top_k,
            )
            plan = probe.usage.get("vector_plan", {}).get("plan")
            text_config = engine.text_search_config
            rows.extend(await _baselines(dataset, baseline_embedder or engine.embedder, baselines, progress))
            if throwaway is None and not keep:
                await _remove_source(engine, source_id)
    finally:
        if throwaway is not None:
            # stops the server even when closing the engine did not (a cancel while it was starting)
            embedded.remove(throwaway)
    notes.append(
        f"engine rows: one search(top_k={top_k}) per query, documents ranked by their best chunk; latency is "
        "the wall time of that call, query embedding included, one query at a time"
        + (f"; vector plan {plan}" if plan else "")
    )
    return EvalReport(
        dataset=dataset.name,
        documents=len(dataset.corpus),
        chunks=stats.chunks,
        queries=len(dataset.queries),
        ingest_seconds=seconds,
        text_search_config=text_config,
        settings=settings,
        rows=rows,
        notes=notes,
        hits=hits,
    )


def _trusted() -> Any:
    from context_engine.principals import TRUSTED

    return TRUSTED


async def _baselines(
    dataset: BeirDataset, embedder: Embedder, names: Sequence[str], progress: Progress | None
) -> list[RunResult]:
    wanted = set(names)
    unknown = wanted - {"bm25", "bm25-nostem", "dense", "bm25+dense"}
    if unknown:
        raise ValueError(f"unknown baseline(s): {sorted(unknown)}")
    if "bm25+dense" in wanted:
        wanted |= {"bm25", "dense"}
    out: list[RunResult] = []
    if wanted & {"bm25", "bm25-nostem"}:
        try:
            import bm25s  # noqa: F401
        except ImportError:
            wanted -= {"bm25", "bm25-nostem", "bm25+dense"}
            out.append(
                RunResult(
                    "BM25 baseline skipped",
                    math.nan,
                    math.nan,
                    math.nan,
                    kind="baseline",
                    note='install the bench extra: pip install "pg-context-engine[bench]"',
                )
            )
    if "bm25" in wanted:
        out.append(await asyncio.to_thread(bm25_baseline, dataset))
    if "bm25-nostem" in wanted:
        out.append(await asyncio.to_thread(bm25_baseline, dataset, stem=False))
    if "dense" in wanted:
        out.append(await dense_baseline(dataset, embedder, progress=progress))
    if "bm25+dense" in wanted:
        pair = [r for r in out if r.name.startswith("BM25 (bm25s, stemmed)") or r.name.startswith("dense exact")]
        for k in (10, 20, 60):
            out.append(rrf_baseline(f"RRF of BM25 + dense baselines (k={k})", pair, dataset.qrels, k))
    return out


async def _remove_source(engine: Any, source_id: str) -> None:
    """Delete every document of the evaluation source (used on a caller's own database)."""
    trusted = _trusted()
    while True:
        page = await engine.list_documents(principals=trusted, source_ids=[source_id], limit=500)
        if not page.documents:
            return
        for doc in page.documents:
            await engine.delete_document(doc.id, principals=trusted)


def format_table(report: EvalReport) -> str:
    """A Markdown table: engine configurations first, then the baselines computed in the same run."""
    lines = [
        f"BEIR {report.dataset}: {report.documents} documents ({report.chunks} chunks), {report.queries} queries; "
        f"text search configuration {report.text_search_config}"
        + (f"; ingest {report.ingest_seconds:.0f} s" if report.ingest_seconds else ""),
        "settings: " + ", ".join(f"{k}={v}" for k, v in report.settings.items() if v is not None),
        "",
        "| configuration | nDCG@10 | R@100 | MRR@10 | p50 ms | p95 ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]

    def num(value: float | None, digits: int) -> str:
        return "" if value is None or math.isnan(value) else f"{value:.{digits}f}"

    for row in report.rows:
        label = row.name if row.kind == "engine" else f"baseline: {row.name}"
        lines.append(
            f"| {label} | {num(row.ndcg10, 3)} | {num(row.recall100, 3)} | {num(row.mrr10, 3)} "
            f"| {num(row.p50_ms, 1)} | {num(row.p95_ms, 1)} |"
        )
    lines.append("")
    lines.extend(f"- {note}" for note in report.notes)
    lines.extend(f"- {r.name}: {r.note}" for r in report.rows if r.note)
    return "\n".join(lines)

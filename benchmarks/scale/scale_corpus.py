"""The synthetic corpus of the scale benchmark: vectors, chunk texts and ACLs for up to millions of rows.

Vectors follow the model of ``benchmarks/acl_recall/corpus.py`` with its calibrated weights (a
shared direction, a topic, a cluster and noise, normalised: about the similarity profile of
all-MiniLM-L6-v2 vectors of SciFact passages), drawn a block at a time so a million rows never sit
in memory at once. Texts are words drawn with the frequencies they have in a real corpus (SciFact's
abstracts, a Zipfian distribution), so full-text matching and the BM25 statistics have real work.

ACLs: every row carries exactly one of 1,000 groups (a real deployment's shape, and what keeps the
BM25 statistics, kept per distinct ACL, small). Half the rows, drawn at random, form 500 *random*
groups; the other half, ordered by cluster, is cut into 500 *region* groups of consecutive rows.
A caller's slice is a set of groups:

* random: groups of the random half, so its rows are spread over the whole space;
* clustered: consecutive region groups, one region of the space;
* scattered: region groups picked at random positions, many small regions.

Each group is 0.1% of the rows, so a slice of p% is ``10 * p`` groups. Two limits of one group per
row: a 0.1% scattered slice is one group (as a clustered one), and a 50% clustered or scattered
slice is the whole region half, which covers every cluster at half density.
"""

from __future__ import annotations

import gzip
import importlib.util
import inspect
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_ACL = importlib.util.spec_from_file_location(
    "acl_recall_corpus", Path(__file__).resolve().parent.parent / "acl_recall" / "corpus.py"
)
assert _ACL is not None and _ACL.loader is not None
acl_recall_corpus = importlib.util.module_from_spec(_ACL)
sys.modules[_ACL.name] = acl_recall_corpus
_ACL.loader.exec_module(acl_recall_corpus)

#: the calibrated weights of the ACL benchmark's generator (shared, topic, cluster, noise)
WEIGHTS: tuple[float, float, float, float] = (
    inspect.signature(acl_recall_corpus.make_corpus).parameters["weights"].default
)
GROUPS = 1000
HALF = GROUPS // 2
CHUNKS_PER_DOCUMENT = 10
PERCENTS = (0.1, 1, 5, 10, 25, 50, 100)
LAYOUTS = ("random", "clustered", "scattered")
_WORD = re.compile(r"[a-z][a-z-]{1,24}")


def group_name(group: int) -> str:
    return f"g{group:03d}"


@dataclass
class Layout:
    """Where every row sits (its cluster) and who may read it (its group); rows are in load order."""

    rows: int
    clusters: int
    topics: int
    seed: int
    cluster: np.ndarray  # (rows,) int32
    group: np.ndarray  # (rows,) int16

    def centres(self, dim: int) -> np.ndarray:
        """Cluster centres of the ACL benchmark's model, from their own seeded generator."""
        a, b, c, _ = WEIGHTS
        rng = np.random.default_rng(self.seed)
        shared = _unit(rng.standard_normal((1, dim)))
        topic_dir = _unit(rng.standard_normal((self.topics, dim)))
        cluster_dir = _unit(rng.standard_normal((self.clusters, dim)))
        cluster_topic = np.repeat(np.arange(self.topics), self.clusters // self.topics)
        return (a * shared + b * topic_dir[cluster_topic] + c * cluster_dir).astype(np.float32)


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def make_layout(rows: int, clusters: int = 200, topics: int = 20, seed: int = 7) -> Layout:
    """Rows in load order: group by group (a document is ten consecutive rows of one group)."""
    if rows % (GROUPS * CHUNKS_PER_DOCUMENT) or rows % clusters or clusters % topics:
        raise ValueError(f"rows must be a multiple of {GROUPS * CHUNKS_PER_DOCUMENT} and of clusters")
    rng = np.random.default_rng(seed + 1)
    cluster = np.repeat(np.arange(clusters, dtype=np.int32), rows // clusters)
    rng.shuffle(cluster)
    half = rows // 2
    group = np.empty(rows, dtype=np.int16)
    group[:half] = np.arange(half) % HALF  # the random half: cluster order is already shuffled
    region = np.argsort(cluster[half:], kind="stable")  # the region half, in cluster order
    group[half:][region] = HALF + (np.arange(half) * HALF // half)
    order = np.argsort(group, kind="stable")
    return Layout(rows, clusters, topics, seed, cluster[order], group[order])


def vectors(layout: Layout, start: int, stop: int, centres: np.ndarray) -> np.ndarray:
    """The unit vectors of rows ``start:stop``, the same whoever asks and in whatever blocks."""
    noise = np.random.default_rng([layout.seed, 2, start]).standard_normal((stop - start, centres.shape[1]))
    d = WEIGHTS[3]
    return _unit(centres[layout.cluster[start:stop]] + d * _unit(noise.astype(np.float32)))


def queries(layout: Layout, count: int, centres: np.ndarray, seed: int) -> np.ndarray:
    """Query vectors drawn like the rows (around a random cluster) but not among them."""
    rng = np.random.default_rng([layout.seed, 3, seed])
    which = rng.integers(0, layout.clusters, count)
    noise = _unit(rng.standard_normal((count, centres.shape[1])).astype(np.float32))
    return _unit(centres[which] + WEIGHTS[3] * noise)


def caller(layout_name: str, percent: float, rng: np.random.Generator) -> tuple[str, ...]:
    """The groups of one caller holding ``percent`` of the rows in ``layout_name``."""
    size = round(percent * GROUPS / 100)
    if size >= GROUPS:
        return tuple(group_name(g) for g in range(GROUPS))
    if layout_name == "random":
        picked = rng.choice(HALF, size, replace=False)
    elif layout_name == "clustered":
        start = int(rng.integers(0, HALF - size + 1))
        picked = np.arange(start, start + size) + HALF
    else:
        picked = rng.choice(HALF, size, replace=False) + HALF
    return tuple(group_name(int(g)) for g in sorted(picked))


@dataclass
class Vocabulary:
    """Words and their relative frequencies in a real corpus."""

    words: np.ndarray  # (w,) str
    p: np.ndarray  # (w,) float64, sums to 1


def vocabulary(path: Path, size: int = 20_000) -> Vocabulary:
    """The ``size`` most frequent words of a BEIR ``corpus.jsonl.gz`` with their counts."""
    counts: Counter[str] = Counter()
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            counts.update(_WORD.findall(f"{doc.get('title', '')} {doc.get('text', '')}".lower()))
    common = counts.most_common(size)
    words = np.array([w for w, _ in common])
    freq = np.array([c for _, c in common], dtype=np.float64)
    return Vocabulary(words, freq / freq.sum())


def texts(vocab: Vocabulary, count: int, rng: np.random.Generator, low: int = 40, high: int = 80) -> list[str]:
    """``count`` passages of ``low`` to ``high`` words drawn by corpus frequency."""
    lengths = rng.integers(low, high + 1, count)
    flat = rng.choice(len(vocab.words), int(lengths.sum()), p=vocab.p)
    # joined from a list of str, not by indexing the fixed-width array: that copy was ~114 MB per
    # 20,000-row block, and its moment set the peak RSS that the bulk benchmarks report
    words = vocab.words.tolist()
    out = []
    at = 0
    for n in lengths.tolist():
        out.append(" ".join([words[i] for i in flat[at : at + n].tolist()]))
        at += n
    return out

"""The synthetic corpus of the ACL-recall benchmark: clustered unit vectors and two permission layouts.

Why synthetic: the issue asks for 100,000 chunks; embedding that many real passages with the local
model takes hours on a 2-core machine, while vectors drawn around 200 cluster centres grouped into
20 topics reproduce the property that matters here, that a group's slice can be a *region* of the
embedding space. The noise level is chosen so that unfiltered HNSW as first built (m=16, ef_construction=64,
ef_search=40) missed a few percent of the true top 10, as it does on real embeddings.

Every row carries one ACL entry per layout and visibility, so one table and one HNSW build serve
every setting at exactly equal visibility. For a visibility of ``p`` percent there are ``100/p``
groups of each kind:

* ``r<p>:<g>`` random: a random permutation of the rows cut into equal groups;
* ``c<p>:<g>`` clustered: consecutive clusters (the cells of the generating clustering, so a
  k-means of the data recovers them), and consecutive clusters share a topic, so a group is one
  region of the space: at 1% two clusters of one topic, at 10% the twenty clusters of two topics.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass

import numpy as np

#: visibilities (percent of the rows) every row is grouped at, in both layouts
PERCENTS = (1, 2, 5, 10, 20, 25, 50)


def prefix(layout: str, percent: int) -> str:
    """The ACL-entry prefix of one setting: ``r10`` is random 10%, ``c1`` clustered 1%."""
    return f"{layout[0]}{percent}"


def prefixes() -> list[str]:
    return [prefix(layout, p) for p in PERCENTS for layout in ("random", "clustered")]


@dataclass
class Corpus:
    vectors: np.ndarray  # (n, dim) float32, unit rows
    cluster: np.ndarray  # (n,) cluster of each row
    groups: dict[str, np.ndarray]  # ACL prefix -> (n,) group of each row
    queries: np.ndarray  # (q, dim) float32, unit rows, drawn like the corpus but not in it
    callers: dict[str, np.ndarray]  # ACL prefix -> (q,) the group each query is asked as


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def make_corpus(
    rows: int = 100_000,
    dim: int = 384,
    topics: int = 20,
    clusters: int = 200,
    queries: int = 200,
    weights: tuple[float, float, float, float] = (0.34, 0.5, 0.42, 0.69),
    seed: int = 7,
) -> Corpus:
    """Rows ``a*g + b*topic + c*cluster + d*noise`` (each a random unit direction), normalised.

    ``g`` is one direction shared by every row: embeddings of real text are not centred, so two
    unrelated passages still have a cosine of about 0.1. The default weights give, at the density of
    a 5,000-row sample, about the similarity profile of all-MiniLM-L6-v2 vectors of SciFact passages
    (mean cosine 0.13, 10th neighbour 0.5, 100th neighbour 0.38; see README).
    """
    if rows % clusters or clusters % topics or clusters % 100 or rows % 100:
        raise ValueError("rows must split evenly into clusters, clusters into topics and into 100 groups")
    a, b, c, d = weights
    rng = np.random.default_rng(seed)
    shared = _unit(rng.standard_normal((1, dim)))
    topic_dir = _unit(rng.standard_normal((topics, dim)))
    cluster_dir = _unit(rng.standard_normal((clusters, dim)))
    cluster_topic = np.repeat(np.arange(topics), clusters // topics)
    centre = a * shared + b * topic_dir[cluster_topic] + c * cluster_dir

    def draw(count: int, which: np.ndarray) -> np.ndarray:
        return _unit(centre[which] + d * _unit(rng.standard_normal((count, dim))))

    cluster = np.repeat(np.arange(clusters), rows // clusters)
    vectors = draw(rows, cluster)
    q_cluster = rng.integers(0, clusters, queries)
    q_vectors = draw(queries, q_cluster)
    groups: dict[str, np.ndarray] = {}
    callers: dict[str, np.ndarray] = {}
    for name in prefixes():
        count = 100 // int(name[1:])
        if name.startswith("r"):
            groups[name] = rng.permutation(rows) % count
        else:  # consecutive clusters share a topic, so a group is a contiguous region of the space
            groups[name] = cluster * count // clusters
        callers[name] = rng.integers(0, count, queries)
    return Corpus(vectors, cluster, groups, q_vectors, callers)


def copy_binary(ids: np.ndarray, groups: list[np.ndarray], vectors: np.ndarray) -> bytes:
    """A ``COPY ... (FORMAT BINARY)`` stream of ``(id int4, g1..gk int4, embedding vector)`` rows.

    Built with one numpy buffer instead of formatting 38 million floats as text, which is what
    makes loading 100k rows take seconds rather than minutes.
    """
    n, dim = vectors.shape
    fields = [("nf", ">i2"), ("l_id", ">i4"), ("id", ">i4")]
    for i in range(len(groups)):
        fields += [(f"l_g{i}", ">i4"), (f"g{i}", ">i4")]
    fields += [("l_v", ">i4"), ("dim", ">i2"), ("unused", ">i2"), ("v", ">f4", (dim,))]
    rec = np.zeros(n, dtype=np.dtype(fields))
    rec["nf"] = 2 + len(groups)
    rec["l_id"] = 4
    rec["id"] = ids
    for i, g in enumerate(groups):
        rec[f"l_g{i}"] = 4
        rec[f"g{i}"] = g
    rec["l_v"] = 4 + 4 * dim
    rec["dim"] = dim
    rec["v"] = vectors
    out = io.BytesIO()
    out.write(b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0))
    out.write(rec.tobytes())
    out.write(struct.pack(">h", -1))
    return out.getvalue()

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
  region of the space: at 1% two clusters of one topic, at 10% the twenty clusters of two topics
  (below one cluster's share, a cluster is cut into slabs along one direction, each still a region);
* ``s<p>:<g>`` scattered: every cluster cut into ``SCATTER_PIECES`` slabs along one direction (small
  regions), the slabs shuffled and dealt into equal groups, so a group is many small regions spread
  over the whole space: its centroid is the corpus's, like a random slice's, but near any one query
  it holds either a dense patch or nothing.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass

import numpy as np

#: slice sizes (percent of the rows) every row is grouped at, in each layout
PERCENTS: tuple[float, ...] = (0.1, 1, 5, 10, 25, 50, 100)
#: the slice shapes
LAYOUTS = ("random", "clustered", "scattered")
#: slabs each cluster is cut into for the scattered layout
SCATTER_PIECES = 10


def prefix(layout: str, percent: float) -> str:
    """The ACL-entry prefix of one setting: ``r10`` is random 10%, ``c1`` clustered 1%, ``s0.1`` scattered 0.1%."""
    return f"{layout[0]}{percent:g}"


def prefixes() -> list[str]:
    return [prefix(layout, p) for p in PERCENTS for layout in LAYOUTS]


def group_count(percent: float) -> int:
    """How many equal groups a slice of ``percent`` of the rows splits the rows into."""
    return round(100 / percent)


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
    if rows % clusters or clusters % topics or clusters % 100 or rows % 1000:
        raise ValueError("rows must split evenly into clusters and 1,000 groups, clusters into topics and 100 groups")
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
    place = slab_position(vectors, cluster, clusters, rng)
    groups: dict[str, np.ndarray] = {}
    callers: dict[str, np.ndarray] = {}
    for percent in PERCENTS:
        count = group_count(percent)
        groups[prefix("random", percent)] = rng.permutation(rows) % count
        groups[prefix("clustered", percent)] = clustered_groups(cluster, place, clusters, count)
        groups[prefix("scattered", percent)] = scattered_groups(cluster, place, clusters, count, rng)
        for layout in LAYOUTS:
            callers[prefix(layout, percent)] = rng.integers(0, count, queries)
    return Corpus(vectors, cluster, groups, q_vectors, callers)


def slab_position(vectors: np.ndarray, cluster: np.ndarray, clusters: int, rng: np.random.Generator) -> np.ndarray:
    """Each row's rank within its cluster along one random direction per cluster, scaled to [0, 1).

    Cutting a cluster at fixed positions of this rank gives slabs: contiguous regions of that cluster.
    """
    direction = (rng.standard_normal((clusters, vectors.shape[1]))).astype(np.float32)
    along = np.einsum("ij,ij->i", vectors, direction[cluster])
    place = np.empty(len(vectors))
    for c in range(clusters):
        members = np.flatnonzero(cluster == c)
        ranks = np.argsort(np.argsort(along[members]))
        place[members] = ranks / len(members)
    return place


def clustered_groups(cluster: np.ndarray, place: np.ndarray, clusters: int, count: int) -> np.ndarray:
    """Groups of consecutive clusters (one topic's region), or of slabs of one cluster when ``count > clusters``."""
    return np.floor((cluster + place) * count / clusters).astype(np.int64)


def scattered_groups(
    cluster: np.ndarray, place: np.ndarray, clusters: int, count: int, rng: np.random.Generator
) -> np.ndarray:
    """Groups of many small regions: every cluster cut into ``SCATTER_PIECES`` slabs, slabs shuffled, dealt out.

    Needs ``clusters * SCATTER_PIECES >= count`` (every group gets at least one slab).
    """
    regions = clusters * SCATTER_PIECES
    if regions < count:
        raise ValueError(f"{regions} regions cannot make {count} scattered groups")
    region = cluster * SCATTER_PIECES + np.floor(place * SCATTER_PIECES).astype(np.int64)
    dealt = np.empty(regions, dtype=np.int64)
    dealt[rng.permutation(regions)] = np.arange(regions) * count // regions
    return dealt[region]


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

"""Fusing the legs' candidate lists into one ranking.

Two methods, chosen by ``fusion.method``:

* ``convex`` (the default): each leg's scores are min-max normalised over that leg's candidates for
  this query (best 1, worst 0), and a candidate's fused score is the weighted mean of its normalised
  scores, 0 for a leg that did not return it. It keeps how far apart a leg's candidates are, which
  rank fusion throws away: on BEIR SciFact (documents ingested as plain text) it ranked 0.730
  nDCG@10 against 0.716 for RRF at its best ``k`` with the same legs and weights, and above it on
  each half of the test queries (benchmarks/README.md, "How the defaults were chosen"). Normalising per
  query makes it independent of a model's cosine range or BM25's scale.
* ``rrf``: weighted reciprocal rank fusion, ``sum of weight / (k + rank)``, which uses ranks only.

A leg that scores whole documents hands fusion every chunk of a document with the document's score;
its ranking is named in ``shared_ranks``, and RRF gives its equal scores one rank (the document's),
so a document of three chunks does not push the next document three places down.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence


def rrf(rankings: Mapping[str, Sequence[int]], weights: Mapping[str, float], k: int) -> list[tuple[int, float]]:
    """Fuse ranked id lists (best first) into ``(id, score)`` pairs, best first.

    Ties break on the smaller id so the order is deterministic.
    """
    return _rrf({leg: list(enumerate(ids, start=1)) for leg, ids in rankings.items()}, weights, k)


def shared_ranks(pairs: Sequence[tuple[int, float]]) -> list[tuple[int, int]]:
    """``(rank, id)`` for ``(id, score)`` pairs best first, equal neighbouring scores sharing one rank
    (1, 1, 1, 2, 2, 3 ...): the rank of the document a chunk was scored with."""
    ranked: list[tuple[int, int]] = []
    rank, last = 0, None
    for item, score in pairs:
        if score != last:
            rank, last = rank + 1, score
        ranked.append((rank, item))
    return ranked


def _rrf(
    ranked: Mapping[str, Sequence[tuple[int, int]]], weights: Mapping[str, float], k: int
) -> list[tuple[int, float]]:
    scores: dict[int, float] = {}
    for leg, pairs in ranked.items():
        weight = weights.get(leg, 0.0)
        if weight <= 0:
            continue
        for rank, item in pairs:
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))


def convex(scored: Mapping[str, Sequence[tuple[int, float]]], weights: Mapping[str, float]) -> list[tuple[int, float]]:
    """Fuse ``(id, score)`` lists (higher is better) by the weighted mean of min-max normalised scores.

    Scores lie in [0, 1]. A leg whose candidates all score the same gives each of them 1; a leg with
    no candidates still counts in the denominator, so its weight is not handed to the others. Ties
    break on the smaller id.
    """
    used = {leg: w for leg, w in weights.items() if w > 0 and leg in scored}
    total = sum(used.values())
    if total <= 0:
        return []
    fused: dict[int, float] = {}
    for leg, weight in used.items():
        pairs = scored[leg]
        if not pairs:
            continue
        values = [score for _, score in pairs]
        low, high = min(values), max(values)
        span = high - low
        for item, score in pairs:
            norm = (score - low) / span if span > 0 else 1.0
            fused[item] = fused.get(item, 0.0) + weight * norm
    return sorted(((i, s / total) for i, s in fused.items()), key=lambda pair: (-pair[1], pair[0]))


def fuse(
    method: str,
    scored: Mapping[str, Sequence[tuple[int, float]]],
    weights: Mapping[str, float],
    k: int,
    shared: Collection[str] = (),
) -> list[tuple[int, float]]:
    """The configured fusion of the legs' ``(id, score)`` lists (each best first); for RRF, the
    rankings named in ``shared`` give equal scores one rank (see :func:`shared_ranks`)."""
    if method == "rrf":
        ranked = {
            leg: shared_ranks(pairs) if leg in shared else [(r, i) for r, (i, _) in enumerate(pairs, start=1)]
            for leg, pairs in scored.items()
        }
        return _rrf(ranked, weights, k)
    return convex(scored, weights)

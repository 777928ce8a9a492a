"""Weighted reciprocal rank fusion: score = sum over legs of weight / (k + rank)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def rrf(rankings: Mapping[str, Sequence[int]], weights: Mapping[str, float], k: int) -> list[tuple[int, float]]:
    """Fuse ranked id lists (best first) into ``(id, score)`` pairs, best first.

    Ties break on the smaller id so the order is deterministic.
    """
    scores: dict[int, float] = {}
    for leg, ids in rankings.items():
        weight = weights.get(leg, 0.0)
        if weight <= 0:
            continue
        for rank, item in enumerate(ids, start=1):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))

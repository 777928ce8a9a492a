"""The rerank guards: when the judge's verdict is used, and the order used when it is not.

A judge is a model; it can be down, slow, confused or wrong. Its verdict is used only when all hold:

1. it answered within ``rerank.timeout`` and without error (else reason ``error``/``timeout``);
2. it found something relevant: the best score is at least ``rerank.relevance_floor`` on the 0-1
   scale (else ``nothing_relevant``): a judge that calls every passage irrelevant is more likely
   broken or misled than right about a pool the retrieval channels agreed on;
3. it does not wildly contradict the fused consensus (else ``contradicts_consensus``).

The consensus measure is **Kendall's tau (tau-a) between the judge's order and the fused order
over the passages the judge saw**: (agreeing pairs - disagreeing pairs) / all pairs; +1 is the same
order, 0 unrelated, -1 exactly reversed. A useful judge reorders (that is its job) but, since both
it and the fusion track relevance, it agrees with the fusion more often than not; a reversed or
strongly anti-correlated verdict means it misread the task. The verdict is discarded when tau <
``rerank.min_consensus_tau`` (default -0.2: disagreeing pairs outnumber agreeing ones by more than
a fifth of all pairs). A pair the judge scores equally counts as neither, and the denominator stays
all pairs (tau-a, not tau-b), so a sparse judge, one that marks a single passage relevant and the
rest equal, is measured by the few preferences it expressed without having them inflated: it can
promote the last passage of a 20-passage pool (tau -0.1) and keep its verdict, while a judge
that ranks the bottom half of the pool above the top half (about -0.53) cannot. A judge that scores
everything the same gives 0, which passes this guard (the relevance floor still applies). Passages
the judge did not score rank below every scored one.

When the verdict is discarded the order is deterministic: passages sharing more of the question's
content words first, the fused order breaking ties. It depends on nothing but the texts, so the
same question over the same documents always gets the same answer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from context_engine.knowledge.shape import content_terms, shared_terms


def kendall_tau(scores: Sequence[float | None]) -> float:
    """Tau-a between ``scores`` (higher = better) and the given order (index 0 best, no ties).

    Pairs the judge tied count as neither agreement nor disagreement; 0.0 for fewer than two passages.
    """
    values = [-math.inf if s is None else s for s in scores]
    n = len(values)
    pairs = n * (n - 1) // 2
    if pairs == 0:
        return 0.0
    balance = 0
    for i in range(n):
        for j in range(i + 1, n):
            if values[i] > values[j]:
                balance += 1
            elif values[i] < values[j]:
                balance -= 1
    return balance / pairs


def verdict(scores: Sequence[float | None], *, relevance_floor: float, min_tau: float) -> tuple[bool, str, float]:
    """(use the judge's order?, reason, tau) for scores given in fused order."""
    known = [s for s in scores if s is not None]
    tau = kendall_tau(scores)
    if not known or max(known) < relevance_floor:
        return False, "nothing_relevant", tau
    if tau < min_tau:
        return False, "contradicts_consensus", tau
    return True, "applied", tau


def judged_order(scores: Sequence[float | None]) -> list[int]:
    """Indices (fused order) by the judge's score, best first; the fused order breaks ties."""

    def rank(i: int) -> tuple[float, int]:
        score = scores[i]
        return (-score if score is not None else 1.0, i)

    return sorted(range(len(scores)), key=rank)


def deterministic_order(question: str, passages: Sequence[str]) -> list[int]:
    """Indices (fused order) with passages sharing more question words first, then the fused order."""
    terms = content_terms(question)
    shared = [shared_terms(terms, p) for p in passages]
    return sorted(range(len(passages)), key=lambda i: (-shared[i], i))

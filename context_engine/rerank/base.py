"""The one interface every reranker implements.

A reranker scores passages for relevance to a query. Scores are on one scale, 0 (irrelevant) to 1
(clearly answers), whatever the provider: the rerank APIs already answer on it, the LLM judge's
0-10 is divided by 10. One scale is what lets the knowledge pipeline's guards (a relevance floor,
agreement with the fused order) read every judge the same way.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass


@dataclass
class RerankResult:
    #: one score per passage, in the order the passages were given; None = the judge said nothing
    scores: list[float | None]
    #: billed tokens when the provider reports them (the LLM judge, Voyage, Jina), else 0
    tokens: int = 0


class Reranker(abc.ABC):
    provider: str
    model: str

    @abc.abstractmethod
    async def rerank(self, query: str, passages: list[str]) -> RerankResult:
        """Score every passage against ``query``. Raises ``ProviderError`` when the judge fails."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release a client this reranker built itself (never a host-supplied one)."""

"""The one small interface every embedding provider implements."""

from __future__ import annotations

import abc
from typing import Literal

from context_engine.embeddings.batches import BatchNotSupported
from context_engine.embeddings.openai_batches import OpenAIBatchClient
from context_engine.embeddings.tokens import estimate_tokens

InputKind = Literal["document", "query"]


class Embedder(abc.ABC):
    """Turns texts into unit-length-agnostic float vectors of a fixed width.

    ``provider``/``model``/``dim`` together form the embedding key stored beside every vector,
    so a vector is only ever reused by the same provider, model and width.
    """

    provider: str
    model: str
    dim: int
    #: the provider's per-input cap in tokens (an input above it is refused, never truncated)
    max_input_tokens: int

    @abc.abstractmethod
    async def embed(self, texts: list[str], *, kind: InputKind = "document") -> list[list[float]]:
        """Embed ``texts`` in order. ``kind`` lets providers that distinguish queries do so."""

    def count_tokens(self, text: str) -> int:
        """Token count for budgeting. Default: the UTF-8 over-estimate, never a download."""
        return estimate_tokens(text, 3.0)

    def batch_api(self) -> OpenAIBatchClient:
        """The provider's asynchronous batch jobs; a provider without them refuses ``batch=True`` here."""
        raise BatchNotSupported(
            f"embedding.provider {self.provider!r} has no batch API; ingest without batch=True "
            "(batch embedding is offered by providers 'openai' and 'custom')",
            details={"provider": self.provider},
        )

    @property
    def key(self) -> str:
        return f"{self.provider}\t{self.model}\t{self.dim}"

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release clients this provider built itself (never a host-supplied one)."""

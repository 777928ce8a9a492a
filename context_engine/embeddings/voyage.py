"""Voyage AI embeddings through the official SDK (``voyageai.AsyncClient``).

The SDK is an optional extra, imported when this provider is built. Its retries are switched off
(``max_retries=0``) so retries, backoff and error codes match every other remote provider. The SDK
talks over its own aiohttp sessions, so a host-supplied httpx client does not apply here.
"""

from __future__ import annotations

from typing import Any

from context_engine.config import EmbeddingConfig
from context_engine.embeddings.base import InputKind
from context_engine.embeddings.remote import ModelTable, RemoteEmbedder, require_api_key
from context_engine.providers.http import HttpClientFactory
from context_engine.providers.sdk import import_sdk

VOYAGE_DEFAULT_MODEL = "voyage-3"
VOYAGE_MAX_INPUT_TOKENS = 32000
VOYAGE_NATIVE_DIMS: dict[str, int] = {
    "voyage-3": 1024,
    "voyage-3-lite": 512,
    "voyage-3-large": 1024,
    "voyage-3.5": 1024,
    "voyage-3.5-lite": 1024,
    "voyage-code-3": 1024,
    "voyage-finance-2": 1024,
    "voyage-law-2": 1024,
    "voyage-multilingual-2": 1024,
    "voyage-code-2": 1536,
}
#: models that accept ``output_dimension`` (256/512/1024/2048)
VOYAGE_FLEXIBLE = frozenset({"voyage-3-large", "voyage-3.5", "voyage-3.5-lite", "voyage-code-3"})
_NEEDS = "The voyage embedding provider needs the Voyage AI SDK"


class VoyageEmbedder(RemoteEmbedder):
    """Voyage ``/embeddings``: documents are never truncated; over-long queries are cut by Voyage.

    ``truncation`` follows the local model's rule: a document above the cap is an error (it should
    have been chunked), while a long query is embedded from its head rather than refused.
    """

    models = ModelTable(VOYAGE_DEFAULT_MODEL, VOYAGE_MAX_INPUT_TOKENS, VOYAGE_NATIVE_DIMS)

    def __init__(self, config: EmbeddingConfig, http_client_factory: HttpClientFactory | None = None):
        self._voyageai = import_sdk("voyageai", needed_by=_NEEDS, extra="voyage")
        errors = import_sdk("voyageai.error", needed_by=_NEEDS, extra="voyage")
        self._voyage_error: type[Exception] = errors.VoyageError
        self._transport_errors: tuple[type[Exception], ...] = (errors.APIConnectionError, errors.Timeout)
        super().__init__(config, http_client_factory, require_api_key(config))
        self.size(flexible=self.model in VOYAGE_FLEXIBLE)

    def _new_client(self) -> Any:
        return self._voyageai.AsyncClient(
            api_key=self._api_key,
            max_retries=0,
            timeout=self._config.timeout,
            base_url=self._config.base_url,
        )

    async def request(self, texts: list[str], kind: InputKind) -> list[list[float]]:
        """One ``embed`` call with Voyage's ``document``/``query`` input types."""
        options = {"texts": texts, "model": self.model, "input_type": kind, "truncation": kind == "query"}
        try:
            result = await self._sdk(self._new_client).embed(**self.sized(options, "output_dimension"))
        except self._voyage_error as exc:
            # a connection error or timeout may carry no status, or a stale one: it was not answered
            status = None if isinstance(exc, self._transport_errors) else getattr(exc, "http_status", None)
            raise self.sdk_failure(exc, status, getattr(exc, "http_body", None), getattr(exc, "headers", None),
                                   len(texts)) from None  # fmt: skip
        return [[float(x) for x in vector] for vector in result.embeddings]

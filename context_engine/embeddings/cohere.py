"""Cohere embeddings through the official SDK (``cohere.AsyncClientV2``).

The SDK is an optional extra, imported when this provider is built. Its own retries are switched
off so retries, backoff and error codes behave exactly as for every other remote provider.
"""

from __future__ import annotations

from typing import Any

import httpx

from context_engine.config import EmbeddingConfig
from context_engine.embeddings.base import InputKind
from context_engine.embeddings.remote import ModelTable, RemoteEmbedder, require_api_key
from context_engine.providers.http import HttpClientFactory
from context_engine.providers.sdk import import_sdk

COHERE_DEFAULT_MODEL = "embed-english-v3.0"
COHERE_MAX_INPUT_TOKENS = 512
COHERE_NATIVE_DIMS: dict[str, int] = {
    "embed-english-v3.0": 1024,
    "embed-multilingual-v3.0": 1024,
    "embed-english-light-v3.0": 384,
    "embed-multilingual-light-v3.0": 384,
    "embed-v4.0": 1536,
}
_NEEDS = "The cohere embedding provider needs the Cohere SDK"
_ERRORS = "cohere.core.api_error"  # the SDK's module of its API error
_INPUT_TYPES: dict[str, str] = {"document": "search_document", "query": "search_query"}


class CohereEmbedder(RemoteEmbedder):
    """Cohere ``/v2/embed`` with ``truncate="NONE"``: an input over the cap is refused, never cut."""

    models = ModelTable(COHERE_DEFAULT_MODEL, COHERE_MAX_INPUT_TOKENS, COHERE_NATIVE_DIMS)

    def __init__(self, config: EmbeddingConfig, http_client_factory: HttpClientFactory | None = None):
        self._cohere = import_sdk("cohere", needed_by=_NEEDS, extra="cohere")
        self._api_error: type[Exception] = import_sdk(_ERRORS, needed_by=_NEEDS, extra="cohere").ApiError
        super().__init__(config, http_client_factory, require_api_key(config))
        self.size(flexible=self.model.startswith("embed-v4"))

    def _new_client(self) -> Any:
        return self._cohere.AsyncClientV2(
            api_key=self._api_key,
            base_url=self._config.base_url,
            timeout=self._config.timeout,
            max_retries=0,
            httpx_client=self._http.get(),
        )

    async def request(self, texts: list[str], kind: InputKind) -> list[list[float]]:
        """One ``embed`` call; queries and documents use Cohere's distinct input types."""
        options = {"model": self.model, "input_type": _INPUT_TYPES[kind], "texts": texts,
                   "embedding_types": ["float"], "truncate": "NONE"}  # fmt: skip
        try:
            response = await self._sdk(self._new_client).embed(**self.sized(options, "output_dimension"),
                                               request_options={"max_retries": 0})  # fmt: skip
        except self._api_error as exc:
            raise self.sdk_failure(exc, getattr(exc, "status_code", None), getattr(exc, "body", None),
                                   getattr(exc, "headers", None), len(texts)) from None  # fmt: skip
        except httpx.TransportError as exc:
            raise self.unreachable(exc) from exc
        floats = getattr(getattr(response, "embeddings", None), "float_", None)
        if floats is None:
            raise self.unreadable("a list of float embeddings")
        return [[float(x) for x in vector] for vector in floats]

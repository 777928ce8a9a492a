"""Cohere embeddings through the official SDK (``cohere.AsyncClientV2``).

The SDK is an optional extra, imported when this provider is built. Its own retries are switched
off so retries, backoff and error codes behave exactly as for every other remote provider.
"""

from __future__ import annotations

from typing import Any

import httpx

from context_engine.config import EmbeddingConfig
from context_engine.embeddings.base import Embedder, InputKind
from context_engine.embeddings.openai_compat import (
    HttpClientFactory,
    HttpClientHolder,
    check_vectors,
    estimate_tokens,
    failure_for_status,
    require_api_key,
    resolve_dim,
    transport_failure,
    with_retries,
)
from context_engine.errors import ProviderError

COHERE_DEFAULT_MODEL = "embed-english-v3.0"
COHERE_MAX_INPUT_TOKENS = 512
COHERE_NATIVE_DIMS: dict[str, int] = {
    "embed-english-v3.0": 1024,
    "embed-multilingual-v3.0": 1024,
    "embed-english-light-v3.0": 384,
    "embed-multilingual-light-v3.0": 384,
    "embed-v4.0": 1536,
}
INSTALL_HINT = 'pip install "pg-context-engine[cohere]"'
_INPUT_TYPES: dict[str, str] = {"document": "search_document", "query": "search_query"}


def _import_cohere() -> Any:
    try:
        import cohere
    except ImportError as exc:
        raise ImportError(f"The cohere embedding provider needs the Cohere SDK: {INSTALL_HINT}") from exc
    return cohere


class CohereEmbedder(Embedder):
    """Cohere ``/v2/embed`` with ``truncate="NONE"``: an input over the cap is refused, never cut."""

    provider = "cohere"
    #: first retry waits about this long, doubling each time (Retry-After on 429 takes precedence)
    backoff_base: float = 0.5

    def __init__(self, config: EmbeddingConfig, http_client_factory: HttpClientFactory | None = None):
        self._cohere = _import_cohere()
        from cohere.core.api_error import ApiError

        self._api_error: type[Exception] = ApiError
        self._config = config
        self._api_key = require_api_key(config)
        self.model = config.model or COHERE_DEFAULT_MODEL
        self.dim, self._output_dimension = resolve_dim(
            config, self.model, COHERE_NATIVE_DIMS, flexible=self.model.startswith("embed-v4")
        )
        self.max_input_tokens = config.max_input_tokens or COHERE_MAX_INPUT_TOKENS
        self._secrets = (self._api_key,)
        self._http = HttpClientHolder(http_client_factory, config.timeout)
        self._client: Any = None

    def count_tokens(self, text: str) -> int:
        return estimate_tokens(text, self._config.token_bytes_ratio)

    def _sdk(self) -> Any:
        if self._client is None:
            self._client = self._cohere.AsyncClientV2(
                api_key=self._api_key,
                base_url=self._config.base_url,
                timeout=self._config.timeout,
                max_retries=0,
                httpx_client=self._http.get(),
            )
        return self._client

    async def embed(self, texts: list[str], *, kind: InputKind = "document") -> list[list[float]]:
        """One ``embed`` call per batch; queries and documents use Cohere's distinct input types."""
        if not texts:
            return []
        client = self._sdk()
        options: dict[str, Any] = {
            "model": self.model,
            "input_type": _INPUT_TYPES[kind],
            "texts": list(texts),
            "embedding_types": ["float"],
            "truncate": "NONE",
        }
        if self._output_dimension is not None:
            options["output_dimension"] = self._output_dimension

        async def attempt() -> list[list[float]]:
            try:
                response = await client.embed(**options, request_options={"max_retries": 0})
            except self._api_error as exc:
                status = getattr(exc, "status_code", None) or 0
                if status == 0:
                    raise transport_failure(self.provider, exc, self._secrets) from None
                raise failure_for_status(
                    self.provider,
                    status,
                    getattr(exc, "body", None),
                    getattr(exc, "headers", None),
                    batch_size=len(texts),
                    secrets=self._secrets,
                ) from None
            except httpx.TransportError as exc:
                raise transport_failure(self.provider, exc, self._secrets) from exc
            floats = getattr(getattr(response, "embeddings", None), "float_", None)
            if floats is None:
                raise ProviderError(
                    "cohere sent a reply without float embeddings",
                    code="provider_unavailable",
                    details={"provider": self.provider},
                )
            return [[float(x) for x in vector] for vector in floats]

        vectors = await with_retries(
            self.provider,
            attempt,
            max_retries=self._config.max_retries,
            backoff_base=self.backoff_base,
            secrets=self._secrets,
        )
        return check_vectors(self.provider, vectors, len(texts), self.dim)

    async def aclose(self) -> None:
        """Close the HTTP client only when we built it; a host-supplied client stays open."""
        self._client = None
        await self._http.aclose()

"""Voyage AI embeddings through the official SDK (``voyageai.AsyncClient``).

The SDK is an optional extra, imported when this provider is built. Its retries are switched off
(``max_retries=0``) so retries, backoff and error codes match every other remote provider. The SDK
talks over its own aiohttp sessions, so a host-supplied httpx client does not apply here.
"""

from __future__ import annotations

from typing import Any

from context_engine.config import EmbeddingConfig
from context_engine.embeddings.base import Embedder, InputKind
from context_engine.embeddings.openai_compat import (
    HttpClientFactory,
    check_vectors,
    estimate_tokens,
    failure_for_status,
    require_api_key,
    resolve_dim,
    transport_failure,
    with_retries,
)

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
INSTALL_HINT = 'pip install "pg-context-engine[voyage]"'


def _import_voyageai() -> Any:
    try:
        import voyageai
    except ImportError as exc:
        raise ImportError(f"The voyage embedding provider needs the Voyage AI SDK: {INSTALL_HINT}") from exc
    return voyageai


class VoyageEmbedder(Embedder):
    """Voyage ``/embeddings``: documents are never truncated; over-long queries are cut by Voyage.

    ``truncation`` follows the local model's rule: a document above the cap is an error (it should
    have been chunked), while a long query is embedded from its head rather than refused.
    """

    provider = "voyage"
    #: first retry waits about this long, doubling each time (Retry-After on 429 takes precedence)
    backoff_base: float = 0.5

    def __init__(self, config: EmbeddingConfig, http_client_factory: HttpClientFactory | None = None):
        self._voyageai = _import_voyageai()
        from voyageai.error import APIConnectionError, Timeout, VoyageError

        self._voyage_error: type[Exception] = VoyageError
        self._transport_errors: tuple[type[Exception], ...] = (APIConnectionError, Timeout)
        self._config = config
        self._api_key = require_api_key(config)
        self.model = config.model or VOYAGE_DEFAULT_MODEL
        self.dim, self._output_dimension = resolve_dim(
            config, self.model, VOYAGE_NATIVE_DIMS, flexible=self.model in VOYAGE_FLEXIBLE
        )
        self.max_input_tokens = config.max_input_tokens or VOYAGE_MAX_INPUT_TOKENS
        self._secrets = (self._api_key,)
        self._client: Any = None

    def count_tokens(self, text: str) -> int:
        return estimate_tokens(text, self._config.token_bytes_ratio)

    def _sdk(self) -> Any:
        if self._client is None:
            self._client = self._voyageai.AsyncClient(
                api_key=self._api_key,
                max_retries=0,
                timeout=self._config.timeout,
                base_url=self._config.base_url,
            )
        return self._client

    async def embed(self, texts: list[str], *, kind: InputKind = "document") -> list[list[float]]:
        """One ``embed`` call per batch with Voyage's ``document``/``query`` input types."""
        if not texts:
            return []
        client = self._sdk()
        options: dict[str, Any] = {
            "texts": list(texts),
            "model": self.model,
            "input_type": kind,
            "truncation": kind == "query",
        }
        if self._output_dimension is not None:
            options["output_dimension"] = self._output_dimension

        async def attempt() -> list[list[float]]:
            try:
                result = await client.embed(**options)
            except self._voyage_error as exc:
                status = getattr(exc, "http_status", None)
                if isinstance(exc, self._transport_errors) or not status:
                    raise transport_failure(self.provider, exc, self._secrets) from None
                raise failure_for_status(
                    self.provider,
                    int(status),
                    getattr(exc, "http_body", None),
                    getattr(exc, "headers", None),
                    batch_size=len(texts),
                    secrets=self._secrets,
                ) from None
            return [[float(x) for x in vector] for vector in result.embeddings]

        vectors = await with_retries(
            self.provider,
            attempt,
            max_retries=self._config.max_retries,
            backoff_base=self.backoff_base,
            secrets=self._secrets,
        )
        return check_vectors(self.provider, vectors, len(texts), self.dim)

    async def aclose(self) -> None:
        """Nothing pooled to release: the SDK opens and closes a session per request."""
        self._client = None

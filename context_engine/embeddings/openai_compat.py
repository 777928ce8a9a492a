"""OpenAI's ``/embeddings`` API and the servers that copy it (Azure OpenAI, custom endpoints)."""

from __future__ import annotations

from typing import Any

import httpx

from context_engine.config import EmbeddingConfig
from context_engine.embeddings.base import InputKind
from context_engine.embeddings.batches import BatchNotSupported
from context_engine.embeddings.openai_batches import OpenAIBatchClient
from context_engine.embeddings.remote import ModelTable, RemoteEmbedder, require_api_key
from context_engine.embeddings.tokens import TokenCounter
from context_engine.errors import ConfigError, ProviderError
from context_engine.providers.failures import BatchTooLarge as BatchTooLarge  # its former home
from context_engine.providers.http import HttpClientFactory
from context_engine.providers.openai_wire import OPENAI_DEFAULT_BASE_URL, auth_headers, azure_deployment_url
from context_engine.providers.redact import error_snippet as error_snippet  # its former home
from context_engine.providers.retry import parse_retry_after as parse_retry_after  # its former home

OPENAI_DEFAULT_MODEL = "text-embedding-3-small"
#: per-input caps in tokens (the provider table); ``embedding.max_input_tokens`` overrides
OPENAI_MAX_INPUT_TOKENS = 8192
OPENAI_NATIVE_DIMS: dict[str, int] = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
SERVED = ("openai", "azure_openai", "custom")


class OpenAICompatibleEmbedder(RemoteEmbedder):
    """``openai``, ``azure_openai`` and ``custom`` (any server speaking OpenAI's ``/embeddings``).

    ``custom`` requires ``base_url``, ``model`` and ``dim``: the width is part of the embedding key
    and of the database column, so it is known up front rather than learnt from a first reply.
    """

    models = ModelTable(OPENAI_DEFAULT_MODEL, OPENAI_MAX_INPUT_TOKENS, OPENAI_NATIVE_DIMS)

    def __init__(self, config: EmbeddingConfig, http_client_factory: HttpClientFactory | None = None):
        provider = config.provider
        if provider not in SERVED:
            raise ConfigError(f"OpenAICompatibleEmbedder does not serve provider {provider!r}")
        self._params: dict[str, str] = {}
        #: the URL before ``/embeddings`` (and, for the batch API, before ``/files`` and ``/batches``)
        self._api_base = (config.base_url or OPENAI_DEFAULT_BASE_URL).rstrip("/")
        if provider == "custom":
            if not config.base_url or not config.model or config.dim is None:
                raise ConfigError(
                    "provider 'custom' needs embedding.base_url (the URL before /embeddings), "
                    "embedding.model and embedding.dim."
                )
            super().__init__(config, http_client_factory, config.api_key.get_secret_value() if config.api_key else None)
            self._url = f"{config.base_url.rstrip('/')}/embeddings"
        else:
            super().__init__(config, http_client_factory, require_api_key(config))
            self._url = f"{self._api_base}/embeddings"
        if provider == "azure_openai":
            if not config.base_url or not config.deployment:
                raise ConfigError(
                    "provider 'azure_openai' needs embedding.base_url (https://<resource>.openai.azure.com) "
                    "and embedding.deployment."
                )
            # the model name is part of the embedding key; the deployment name stands in when unset
            self.model = config.model or config.deployment
            self._url, self._params = azure_deployment_url(config.base_url, config.deployment, "embeddings",
                                                           config.api_version)  # fmt: skip
        flexible = self.model.startswith("text-embedding-3")
        if provider == "custom" and config.dim is not None:  # always set for custom: refused above otherwise
            self.dim, self._output_dim = config.dim, (config.dim if flexible else None)
        else:
            self.size(flexible)
        self._tokens = TokenCounter(config.tokenizer, config.token_bytes_ratio)

    def count_tokens(self, text: str) -> int:
        """cl100k when ``embedding.tokenizer`` allows it (the OpenAI family's own tokenizer), else the estimate."""
        return self._tokens.count(text)

    def _headers(self) -> dict[str, str]:
        return auth_headers(self.provider, self._api_key)

    def _payload(self, texts: list[str]) -> dict[str, Any]:
        payload: dict[str, Any] = {"input": texts}
        if self.provider != "azure_openai":  # Azure takes the model from the deployment in the URL
            payload["model"] = self.model
        return self.sized(payload, "dimensions")

    async def request(self, texts: list[str], kind: InputKind) -> list[list[float]]:
        """OpenAI has no query/document split: ``kind`` is not sent."""
        try:
            response = await self._http.get().post(
                self._url,
                params=self._params or None,
                json=self._payload(texts),
                headers=self._headers(),
                timeout=self._config.timeout,
            )
        except httpx.TransportError as exc:
            raise self.unreachable(exc) from exc
        if response.status_code >= 300:
            raise self.status_error(response.status_code, response.content, response.headers, len(texts))
        return self._parse(response, len(texts))

    def _parse(self, response: httpx.Response, expected: int) -> list[list[float]]:
        """Vectors ordered by each item's ``index`` (the API does not promise reply order)."""
        try:
            data = response.json()["data"]
            items = sorted(data, key=lambda item: int(item.get("index", 0)))
            vectors = [[float(x) for x in item["embedding"]] for item in items]
            indices = [int(item.get("index", i)) for i, item in enumerate(items)]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise self.unreadable(f"an embeddings list ({type(exc).__name__})") from None
        if len(vectors) == expected and indices != list(range(expected)):
            raise ProviderError(
                f"{self.provider} reply indices do not cover 0..{expected - 1}",
                code="provider_unavailable",
                details={"provider": self.provider},
            )
        return vectors

    def batch_api(self) -> OpenAIBatchClient:
        """OpenAI's ``/files`` + ``/batches`` on the same endpoint, key, model, width and HTTP client."""
        if self.provider == "azure_openai":
            raise BatchNotSupported(
                "embedding.provider 'azure_openai' is not served by the batch client (Azure runs batches on "
                "separate global-batch deployments); ingest without batch=True",
                details={"provider": self.provider},
            )
        return OpenAIBatchClient(
            provider=self.provider,
            api_base=self._api_base,
            model=self.model,
            dim=self.dim,
            dimensions=self._output_dim,
            embedding_key=self.key,
            headers=self._headers,
            http=self._http,
            secrets=self._secrets,
            max_retries=self._config.max_retries,
            timeout=self._config.timeout,
            backoff_base=self.backoff_base,
        )

"""The Cohere, Voyage and Jina rerank APIs over raw HTTP.

Raw HTTP because the three are one request each, and one code path keeps their retry policy
(``rerank.max_retries`` on top of the first attempt, 429/5xx only, ``Retry-After`` honoured), their
per-attempt timeout and their error redaction identical. Every request goes through the host's
``http_client_factory("reranker")`` client when it supplies one; the engine never closes that client.
"""

from __future__ import annotations

from typing import Any, Final

import httpx

from context_engine.config import RerankConfig
from context_engine.errors import ConfigError, ProviderError
from context_engine.providers.failures import status_failure, transport_failure
from context_engine.providers.http import HttpClientFactory, HttpClientHolder
from context_engine.providers.redact import secret_of
from context_engine.providers.retry import with_retries
from context_engine.rerank.base import Reranker, RerankResult

PURPOSE: Final = "reranker"

#: provider -> (default base URL, path, default model, name of the "how many" field, results key)
_APIS: dict[str, tuple[str, str, str, str, str]] = {
    "cohere": ("https://api.cohere.com", "/v2/rerank", "rerank-v3.5", "top_n", "results"),
    "voyage": ("https://api.voyageai.com", "/v1/rerank", "rerank-2.5-lite", "top_k", "data"),
    "jina": ("https://api.jina.ai", "/v1/rerank", "jina-reranker-v2-base-multilingual", "top_n", "results"),
}


class HttpReranker(Reranker):
    """``POST {base_url}{path}`` with the query and the passages; scores mapped back by ``index``."""

    backoff_base: float = 0.25

    def __init__(self, config: RerankConfig, http_client_factory: HttpClientFactory | None = None):
        if config.provider not in _APIS:
            raise ConfigError(f"HttpReranker does not serve provider {config.provider!r}")
        self.provider = config.provider
        base, path, default_model, self._count_field, self._results_key = _APIS[config.provider]
        self._api_key = secret_of(config.api_key)
        if not self._api_key and config.base_url is None:
            raise ConfigError(f"rerank.api_key is required for provider {config.provider!r} (CE_RERANK__API_KEY).")
        self.model = config.model or default_model
        self._url = (config.base_url or base).rstrip("/") + path
        self._config = config
        self._secrets = (self._api_key,) if self._api_key else ()
        self._http = HttpClientHolder(http_client_factory, PURPOSE, config.timeout)

    def _payload(self, query: str, passages: list[str]) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self.model, "query": query, "documents": passages}
        payload[self._count_field] = len(passages)
        if self.provider == "jina":
            payload["return_documents"] = False
        if self.provider == "voyage":
            payload["truncation"] = True
        return payload

    async def rerank(self, query: str, passages: list[str]) -> RerankResult:
        if not passages:
            return RerankResult([])
        client = self._http.get()
        payload = self._payload(query, passages)
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        what = f"{self.provider} rerank"

        async def attempt() -> httpx.Response:
            try:
                response = await client.post(self._url, json=payload, headers=headers, timeout=self._config.timeout)
            except httpx.TransportError as exc:
                raise transport_failure(what, exc, self._secrets) from exc
            if response.status_code >= 300:
                raise status_failure(what, response.status_code, response.content, response.headers,
                                     secrets=self._secrets)  # fmt: skip
            return response

        response = await with_retries(
            what, attempt, max_retries=self._config.max_retries, secrets=self._secrets, backoff_base=self.backoff_base
        )
        return self._parse(response, len(passages))

    def _parse(self, response: httpx.Response, count: int) -> RerankResult:
        scores: list[float | None] = [None] * count
        try:
            data = response.json()
            for item in data[self._results_key]:
                index = int(item["index"])
                if not 0 <= index < count:
                    raise ValueError("index out of range")
                scores[index] = min(1.0, max(0.0, float(item["relevance_score"])))
        except (ValueError, KeyError, TypeError):
            raise ProviderError(
                f"{self.provider} rerank returned a reply that is not a rerank result", code="provider_unavailable"
            ) from None
        usage = data.get("usage") if isinstance(data, dict) else None
        tokens = int(usage.get("total_tokens") or 0) if isinstance(usage, dict) else 0
        return RerankResult(scores, tokens)

    async def aclose(self) -> None:
        await self._http.aclose()

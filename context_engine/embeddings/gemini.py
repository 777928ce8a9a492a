"""Gemini embeddings (API key) and Vertex AI embeddings (application default credentials).

Both go through the ``google-genai`` SDK (the ``gemini`` extra), which speaks both services: the
Gemini API's ``models/{model}:batchEmbedContents`` and Vertex AI's
``projects/{project}/locations/{location}/publishers/google/models/{model}:...``. The SDK's own
retries stay off so retries, backoff and error codes match every other remote provider; it runs on
the host's httpx client when ``http_client_factory("embeddings")`` supplies one. The client
construction and error reading shared with the Gemini LLM are in :mod:`context_engine.providers.genai`.
"""

from __future__ import annotations

from typing import Any

import httpx

from context_engine.config import EmbeddingConfig
from context_engine.embeddings.base import InputKind
from context_engine.embeddings.remote import ModelTable, RemoteEmbedder, require_api_key
from context_engine.errors import ConfigError
from context_engine.providers.failures import BatchTooLarge
from context_engine.providers.genai import GenaiTarget, build_genai_client, genai_failure, import_genai, vertex_target
from context_engine.providers.http import HttpClientFactory

GEMINI_DEFAULT_MODEL = "gemini-embedding-001"
#: per-input cap in tokens of the Gemini and Vertex embedding models (the provider table)
GEMINI_MAX_INPUT_TOKENS = 2048
#: inputs one batchEmbedContents request may carry (the provider table); more is refused unsent
GEMINI_MAX_BATCH_ITEMS = 100
GEMINI_NATIVE_DIMS: dict[str, int] = {
    "gemini-embedding-001": 3072,
    "text-embedding-004": 768,
    "text-embedding-005": 768,
    "text-multilingual-embedding-002": 768,
}
_TASK_TYPES: dict[str, str] = {"document": "RETRIEVAL_DOCUMENT", "query": "RETRIEVAL_QUERY"}


class GeminiEmbedder(RemoteEmbedder):
    """``gemini`` (Gemini API, ``embedding.api_key``) and ``vertex_ai`` (project, location, ADC).

    Documents and queries use the retrieval task types; ``autoTruncate`` is off on Vertex so an
    input over the cap is refused, never embedded from its head.
    """

    models = ModelTable(GEMINI_DEFAULT_MODEL, GEMINI_MAX_INPUT_TOKENS, GEMINI_NATIVE_DIMS)

    def __init__(self, config: EmbeddingConfig, http_client_factory: HttpClientFactory | None = None):
        if config.provider not in ("gemini", "vertex_ai"):
            raise ConfigError(f"GeminiEmbedder does not serve provider {config.provider!r}")
        self._genai = import_genai()
        if config.provider == "vertex_ai":
            self._target = vertex_target(config.api_key, config.project, config.location, config.base_url,
                                         config.timeout)  # fmt: skip
        else:
            self._target = GenaiTarget(False, require_api_key(config), None, None, config.base_url, config.timeout)
        super().__init__(config, http_client_factory, self._target.api_key)
        self.size(flexible=True)

    def _new_client(self) -> Any:
        return build_genai_client(self._genai, self._target, self._http.get())

    def _options(self, kind: InputKind) -> Any:
        options = self.sized({"task_type": _TASK_TYPES[kind]}, "output_dimensionality")
        if self._target.vertex:
            options["auto_truncate"] = False
        return self._genai.types.EmbedContentConfig(**options)

    def check_batch(self, texts: list[str]) -> None:
        if len(texts) > GEMINI_MAX_BATCH_ITEMS:
            raise BatchTooLarge(
                f"{self.provider} embeds at most {GEMINI_MAX_BATCH_ITEMS} inputs per request; got {len(texts)}",
                details={"provider": self.provider, "batch_size": len(texts)},
            )

    async def request(self, texts: list[str], kind: InputKind) -> list[list[float]]:
        """One ``embed_content`` call (within ``GEMINI_MAX_BATCH_ITEMS``)."""
        try:
            response = await self._sdk(self._new_client).aio.models.embed_content(model=self.model, contents=texts,
                                                                  config=self._options(kind))  # fmt: skip
        except httpx.TransportError as exc:  # includes the per-attempt timeout
            raise self.unreachable(exc) from exc
        except Exception as exc:
            raise genai_failure(self.provider, f"{self.provider} embeddings request", exc, self._secrets,
                                details={"provider": self.provider}, batch_size=len(texts)) from None  # fmt: skip
        embeddings = getattr(response, "embeddings", None) or []
        try:
            return [[float(x) for x in item.values] for item in embeddings]
        except (TypeError, AttributeError):
            raise self.unreadable("an embeddings list") from None

    async def aclose(self) -> None:
        """Close the HTTP client only when we built it; a host-supplied client stays open."""
        client, self._client = self._client, None
        if client is not None:
            client.close()  # the SDK's idle sync client; the async one is ours or the host's
        await self._http.aclose()

"""Gemini embeddings (API key) and Vertex AI embeddings (application default credentials).

Both go through the ``google-genai`` SDK (the ``gemini`` extra), which speaks both services: the
Gemini API's ``models/{model}:batchEmbedContents`` and Vertex AI's
``projects/{project}/locations/{location}/publishers/google/models/{model}:...``. The SDK's own
retries stay off so retries, backoff and error codes match every other remote provider; it runs on
the host's httpx client when ``http_client_factory("embeddings")`` supplies one. Also home of the
client construction and error reading that the Gemini LLM shares.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from context_engine.config import EmbeddingConfig
from context_engine.embeddings.base import Embedder, InputKind
from context_engine.embeddings.openai_compat import (
    BatchTooLarge,
    HttpClientFactory,
    HttpClientHolder,
    RetryableFailure,
    check_vectors,
    estimate_tokens,
    failure_for_status,
    redact,
    require_api_key,
    resolve_dim,
    transport_failure,
    with_retries,
)
from context_engine.errors import ConfigError, ProviderError

log = logging.getLogger("context_engine.embeddings.gemini")

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
INSTALL_HINT = 'pip install "pg-context-engine[gemini]"'
_TASK_TYPES: dict[str, str] = {"document": "RETRIEVAL_DOCUMENT", "query": "RETRIEVAL_QUERY"}


def import_genai() -> Any:
    try:
        from google import genai
    except ImportError as exc:
        raise ImportError(f"The gemini and vertex_ai providers need the google-genai SDK: {INSTALL_HINT}") from exc
    return genai


@dataclass(frozen=True)
class GenaiTarget:
    """Which service the SDK talks to and how it signs in (``vertex`` = ADC, else the API key)."""

    vertex: bool
    api_key: str | None
    project: str | None
    location: str | None
    base_url: str | None
    timeout: float


def vertex_target(api_key: Any, project: str | None, location: str | None, base_url: str | None,
                  timeout: float) -> GenaiTarget:  # fmt: skip
    """Where ``vertex_ai`` goes: the project and region as configured, else ``GOOGLE_CLOUD_PROJECT`` /
    ``GOOGLE_CLOUD_LOCATION`` (else the SDK finds them from ADC). An ``api_key`` with no project
    anywhere is Vertex express mode; beside a project it is ignored (the SDK refuses the pair)."""
    project = project or os.environ.get("GOOGLE_CLOUD_PROJECT") or None
    location = location or os.environ.get("GOOGLE_CLOUD_LOCATION") or None
    key = api_key.get_secret_value() if hasattr(api_key, "get_secret_value") else api_key
    if key and project:
        log.info("vertex_ai: api_key is ignored because a project is set (application default credentials)")
        key = None
    return GenaiTarget(True, key or None, project, location, base_url, timeout)


def build_genai_client(genai: Any, target: GenaiTarget, http_client: httpx.AsyncClient) -> Any:
    """A ``genai.Client`` with the SDK's retries off, a per-attempt timeout and ``http_client``.

    Every input is passed explicitly, so ``GOOGLE_API_KEY``/``GOOGLE_GENAI_USE_VERTEXAI`` in the
    environment cannot redirect a configured provider. Vertex credentials are resolved by the SDK
    from application default credentials on the first request.
    """
    options = genai.types.HttpOptions(
        base_url=target.base_url,
        timeout=max(1, int(target.timeout * 1000)),
        retry_options=None,
        httpx_async_client=http_client,
    )
    if target.vertex and target.api_key:  # express mode: a key and no project
        return genai.Client(vertexai=True, api_key=target.api_key, http_options=options)
    if target.vertex:
        return genai.Client(vertexai=True, project=target.project, location=target.location, http_options=options)
    return genai.Client(vertexai=False, api_key=target.api_key, http_options=options)


@dataclass(frozen=True)
class GenaiFailure:
    """An SDK exception read as HTTP: status 0 means nothing was answered (a transport failure)."""

    status: int
    body: Any
    headers: Mapping[str, str] | None


def read_genai_error(exc: BaseException) -> GenaiFailure | None:
    """The status, body and headers of a ``google.genai.errors.APIError``; None for any other exception."""
    from google.genai import errors

    if not isinstance(exc, errors.APIError):
        return None
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    body = exc.details if exc.details else {"error": {"message": exc.message or ""}}
    return GenaiFailure(int(exc.code or 0), body, headers if isinstance(headers, Mapping) else None)


def credentials_failure(
    provider: str, exc: BaseException, retryable: Callable[[str], Exception] = RetryableFailure
) -> Exception | None:
    """What a failure to obtain Vertex credentials means; None when ``exc`` is not one.

    No credentials at all is a deployment mistake (``ConfigError``); a token endpoint that cannot be
    reached may pass on retry (``retryable`` builds what the caller's retry loop retries); a refused
    refresh is final. The exception text is not repeated: it
    can quote the token endpoint's reply.
    """
    from google.auth import exceptions as auth_errors

    if isinstance(exc, auth_errors.DefaultCredentialsError):
        return ConfigError(
            f"provider {provider!r} found no application default credentials: set GOOGLE_APPLICATION_CREDENTIALS, "
            "attach a service account, or run `gcloud auth application-default login`."
        )
    if isinstance(exc, auth_errors.TransportError):
        return retryable(f"{provider} could not reach its token endpoint ({type(exc).__name__})")
    if isinstance(exc, auth_errors.GoogleAuthError):
        return ProviderError(
            f"{provider} could not obtain an access token from application default credentials ({type(exc).__name__})",
            code="provider_rejected",
            details={"provider": provider},
        )
    return None


class GeminiEmbedder(Embedder):
    """``gemini`` (Gemini API, ``embedding.api_key``) and ``vertex_ai`` (project, location, ADC).

    Documents and queries use the retrieval task types; ``autoTruncate`` is off on Vertex so an
    input over the cap is refused, never embedded from its head.
    """

    #: first retry waits about this long, doubling each time (Retry-After on 429 takes precedence)
    backoff_base: float = 0.5

    def __init__(self, config: EmbeddingConfig, http_client_factory: HttpClientFactory | None = None):
        if config.provider not in ("gemini", "vertex_ai"):
            raise ConfigError(f"GeminiEmbedder does not serve provider {config.provider!r}")
        self._genai = import_genai()
        self.provider = config.provider
        self._config = config
        vertex = config.provider == "vertex_ai"
        self.model = config.model or GEMINI_DEFAULT_MODEL
        self.dim, self._output_dimensionality = resolve_dim(config, self.model, GEMINI_NATIVE_DIMS, flexible=True)
        self.max_input_tokens = config.max_input_tokens or GEMINI_MAX_INPUT_TOKENS
        if vertex:
            self._target = vertex_target(config.api_key, config.project, config.location, config.base_url,
                                         config.timeout)  # fmt: skip
        else:
            self._target = GenaiTarget(False, require_api_key(config), None, None, config.base_url, config.timeout)
        api_key = self._target.api_key
        self._secrets = (api_key,) if api_key else ()
        self._http = HttpClientHolder(http_client_factory, config.timeout)
        self._client: Any = None

    def count_tokens(self, text: str) -> int:
        """The estimate: Google's tokenizer is not available offline."""
        return estimate_tokens(text, self._config.token_bytes_ratio)

    def _sdk(self) -> Any:
        if self._client is None:
            self._client = build_genai_client(self._genai, self._target, self._http.get())
        return self._client

    def _options(self, kind: InputKind) -> Any:
        options: dict[str, Any] = {"task_type": _TASK_TYPES[kind]}
        if self._output_dimensionality is not None:
            options["output_dimensionality"] = self._output_dimensionality
        if self._target.vertex:
            options["auto_truncate"] = False
        return self._genai.types.EmbedContentConfig(**options)

    async def embed(self, texts: list[str], *, kind: InputKind = "document") -> list[list[float]]:
        """One request per call (batching is the caller's job, within ``GEMINI_MAX_BATCH_ITEMS``)."""
        if not texts:
            return []
        if len(texts) > GEMINI_MAX_BATCH_ITEMS:
            raise BatchTooLarge(
                f"{self.provider} embeds at most {GEMINI_MAX_BATCH_ITEMS} inputs per request; got {len(texts)}",
                details={"provider": self.provider, "batch_size": len(texts)},
            )
        client = self._sdk()
        options = self._options(kind)

        async def attempt() -> list[list[float]]:
            try:
                response = await client.aio.models.embed_content(model=self.model, contents=list(texts), config=options)
            except httpx.TransportError as exc:  # includes the per-attempt timeout
                raise transport_failure(self.provider, exc, self._secrets) from exc
            except Exception as exc:
                raise self._failure(exc, len(texts)) from None
            embeddings = getattr(response, "embeddings", None) or []
            try:
                return [[float(x) for x in item.values] for item in embeddings]
            except (TypeError, AttributeError):
                raise ProviderError(
                    f"{self.provider} sent a reply that is not an embeddings list",
                    code="provider_unavailable",
                    details={"provider": self.provider},
                ) from None

        vectors = await with_retries(
            self.provider,
            attempt,
            max_retries=self._config.max_retries,
            backoff_base=self.backoff_base,
            secrets=self._secrets,
        )
        return check_vectors(self.provider, vectors, len(texts), self.dim)

    def _failure(self, exc: Exception, batch_size: int) -> Exception:
        failure = read_genai_error(exc)
        if failure is not None:
            return failure_for_status(
                self.provider,
                failure.status,
                failure.body,
                failure.headers,
                batch_size=batch_size,
                secrets=self._secrets,
            )
        auth = credentials_failure(self.provider, exc)
        if auth is not None:
            return auth
        # anything else the SDK raised (a reply it could not read, a rejected argument): final, named by type
        return ProviderError(
            redact(f"{self.provider} embeddings request failed ({type(exc).__name__}: {exc})", self._secrets)[:400],
            code="provider_unavailable",
            details={"provider": self.provider},
        )

    async def aclose(self) -> None:
        """Close the HTTP client only when we built it; a host-supplied client stays open."""
        client, self._client = self._client, None
        if client is not None:
            client.close()  # the SDK's idle sync client; the async one is ours or the host's
        await self._http.aclose()

"""OpenAI's ``/embeddings`` API and the servers that copy it (Azure OpenAI, custom endpoints).

Also home of the pieces every remote provider shares: the retry loop, the mapping of HTTP statuses to
``ProviderError`` codes, ``BatchTooLarge`` and the redaction of the API key from every message, so
the Cohere and Voyage providers fail the same way the OpenAI one does.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

import httpx

from context_engine.config import EmbeddingConfig
from context_engine.embeddings.base import Embedder, InputKind
from context_engine.embeddings.batches import BatchNotSupported
from context_engine.embeddings.tokens import TokenCounter
from context_engine.embeddings.tokens import estimate_tokens as estimate_tokens  # re-exported for the SDK providers
from context_engine.errors import ConfigError, DimensionMismatch, InputTooLarge, ProviderError

if TYPE_CHECKING:
    from context_engine.embeddings.openai_batches import OpenAIBatchClient

T = TypeVar("T")

#: host hook: ``factory("embeddings")`` returns the client to use, or None to let the provider build one
HttpClientFactory = Callable[[str], httpx.AsyncClient | None]
HTTP_CLIENT_PURPOSE = "embeddings"

OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
OPENAI_DEFAULT_MODEL = "text-embedding-3-small"
AZURE_DEFAULT_API_VERSION = "2024-10-21"
#: per-input caps in tokens (the provider table); ``embedding.max_input_tokens`` overrides
OPENAI_MAX_INPUT_TOKENS = 8192
OPENAI_NATIVE_DIMS: dict[str, int] = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}

#: Retry-After is honoured up to this many seconds; a longer wait is better surfaced as unavailable
MAX_RETRY_AFTER_SECONDS = 60.0
MAX_BACKOFF_SECONDS = 8.0
_ERROR_SNIPPET_CHARS = 300

# How providers phrase "this request is too big" in a 400 body (OpenAI, Azure, Cohere, Voyage,
# and the common self-hosted servers).
_TOO_LARGE = re.compile(
    r"too (large|long|many)|maximum context length|context length"
    r"|max(imum)?( allowed)?( number of)? (tokens|texts|inputs|input|batch|array)"
    r"|per (request|batch|call)|batch size|array size|payload|exceeds?",
    re.IGNORECASE,
)


class BatchTooLarge(ProviderError):
    """The provider refused a batch for its size: the caller may halve it and try again.

    Raised for 413, and for 400 whose body says the input/batch is too large, when the batch
    holds more than one input (a single input too large is ``InputTooLarge``: halving cannot help).
    """

    code = "provider_rejected"
    status = 413


class RetryableFailure(Exception):
    """One attempt failed in a way that may pass on retry (429, 5xx, transport error)."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


# --- shared helpers --------------------------------------------------------------------------------


def redact(text: str, secrets: tuple[str, ...]) -> str:
    """Remove every secret from ``text`` (a provider may echo the key back in its error body)."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    return text


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``Retry-After`` (seconds or an HTTP date), capped."""
    if not headers:
        return None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    value: float | None = None
    if "retry-after-ms" in lowered:
        try:
            value = float(lowered["retry-after-ms"]) / 1000.0
        except ValueError:
            value = None
    if value is None and "retry-after" in lowered:
        raw = lowered["retry-after"].strip()
        try:
            value = float(raw)
        except ValueError:
            try:
                value = email.utils.parsedate_to_datetime(raw).timestamp() - time.time()
            except (TypeError, ValueError, IndexError, OverflowError):
                value = None
    if value is None:
        return None
    return min(max(value, 0.0), MAX_RETRY_AFTER_SECONDS)


def error_snippet(body: Any, secrets: tuple[str, ...] = ()) -> str:
    """The provider's own error text, short: enough to act on, never a whole payload.

    Secrets are removed before shortening, so a key cut in half by the limit cannot leak either.
    """
    if isinstance(body, (bytes, bytearray)):
        body = body.decode("utf-8", errors="replace")
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            pass
    text: str
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            found = inner.get("message") or inner.get("detail") or inner.get("error")
            text = str(found) if found else json.dumps(body)
        else:
            text = str(body.get("message") or body.get("detail") or inner)
    elif body is None:
        text = ""
    else:
        text = str(body)
    text = " ".join(redact(text, secrets).split())
    if len(text) > _ERROR_SNIPPET_CHARS:
        text = text[: _ERROR_SNIPPET_CHARS - 3] + "..."
    return text


def failure_for_status(
    provider: str,
    status: int,
    body: Any,
    headers: Mapping[str, str] | None,
    *,
    batch_size: int,
    secrets: tuple[str, ...],
) -> Exception:
    """Map one non-2xx reply to what the retry loop should do with it.

    429 and 5xx are retryable (429 honouring Retry-After); 400/413 saying "too large" is
    ``BatchTooLarge`` (or ``InputTooLarge`` for a single input); any other 4xx is rejected at once.
    """
    snippet = error_snippet(body, secrets)
    message = f"{provider} embeddings request failed with HTTP {status}" + (f": {snippet}" if snippet else "")
    details = {"provider": provider, "status": status}
    if status == 429:
        return RetryableFailure(message, retry_after=parse_retry_after(headers))
    if status >= 500:
        return RetryableFailure(message)
    if status == 413 or (status == 400 and _TOO_LARGE.search(snippet)):
        if batch_size <= 1:
            return InputTooLarge(message, details=details)
        return BatchTooLarge(message, code="provider_rejected", details={**details, "batch_size": batch_size})
    return ProviderError(message, code="provider_rejected", details=details)


def backoff_delay(attempt: int, base: float) -> float:
    """Exponential backoff with a little jitter, so synchronised clients spread out."""
    delay = min(base * (2**attempt), MAX_BACKOFF_SECONDS)
    return delay + random.uniform(0, delay * 0.25)


async def with_retries(
    provider: str,
    attempt: Callable[[], Awaitable[T]],
    *,
    max_retries: int,
    backoff_base: float,
    secrets: tuple[str, ...],
) -> T:
    """Run ``attempt`` once plus up to ``max_retries`` retries of its ``RetryableFailure``s.

    Every other exception propagates from the attempt that raised it; exhaustion raises
    ``ProviderError(code="provider_unavailable")``.
    """
    attempts = max_retries + 1
    last = ""
    for number in range(attempts):
        try:
            return await attempt()
        except RetryableFailure as failure:
            last = failure.message
            if number + 1 >= attempts:
                break
            delay = (
                failure.retry_after
                if failure.retry_after is not None
                else backoff_delay(number, backoff_base)
            )
            await asyncio.sleep(delay)
    raise ProviderError(
        redact(f"{provider} embeddings unavailable after {attempts} attempt(s): {last}", secrets),
        code="provider_unavailable",
        details={"provider": provider, "attempts": attempts},
    )


def transport_failure(provider: str, exc: BaseException, secrets: tuple[str, ...]) -> RetryableFailure:
    """A connection error or timeout: retryable, described by its type (no URL, no headers)."""
    kind = type(exc).__name__
    text = redact(str(exc), secrets)
    return RetryableFailure(f"{provider} could not be reached ({kind}{': ' + text if text else ''})")


def check_vectors(provider: str, vectors: list[list[float]], expected: int, dim: int) -> list[list[float]]:
    """The reply must hold one vector of the configured width per input."""
    if len(vectors) != expected:
        raise ProviderError(
            f"{provider} returned {len(vectors)} embeddings for {expected} inputs",
            code="provider_unavailable",
            details={"provider": provider},
        )
    for vector in vectors:
        if len(vector) != dim:
            raise DimensionMismatch(
                f"{provider} returned {len(vector)}-dimensional vectors but embedding.dim is {dim}; "
                f"set embedding.dim to the model's width (or pick the model that has it).",
                details={"provider": provider, "expected": dim, "actual": len(vector)},
            )
    return vectors


def require_api_key(config: EmbeddingConfig) -> str:
    """The provider's key, or a ConfigError that says which setting to fill."""
    if config.api_key is None or not config.api_key.get_secret_value():
        raise ConfigError(
            f"embedding.api_key is required for provider {config.provider!r} (CE_EMBEDDING__API_KEY)."
        )
    return config.api_key.get_secret_value()


def resolve_dim(
    config: EmbeddingConfig, model: str, native: Mapping[str, int], flexible: bool
) -> tuple[int, int | None]:
    """(width of the vectors, width to ask the provider for or None).

    A user-set ``dim`` is sent only to models that can shorten their output; for others it must
    equal the model's native width, else every reply would be refused later as a mismatch.
    """
    known = native.get(model)
    if config.dim is None:
        if known is None:
            raise ConfigError(
                f"embedding.dim is required for model {model!r} of provider {config.provider!r} "
                f"(its width is not in the built-in table)."
            )
        return known, None
    if flexible:
        return config.dim, config.dim
    if known is not None and config.dim != known:
        raise ConfigError(
            f"embedding.dim is {config.dim} but {model!r} produces {known}-dimensional vectors "
            f"and cannot be shortened."
        )
    return config.dim, None


class HttpClientHolder:
    """Gets the host's client (never closed here) or builds one of our own (closed by ``aclose``)."""

    def __init__(self, factory: HttpClientFactory | None, timeout: float):
        self._factory = factory
        self._timeout = timeout
        self._client: httpx.AsyncClient | None = None
        self._owned = False

    def get(self) -> httpx.AsyncClient:
        if self._client is None:
            supplied = self._factory(HTTP_CLIENT_PURPOSE) if self._factory is not None else None
            if supplied is not None:
                self._client, self._owned = supplied, False
            else:
                self._client, self._owned = httpx.AsyncClient(timeout=self._timeout), True
        return self._client

    async def aclose(self) -> None:
        client, owned = self._client, self._owned
        self._client, self._owned = None, False
        if client is not None and owned:
            await client.aclose()


# --- the OpenAI-compatible provider ----------------------------------------------------------------


class OpenAICompatibleEmbedder(Embedder):
    """``openai``, ``azure_openai`` and ``custom`` (any server speaking OpenAI's ``/embeddings``).

    ``custom`` requires ``base_url``, ``model`` and ``dim``: the width is part of the embedding key
    and of the database column, so it is known up front rather than learnt from a first reply.
    """

    #: first retry waits about this long, doubling each time (Retry-After on 429 takes precedence)
    backoff_base: float = 0.5

    def __init__(self, config: EmbeddingConfig, http_client_factory: HttpClientFactory | None = None):
        if config.provider not in ("openai", "azure_openai", "custom"):
            raise ConfigError(f"OpenAICompatibleEmbedder does not serve provider {config.provider!r}")
        provider = config.provider
        self.provider = provider
        self._config = config
        self._api_key: str | None = None
        self._params: dict[str, str] = {}
        #: the URL before ``/embeddings`` (and, for the batch API, before ``/files`` and ``/batches``)
        self._api_base = (config.base_url or OPENAI_DEFAULT_BASE_URL).rstrip("/")
        if provider == "openai":
            self._api_key = require_api_key(config)
            self.model = config.model or OPENAI_DEFAULT_MODEL
            self._url = f"{self._api_base}/embeddings"
        elif provider == "azure_openai":
            self._api_key = require_api_key(config)
            if not config.base_url or not config.deployment:
                raise ConfigError(
                    "provider 'azure_openai' needs embedding.base_url (https://<resource>.openai.azure.com) "
                    "and embedding.deployment."
                )
            # the model name is part of the embedding key; the deployment name stands in when unset
            self.model = config.model or config.deployment
            deployment = quote(config.deployment, safe="")
            self._url = f"{config.base_url.rstrip('/')}/openai/deployments/{deployment}/embeddings"
            self._params = {"api-version": config.api_version or AZURE_DEFAULT_API_VERSION}
        else:
            if not config.base_url or not config.model or config.dim is None:
                raise ConfigError(
                    "provider 'custom' needs embedding.base_url (the URL before /embeddings), "
                    "embedding.model and embedding.dim."
                )
            self._api_key = config.api_key.get_secret_value() if config.api_key else None
            self.model = config.model
            self._url = f"{config.base_url.rstrip('/')}/embeddings"
        flexible = self.model.startswith("text-embedding-3")
        if provider == "custom" and config.dim is not None:  # always set for custom: refused above otherwise
            self.dim, self._send_dimensions = config.dim, (config.dim if flexible else None)
        else:
            self.dim, self._send_dimensions = resolve_dim(config, self.model, OPENAI_NATIVE_DIMS, flexible)
        self.max_input_tokens = config.max_input_tokens or OPENAI_MAX_INPUT_TOKENS
        self._secrets = (self._api_key,) if self._api_key else ()
        self._http = HttpClientHolder(http_client_factory, config.timeout)
        self._tokens = TokenCounter(config.tokenizer, config.token_bytes_ratio)

    def count_tokens(self, text: str) -> int:
        """cl100k when ``embedding.tokenizer`` allows it (the OpenAI family's own tokenizer), else the estimate."""
        return self._tokens.count(text)

    def _headers(self) -> dict[str, str]:
        if not self._api_key:
            return {}
        if self.provider == "azure_openai":
            return {"api-key": self._api_key}
        return {"Authorization": f"Bearer {self._api_key}"}

    def _payload(self, texts: list[str]) -> dict[str, Any]:
        payload: dict[str, Any] = {"input": texts}
        if self.provider != "azure_openai":  # Azure takes the model from the deployment in the URL
            payload["model"] = self.model
        if self._send_dimensions is not None:
            payload["dimensions"] = self._send_dimensions
        return payload

    async def embed(self, texts: list[str], *, kind: InputKind = "document") -> list[list[float]]:
        """One request per call (batching is the caller's job); OpenAI has no query/document split."""
        if not texts:
            return []
        payload = self._payload(list(texts))
        client = self._http.get()

        async def attempt() -> list[list[float]]:
            try:
                response = await client.post(
                    self._url,
                    params=self._params or None,
                    json=payload,
                    headers=self._headers(),
                    timeout=self._config.timeout,
                )
            except httpx.TransportError as exc:
                raise transport_failure(self.provider, exc, self._secrets) from exc
            if response.status_code >= 300:
                raise failure_for_status(
                    self.provider,
                    response.status_code,
                    response.content,
                    response.headers,
                    batch_size=len(texts),
                    secrets=self._secrets,
                )
            return self._parse(response, len(texts))

        vectors = await with_retries(
            self.provider,
            attempt,
            max_retries=self._config.max_retries,
            backoff_base=self.backoff_base,
            secrets=self._secrets,
        )
        return check_vectors(self.provider, vectors, len(texts), self.dim)

    def _parse(self, response: httpx.Response, expected: int) -> list[list[float]]:
        """Vectors ordered by each item's ``index`` (the API does not promise reply order)."""
        try:
            data = response.json()["data"]
            items = sorted(data, key=lambda item: int(item.get("index", 0)))
            vectors = [[float(x) for x in item["embedding"]] for item in items]
            indices = [int(item.get("index", i)) for i, item in enumerate(items)]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ProviderError(
                f"{self.provider} sent a reply that is not an embeddings list ({type(exc).__name__})",
                code="provider_unavailable",
                details={"provider": self.provider},
            ) from None
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
        from context_engine.embeddings.openai_batches import OpenAIBatchClient

        return OpenAIBatchClient(
            provider=self.provider,
            api_base=self._api_base,
            model=self.model,
            dim=self.dim,
            dimensions=self._send_dimensions,
            embedding_key=self.key,
            headers=self._headers,
            http=self._http,
            secrets=self._secrets,
            max_retries=self._config.max_retries,
            timeout=self._config.timeout,
            backoff_base=self.backoff_base,
        )

    async def aclose(self) -> None:
        """Close the client only when we built it; a host-supplied client stays open."""
        await self._http.aclose()

"""What every remote embedding provider shares: its settings checked the same way, one request per
``embed`` call under the shared retry policy, and the reply checked for one vector per input.

A provider subclasses :class:`RemoteEmbedder` with its defaults (model, width table, per-input cap)
and implements :meth:`RemoteEmbedder.request` (one attempt: vectors, or a ``RetryableFailure`` /
``ProviderError`` from :mod:`context_engine.providers.failures`).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from context_engine.config import EmbeddingConfig
from context_engine.embeddings.base import Embedder, InputKind
from context_engine.embeddings.tokens import estimate_tokens
from context_engine.errors import ConfigError, DimensionMismatch, ProviderError
from context_engine.providers.failures import status_failure, transport_failure
from context_engine.providers.http import HttpClientFactory, HttpClientHolder
from context_engine.providers.retry import RetryableFailure, with_retries

HTTP_CLIENT_PURPOSE: Final = "embeddings"


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


@dataclass(frozen=True)
class ModelTable:
    """What a provider knows of its models: the default one, its input cap, and the native widths of
    the models it knows (any other needs ``embedding.dim``)."""

    default_model: str
    max_input_tokens: int
    native_dims: Mapping[str, int] = field(default_factory=dict)


class RemoteEmbedder(Embedder):
    """An embedder behind a network API: retries, key redaction and the reply check done once."""

    #: the provider's models; ``embedding.model`` / ``max_input_tokens`` override its defaults
    models: ClassVar[ModelTable]
    #: first retry waits about this long, doubling each time (Retry-After on 429 takes precedence)
    backoff_base: float = 0.5

    def __init__(self, config: EmbeddingConfig, http_client_factory: HttpClientFactory | None, api_key: str | None):
        self.provider = config.provider
        self._config = config
        self._api_key = api_key
        self._secrets: tuple[str, ...] = (api_key,) if api_key else ()
        self.model = config.model or self.models.default_model
        self.max_input_tokens = config.max_input_tokens or self.models.max_input_tokens
        self._http = HttpClientHolder(http_client_factory, HTTP_CLIENT_PURPOSE, config.timeout)
        self._client: Any = None
        #: the width sent to a model that can shorten its output (None: its native width)
        self._output_dim: int | None = None

    def size(self, flexible: bool) -> None:
        """Set ``dim`` (and the width to ask for) from the settings and the model's table entry."""
        self.dim, self._output_dim = resolve_dim(self._config, self.model, self.models.native_dims, flexible)

    def sized(self, options: dict[str, Any], key: str) -> dict[str, Any]:
        """``options`` with the shortened output width under the API's own ``key``, when one is asked for."""
        if self._output_dim is not None:
            options[key] = self._output_dim
        return options

    def _sdk(self, build: Callable[[], Any]) -> Any:
        """The provider's SDK client, made by ``build`` on first use and kept until :meth:`aclose`
        (an embedder that speaks HTTP itself never asks for one)."""
        if self._client is None:
            self._client = build()
        return self._client

    def sdk_failure(self, exc: Exception, status: Any, body: Any, headers: Any, batch_size: int) -> Exception:
        """An SDK's error: with no HTTP status the provider was not reached (retryable), else what the
        status means (:meth:`status_error`)."""
        if not status:
            return self.unreachable(exc)
        return self.status_error(int(status), body, headers, batch_size)

    def count_tokens(self, text: str) -> int:
        """The estimate: a provider without an offline tokenizer is budgeted from UTF-8 bytes."""
        return estimate_tokens(text, self._config.token_bytes_ratio)

    @abc.abstractmethod
    async def request(self, texts: list[str], kind: InputKind) -> list[list[float]]:
        """One attempt at embedding ``texts`` (retried by :meth:`embed` when it is retryable)."""

    async def embed(self, texts: list[str], *, kind: InputKind = "document") -> list[list[float]]:
        """One request per call (batching is the caller's job)."""
        if not texts:
            return []
        self.check_batch(texts)
        vectors = await with_retries(
            f"{self.provider} embeddings",
            lambda: self.request(list(texts), kind),
            max_retries=self._config.max_retries,
            backoff_base=self.backoff_base,
            secrets=self._secrets,
            details={"provider": self.provider},
        )
        return check_vectors(self.provider, vectors, len(texts), self.dim)

    def status_error(self, status: int, body: Any, headers: Mapping[str, str] | None, batch_size: int) -> Exception:
        """A non-2xx reply: retryable, a batch to halve, an input too large, or rejected."""
        return status_failure(f"{self.provider} embeddings request", status, body, headers, secrets=self._secrets,
                              details={"provider": self.provider}, batch_size=batch_size)  # fmt: skip

    def unreachable(self, exc: BaseException) -> RetryableFailure:
        return transport_failure(self.provider, exc, self._secrets)

    def unreadable(self, what: str) -> ProviderError:
        """A 2xx reply that is not what the API promises: the provider is not working, try later."""
        return ProviderError(
            f"{self.provider} sent a reply that is not {what}",
            code="provider_unavailable",
            details={"provider": self.provider},
        )

    def check_batch(self, texts: list[str]) -> None:
        """Refuse a batch the provider's API can never take, before anything is sent."""

    async def aclose(self) -> None:
        """Close the HTTP client only when we built it; a host-supplied client stays open."""
        self._client = None
        await self._http.aclose()

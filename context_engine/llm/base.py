"""The one small interface every LLM provider implements, and what the providers share.

Why so small: the engine asks a model for exactly two things (split a question, judge passages),
both as JSON checked against a schema. ``complete`` sends one conversation and returns the text of
the reply, how it was constrained (``mode``) and what it cost (``tokens``); validating the JSON and
re-asking once is :func:`context_engine.llm.structured.structured_call`'s job, identical for every
provider. ``complete_with_images`` is the one other door: a page image and a prompt in, text out
(``vision_llm`` transcribing scanned pages), each provider sending the image in its own wire format.
"""

from __future__ import annotations

import abc
import asyncio
import base64
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import httpx

from context_engine.embeddings.openai_compat import backoff_delay, error_snippet, parse_retry_after, redact
from context_engine.errors import ConfigError, ProviderError

T = TypeVar("T")

#: host hook: ``factory(purpose)`` returns a long-lived client it owns, or None for an engine-built one
HttpClientFactory = Callable[[str], "httpx.AsyncClient | None"]
#: ``native``/``tool``: the provider enforced the schema; ``prompt``: only asked for in words;
#: ``text``: no schema was sent
Mode = Literal["native", "tool", "prompt", "text"]


@dataclass
class LLMReply:
    text: str
    tokens: int
    mode: Mode
    #: the model stopped at ``max_tokens``: the text is cut short (a transcription would be incomplete)
    truncated: bool = False
    #: ``tokens`` split into what was sent and what the model wrote, where the provider reports both
    input_tokens: int = 0
    output_tokens: int = 0


#: image types every provider of the seam accepts (others are converted to PNG before they are sent)
IMAGE_MIMES = frozenset({"image/png", "image/jpeg", "image/webp"})


@dataclass(frozen=True)
class ImageInput:
    """One image sent to a model with a prompt: its bytes and its mime type."""

    data: bytes
    mime: str

    def __post_init__(self) -> None:
        if self.mime not in IMAGE_MIMES:
            raise ValueError(f"image type {self.mime!r} cannot be sent to a model; use one of {sorted(IMAGE_MIMES)}")

    @property
    def base64(self) -> str:
        return base64.b64encode(self.data).decode("ascii")


class LLMClient(abc.ABC):
    """A chat model. ``messages`` alternate ``user``/``assistant``; ``system`` is sent apart."""

    provider: str
    model: str

    @abc.abstractmethod
    async def complete(
        self,
        *,
        system: str,
        messages: list[dict[str, str]],
        schema: dict[str, Any] | None = None,
        schema_name: str = "reply",
    ) -> LLMReply:
        """One reply. With ``schema``, JSON is requested the strongest way the endpoint supports."""

    async def complete_with_images(self, *, system: str, prompt: str, images: Sequence[ImageInput]) -> LLMReply:
        """A text reply to ``prompt`` about ``images`` (one user turn). Providers that can send images
        override this in their own wire format; any other refuses, naming itself."""
        raise ConfigError(
            f"provider {self.provider!r} cannot send images to its model", code="images_unsupported"
        )

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release a client this provider built itself (never a host-supplied one)."""


class ClientHolder:
    """The host's client for ``purpose`` (never closed here) or one built and later closed by us.

    The factory is asked once per holder; a holder lives as long as the provider that owns it.
    """

    def __init__(self, factory: HttpClientFactory | None, purpose: str, timeout: float):
        self._factory = factory
        self._purpose = purpose
        self._timeout = timeout
        self._client: httpx.AsyncClient | None = None
        self._owned = False

    @property
    def owned(self) -> bool:
        return self._owned

    def get(self) -> httpx.AsyncClient:
        if self._client is None:
            supplied = self._factory(self._purpose) if self._factory is not None else None
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


class Retryable(Exception):
    """One attempt failed in a way another attempt may not (429, 5xx, connection error, timeout)."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


async def with_retries(
    what: str,
    attempt: Callable[[], Awaitable[T]],
    *,
    max_retries: int,
    secrets: tuple[str, ...],
    backoff_base: float = 0.5,
) -> T:
    """``attempt`` once plus up to ``max_retries`` retries of its ``Retryable`` failures.

    Any other exception propagates at once; exhaustion is ``ProviderError(provider_unavailable)``.
    """
    attempts = max_retries + 1
    last = ""
    for number in range(attempts):
        try:
            return await attempt()
        except Retryable as failure:
            last = failure.message
            if number + 1 >= attempts:
                break
            delay = failure.retry_after if failure.retry_after is not None else backoff_delay(number, backoff_base)
            await asyncio.sleep(delay)
    raise ProviderError(
        redact(f"{what} unavailable after {attempts} attempt(s): {last}", secrets),
        code="provider_unavailable",
        details={"attempts": attempts},
    )


def status_failure(what: str, response: httpx.Response, secrets: tuple[str, ...]) -> Exception:
    """A non-2xx reply as the retry loop sees it: 429/5xx retryable, any other status final."""
    snippet = error_snippet(response.content, secrets)
    message = f"{what} failed with HTTP {response.status_code}" + (f": {snippet}" if snippet else "")
    if response.status_code == 429:
        return Retryable(message, retry_after=parse_retry_after(response.headers))
    if response.status_code >= 500:
        return Retryable(message)
    return ProviderError(message, code="provider_rejected", details={"status": response.status_code})


def transport_failure(what: str, exc: BaseException, secrets: tuple[str, ...]) -> Retryable:
    """A connection error or a per-attempt timeout, named by its type (no URL, no headers)."""
    text = redact(str(exc), secrets)
    return Retryable(f"{what} could not be reached ({type(exc).__name__}{': ' + text if text else ''})")


def secret_of(value: Any) -> str | None:
    """The plain text of a ``SecretStr`` (or None), kept out of every repr and message."""
    if value is None:
        return None
    plain = value.get_secret_value() if hasattr(value, "get_secret_value") else str(value)
    return plain or None


def json_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {"Content-Type": "application/json", **headers}

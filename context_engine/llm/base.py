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
import base64
import json
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from context_engine.config import LLMConfig
from context_engine.errors import ConfigError, ProviderError
from context_engine.providers.http import HttpClientFactory as HttpClientFactory  # its former home
from context_engine.providers.redact import secret_of

log = logging.getLogger("context_engine.llm")

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


def require_api_key(config: LLMConfig) -> str:
    """``llm.api_key`` in plain text, or a ConfigError naming the setting to fill."""
    key = secret_of(config.api_key)
    if not key:
        raise ConfigError(f"llm.api_key is required for provider {config.provider!r} (CE_LLM__API_KEY).")
    return key


def schema_instructions(schema: dict[str, Any]) -> str:
    """How the schema is asked for in words when the endpoint cannot enforce it."""
    return (
        "\n\nReply with a single JSON object and nothing else (no prose, no code fence). "
        "It must validate against this JSON Schema:\n" + json.dumps(schema, separators=(",", ":"))
    )


def mark_schema_refused(failure: Exception, parameter: re.Pattern[str], invalid: re.Pattern[str]) -> Exception:
    """Flag a 400 that names the structured-output ``parameter`` (and not an ``invalid`` schema):
    the endpoint cannot take the native schema, so one downgrade is worth trying."""
    if (
        isinstance(failure, ProviderError)
        and failure.details.get("status") == 400
        and parameter.search(failure.message)
        and not invalid.search(failure.message)
    ):
        failure.details["schema_refused"] = True
    return failure


#: per provider module, the endpoints (provider, base URL, model...) that refused the native schema
_DOWNGRADES: list[set[tuple[str, ...]]] = []


def downgrade_memo() -> set[tuple[str, ...]]:
    """A provider module's memo of refusals, forgotten by :func:`reset_native_schema_support`."""
    memo: set[tuple[str, ...]] = set()
    _DOWNGRADES.append(memo)
    return memo


def reset_native_schema_support() -> None:
    """Let every provider rediscover native schema support (after an SDK, model or endpoint upgrade)."""
    for memo in _DOWNGRADES:
        memo.clear()


async def native_first(
    send: Callable[[Mode], Awaitable[LLMReply]],
    *,
    memo: set[tuple[str, ...]],
    key: tuple[str, ...],
    fallback: Mode,
    warning: str,
    native: bool = True,
) -> LLMReply:
    """The reply with the schema sent natively, unless this endpoint refused that parameter before;
    on a refusal (``schema_refused``) the ``fallback`` mode is used, now and for the rest of the
    process, and the downgrade is logged once at WARNING. ``native=False``: the fallback only."""
    if native and key not in memo:
        try:
            return await send("native")
        except ProviderError as exc:
            if not exc.details.get("schema_refused"):
                raise
        log.warning(warning)
        memo.add(key)
    return await send(fallback)

"""Anthropic's Messages API through the official SDK (the ``anthropic`` extra).

Why the SDK here when OpenAI-compatible chat is raw HTTP: it classifies Anthropic's retryable
failures (429, 529 overloaded) and honours their ``Retry-After`` itself, so ``max_retries`` is
simply handed to it. The SDK line is pinned below 1.0: 1.x is built on another HTTP stack and
cannot take the ``httpx`` client a host supplies through ``http_client_factory("llm")``.

The key and endpoint always come from ``LLMConfig`` (``ANTHROPIC_API_KEY``/``ANTHROPIC_BASE_URL``
are never consulted), and the SDK's ``x-stainless-*`` telemetry headers are not sent.

JSON replies: ``output_config.format`` (a JSON Schema the service enforces). A service or model
that refuses that parameter gets a forced, strict tool whose input schema is the same schema; the
downgrade is remembered per base URL and model for the process.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Final

from context_engine.config import LLMConfig
from context_engine.errors import ProviderError
from context_engine.llm.base import (
    ImageInput,
    LLMClient,
    LLMReply,
    Mode,
    downgrade_memo,
    mark_schema_refused,
    native_first,
    require_api_key,
)
from context_engine.providers.http import HttpClientFactory, HttpClientHolder
from context_engine.providers.redact import redact
from context_engine.providers.sdk import import_sdk

ANTHROPIC_DEFAULT_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_DEFAULT_MODEL = "claude-haiku-4-5"
PURPOSE: Final = "llm"
_TELEMETRY = (
    "X-Stainless-Lang",
    "X-Stainless-Package-Version",
    "X-Stainless-OS",
    "X-Stainless-Arch",
    "X-Stainless-Runtime",
    "X-Stainless-Runtime-Version",
    "X-Stainless-Async",
    "x-stainless-retry-count",
    "x-stainless-read-timeout",
    "x-stainless-timeout",
)
_SCHEMA_PARAM = re.compile(r"output_config|output_format|\bformat\b", re.IGNORECASE)
_INVALID_SCHEMA = re.compile(r"invalid schema|schema is invalid", re.IGNORECASE)

_tool_only = downgrade_memo()


class AnthropicLLM(LLMClient):
    """Claude through ``AsyncAnthropic``, on the host's httpx client when one is supplied."""

    provider = "anthropic"

    def __init__(self, config: LLMConfig, http_client_factory: HttpClientFactory | None = None):
        self._sdk_module = import_sdk("anthropic", needed_by="The anthropic LLM provider needs the Anthropic SDK",
                                      extra="anthropic")  # fmt: skip
        self._config = config
        self._api_key = require_api_key(config)
        self.model = config.model or ANTHROPIC_DEFAULT_MODEL
        self._base_url = (config.base_url or ANTHROPIC_DEFAULT_BASE_URL).rstrip("/")
        self._secrets = (self._api_key,)
        self._http = HttpClientHolder(http_client_factory, PURPOSE, config.timeout)
        self._client: Any = None

    def _sdk(self) -> Any:
        if self._client is None:
            self._client = self._sdk_module.AsyncAnthropic(
                api_key=self._api_key,
                base_url=self._base_url,
                timeout=self._config.timeout,
                max_retries=self._config.max_retries,
                http_client=self._http.get(),
            )
        return self._client

    async def complete(
        self,
        *,
        system: str,
        messages: list[dict[str, str]],
        schema: dict[str, Any] | None = None,
        schema_name: str = "reply",
    ) -> LLMReply:
        if schema is None:
            return await self._send(system, messages, None, schema_name, "text")
        return await native_first(
            lambda mode: self._send(system, messages, schema, schema_name, mode),
            memo=_tool_only,
            key=(self._base_url, self.model),
            fallback="tool",
            warning="llm provider anthropic refused output_config.format; using a forced tool from now on",
        )

    async def complete_with_images(self, *, system: str, prompt: str, images: Sequence[ImageInput]) -> LLMReply:
        """Images as base64 ``image`` blocks, then the prompt, in one user turn."""
        blocks: list[dict[str, Any]] = [
            {"type": "image", "source": {"type": "base64", "media_type": image.mime, "data": image.base64}}
            for image in images
        ]
        blocks.append({"type": "text", "text": prompt})
        return await self._send(system, [{"role": "user", "content": blocks}], None, "reply", "text")

    async def _send(
        self, system: str, messages: list[dict[str, Any]], schema: dict[str, Any] | None, name: str, mode: Mode
    ) -> LLMReply:
        sdk = self._sdk_module
        kwargs: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self._config.max_tokens,
            "temperature": self._config.temperature,
            "system": system,
            "messages": messages,
            "extra_headers": {name_: sdk.Omit() for name_ in _TELEMETRY},
        }
        if mode == "native":
            kwargs["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
        elif mode == "tool":
            kwargs["tools"] = [
                {"name": name, "description": "Return the reply.", "input_schema": schema, "strict": True}
            ]
            kwargs["tool_choice"] = {"type": "tool", "name": name}
        try:
            message = await self._sdk().messages.create(**kwargs)
        except sdk.APIStatusError as exc:
            text = redact(_describe(exc), self._secrets)
            status = exc.status_code
            code = "provider_rejected" if 400 <= status < 500 and status != 429 else "provider_unavailable"
            failure = ProviderError(f"anthropic chat failed with HTTP {status}: {text}", code=code,
                                    details={"status": status})  # fmt: skip
            if mode == "native":
                mark_schema_refused(failure, _SCHEMA_PARAM, _INVALID_SCHEMA)
            raise failure from None
        except sdk.APIConnectionError as exc:  # includes APITimeoutError (per-attempt timeout)
            raise ProviderError(
                f"anthropic chat could not be reached ({type(exc).__name__})", code="provider_unavailable"
            ) from None
        usage = getattr(message, "usage", None)
        sent, wrote = int(getattr(usage, "input_tokens", 0) or 0), int(getattr(usage, "output_tokens", 0) or 0)
        tokens = sent + wrote
        split: dict[str, Any] = {"input_tokens": sent, "output_tokens": wrote}
        if mode == "tool":
            for block in message.content:
                if getattr(block, "type", None) == "tool_use":
                    return LLMReply(json.dumps(block.input), tokens, mode, **split)
            return LLMReply("", tokens, mode, **split)
        text = "".join(getattr(b, "text", "") for b in message.content if getattr(b, "type", None) == "text")
        if getattr(message, "stop_reason", None) == "refusal":
            raise ProviderError("anthropic chat: the model refused the request", code="provider_rejected")
        return LLMReply(text, tokens, mode, truncated=getattr(message, "stop_reason", None) == "max_tokens", **split)

    async def aclose(self) -> None:
        # the SDK's own close() would close the httpx client it was given, which may be the host's
        self._client = None
        await self._http.aclose()


def _describe(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return " ".join(str(inner["message"]).split())[:300]
    return " ".join(str(getattr(exc, "message", "") or "").split())[:300]

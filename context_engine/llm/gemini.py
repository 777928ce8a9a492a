"""Gemini chat (``gemini``, API key) and the same models on Vertex AI (``vertex_ai``, ADC).

Through the ``google-genai`` SDK (the ``gemini`` extra), sharing the client construction of the
Gemini embedder: the SDK's retries are off and ours run instead (``max_retries`` on top of the
first attempt, 429/5xx retried, ``Retry-After`` honoured), the timeout is per attempt, and the
host's ``http_client_factory("llm")`` client carries the requests when one is supplied.

JSON replies: ``response_json_schema`` with the JSON MIME type, which the service enforces. An
endpoint or model that refuses that parameter (an error naming it, not an invalid schema) gets the
schema written into the system prompt instead; the downgrade is logged once at WARNING and
remembered per provider, base URL and model for the process.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

import httpx

from context_engine.config import LLMConfig
from context_engine.errors import ConfigError, ProviderError
from context_engine.llm.base import (
    ImageInput,
    LLMClient,
    LLMReply,
    Mode,
    downgrade_memo,
    mark_schema_refused,
    native_first,
    require_api_key,
    schema_instructions,
)
from context_engine.providers.failures import transport_failure
from context_engine.providers.genai import GenaiTarget, build_genai_client, genai_failure, import_genai, vertex_target
from context_engine.providers.http import HttpClientFactory, HttpClientHolder
from context_engine.providers.retry import with_retries

GEMINI_DEFAULT_MODEL = "gemini-2.5-flash"
PURPOSE: Final = "llm"
#: an error that names the structured-output parameter (a downgrade is worth trying)
_SCHEMA_PARAM = re.compile(
    r"response_?json_?schema|responseJsonSchema|response_?schema|responseSchema|response_?mime_?type"
    r"|responseMimeType|json mode|structured output",
    re.IGNORECASE,
)
_INVALID_SCHEMA = re.compile(r"invalid schema|schema is invalid|invalid json schema", re.IGNORECASE)
#: finish reasons that mean the model declined rather than answered
_REFUSALS = frozenset({"SAFETY", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII", "RECITATION", "IMAGE_SAFETY"})

_prompt_only = downgrade_memo()


class GeminiLLM(LLMClient):
    """``generateContent`` on the Gemini API or on Vertex AI."""

    #: first retry waits about this long, doubling (a 429's Retry-After takes precedence)
    backoff_base: float = 0.5

    def __init__(self, config: LLMConfig, http_client_factory: HttpClientFactory | None = None):
        if config.provider not in ("gemini", "vertex_ai"):
            raise ConfigError(f"GeminiLLM does not serve provider {config.provider!r}")
        self._genai = import_genai()
        self.provider = config.provider
        self._config = config
        self.model = config.model or GEMINI_DEFAULT_MODEL
        self._target = (
            vertex_target(config.api_key, config.project, config.location, config.base_url, config.timeout)
            if config.provider == "vertex_ai"
            else GenaiTarget(False, require_api_key(config), None, None, config.base_url, config.timeout)
        )
        api_key = self._target.api_key
        self._secrets = (api_key,) if api_key else ()
        self._memo_key = (self.provider, config.base_url or "", self.model)
        self._http = HttpClientHolder(http_client_factory, PURPOSE, config.timeout)
        self._client: Any = None

    def _sdk(self) -> Any:
        if self._client is None:
            self._client = build_genai_client(self._genai, self._target, self._http.get())
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
            return await self._send(system, messages, None, "text")
        return await native_first(
            lambda mode: self._send(system, messages, schema, mode),
            memo=_prompt_only,
            key=self._memo_key,
            fallback="prompt",
            warning=f"llm provider {self.provider} refused response_json_schema; using the schema in the prompt "
            "for this endpoint and model from now on",
        )

    def _request(self, system: str, messages: list[dict[str, str]], schema: dict[str, Any] | None, mode: Mode) -> Any:
        types = self._genai.types
        contents = [
            types.Content(
                role="model" if message["role"] == "assistant" else "user",
                parts=[types.Part(text=message["content"])],
            )
            for message in messages
        ]
        options: dict[str, Any] = {
            "system_instruction": system + (schema_instructions(schema) if schema and mode == "prompt" else ""),
            "temperature": self._config.temperature,
            "max_output_tokens": self._config.max_tokens,
        }
        if mode == "native":
            options["response_mime_type"] = "application/json"
            options["response_json_schema"] = schema
        return contents, types.GenerateContentConfig(**options)

    async def complete_with_images(self, *, system: str, prompt: str, images: Sequence[ImageInput]) -> LLMReply:
        """Images as inline-data parts, then the prompt, in one user turn."""
        types = self._genai.types
        parts = [types.Part.from_bytes(data=image.data, mime_type=image.mime) for image in images]
        parts.append(types.Part(text=prompt))
        contents, options = self._request(system, [], None, "text")
        return await self._call([types.Content(role="user", parts=parts), *contents], options, "text")

    async def _send(
        self, system: str, messages: list[dict[str, str]], schema: dict[str, Any] | None, mode: Mode
    ) -> LLMReply:
        contents, options = self._request(system, messages, schema, mode)
        return await self._call(contents, options, mode)

    async def _call(self, contents: list[Any], options: Any, mode: Mode) -> LLMReply:
        client = self._sdk()
        what = f"{self.provider} chat"

        async def attempt() -> Any:
            try:
                return await client.aio.models.generate_content(model=self.model, contents=contents, config=options)
            except httpx.TransportError as exc:  # includes every per-attempt timeout
                raise transport_failure(what, exc, self._secrets) from exc
            except Exception as exc:
                raise self._failure(what, exc, mode) from None

        response = await with_retries(
            what, attempt, max_retries=self._config.max_retries, secrets=self._secrets, backoff_base=self.backoff_base
        )
        return self._reply(response, mode)

    def _failure(self, what: str, exc: Exception, mode: Mode) -> Exception:
        failure = genai_failure(self.provider, what, exc, self._secrets)
        return mark_schema_refused(failure, _SCHEMA_PARAM, _INVALID_SCHEMA) if mode == "native" else failure

    def _reply(self, response: Any, mode: Mode) -> LLMReply:
        usage = getattr(response, "usage_metadata", None)
        tokens = int(getattr(usage, "total_token_count", 0) or 0)
        feedback = getattr(response, "prompt_feedback", None)
        candidates = getattr(response, "candidates", None) or []
        finish = str(getattr(candidates[0], "finish_reason", "") or "") if candidates else ""
        if getattr(feedback, "block_reason", None) or finish.rsplit(".", 1)[-1] in _REFUSALS:
            raise ProviderError(f"{self.provider} chat: the model refused the request", code="provider_rejected")
        if not candidates:
            raise ProviderError(f"{self.provider} chat returned no candidate", code="provider_unavailable")
        parts = getattr(getattr(candidates[0], "content", None), "parts", None) or []
        text = "".join(
            part.text for part in parts if getattr(part, "text", None) and not getattr(part, "thought", None)
        )
        truncated = finish.rsplit(".", 1)[-1] == "MAX_TOKENS"
        return LLMReply(
            text=text,
            tokens=tokens,
            mode=mode,
            truncated=truncated,
            input_tokens=int(getattr(usage, "prompt_token_count", 0) or 0),
            output_tokens=int(getattr(usage, "candidates_token_count", 0) or 0),
        )

    async def aclose(self) -> None:
        """Close the HTTP client only when we built it; a host-supplied client stays open."""
        client, self._client = self._client, None
        if client is not None:
            client.close()  # the SDK's idle sync client; the async one is ours or the host's
        await self._http.aclose()

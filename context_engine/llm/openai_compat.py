"""OpenAI-compatible chat over httpx: ``openai``, ``azure_openai`` and ``custom`` (any ``base_url``).

Raw HTTP rather than the ``openai`` SDK: the engine already speaks this wire format for embeddings,
the retry policy (429 and 5xx, ``Retry-After`` honoured, ``max_retries`` on top of the first
attempt, a per-attempt timeout) stays identical for every remote call, and the host's
``http_client_factory("llm")`` client is used exactly as given.

JSON replies: ``response_format`` ``json_schema`` with ``strict`` first. An endpoint that refuses
the *parameter* (an error naming ``response_format``/``json_schema``, not an invalid schema) gets
``json_object`` with the schema written into the system prompt instead; that downgrade is logged
once at WARNING and remembered per provider, base URL and model for the process, so the refusal is
paid once. :func:`reset_native_schema_support` forgets it (after an endpoint upgrade).
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
)
from context_engine.llm.base import schema_instructions as schema_instructions  # its former home
from context_engine.providers.failures import status_failure, transport_failure
from context_engine.providers.http import HttpClientFactory, HttpClientHolder
from context_engine.providers.openai_wire import OPENAI_DEFAULT_BASE_URL, auth_headers, azure_deployment_url
from context_engine.providers.redact import secret_of
from context_engine.providers.retry import with_retries

OPENAI_DEFAULT_MODEL = "gpt-4o-mini"
PURPOSE: Final = "llm"

#: an error that names the structured-output parameter (a downgrade is worth trying)
_SCHEMA_PARAM = re.compile(r"response_format|json_schema|structured output", re.IGNORECASE)
#: ... unless it says the schema itself is wrong: that is a bug to fix, not to work around
_INVALID_SCHEMA = re.compile(r"invalid schema|schema is invalid|invalid_json_schema", re.IGNORECASE)

_prompt_only = downgrade_memo()


class OpenAICompatibleLLM(LLMClient):
    """Chat completions on OpenAI, Azure OpenAI or any server that copies the API."""

    #: first retry waits about this long, doubling (a 429's Retry-After takes precedence)
    backoff_base: float = 0.5

    def __init__(self, config: LLMConfig, http_client_factory: HttpClientFactory | None = None):
        if config.provider not in ("openai", "azure_openai", "custom"):
            raise ConfigError(f"OpenAICompatibleLLM does not serve provider {config.provider!r}")
        self.provider = config.provider
        self._config = config
        self._api_key = secret_of(config.api_key)
        self._params: dict[str, str] = {}
        if config.provider == "openai":
            if not self._api_key:
                raise ConfigError("llm.api_key is required for provider 'openai' (CE_LLM__API_KEY).")
            self.model = config.model or OPENAI_DEFAULT_MODEL
            self._url = f"{(config.base_url or OPENAI_DEFAULT_BASE_URL).rstrip('/')}/chat/completions"
        elif config.provider == "azure_openai":
            if not self._api_key or not config.base_url or not config.deployment:
                raise ConfigError(
                    "provider 'azure_openai' needs llm.api_key, llm.base_url (https://<resource>.openai.azure.com) "
                    "and llm.deployment."
                )
            self.model = config.model or config.deployment
            self._url, self._params = azure_deployment_url(config.base_url, config.deployment, "chat/completions",
                                                           config.api_version)  # fmt: skip
        else:
            if not config.base_url or not config.model:
                raise ConfigError(
                    "provider 'custom' needs llm.base_url (the URL before /chat/completions) and llm.model."
                )
            self.model = config.model
            self._url = f"{config.base_url.rstrip('/')}/chat/completions"
        self._secrets = (self._api_key,) if self._api_key else ()
        self._memo_key = (self.provider, self._url, self.model)
        self._http = HttpClientHolder(http_client_factory, PURPOSE, config.timeout)

    def _headers(self) -> dict[str, str]:
        return auth_headers(self.provider, self._api_key)

    def _payload(
        self, system: str, messages: list[dict[str, Any]], schema: dict[str, Any] | None, name: str, native: bool
    ) -> dict[str, Any]:
        if schema is not None and not native:
            system += schema_instructions(schema)
        payload: dict[str, Any] = {
            "messages": [{"role": "system", "content": system}, *messages],
            "temperature": self._config.temperature,
        }
        # OpenAI's current models take max_completion_tokens; compatible servers know max_tokens
        payload["max_completion_tokens" if self.provider == "openai" else "max_tokens"] = self._config.max_tokens
        if self.provider != "azure_openai":  # Azure takes the model from the deployment in the URL
            payload["model"] = self.model
        if schema is not None:
            payload["response_format"] = (
                {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
                if native
                else {"type": "json_object"}
            )
        return payload

    async def complete(
        self,
        *,
        system: str,
        messages: list[dict[str, str]],
        schema: dict[str, Any] | None = None,
        schema_name: str = "reply",
    ) -> LLMReply:
        if schema is None:
            return await self._send(system, messages, None, schema_name, False)

        def send(mode: Mode) -> Any:
            return self._send(system, messages, schema, schema_name, mode == "native")

        return await native_first(
            send,
            memo=_prompt_only,
            key=self._memo_key,
            fallback="prompt",
            warning=f"llm provider {self.provider} refused the json_schema response format; using json_object "
            "with the schema in the prompt for this endpoint from now on",
        )

    async def complete_with_images(self, *, system: str, prompt: str, images: Sequence[ImageInput]) -> LLMReply:
        """Images as ``image_url`` parts holding ``data:`` URLs, then the prompt, in one user message."""
        parts: list[dict[str, Any]] = [
            {"type": "image_url", "image_url": {"url": f"data:{image.mime};base64,{image.base64}"}} for image in images
        ]
        parts.append({"type": "text", "text": prompt})
        return await self._send(system, [{"role": "user", "content": parts}], None, "reply", False)

    async def _send(
        self, system: str, messages: list[dict[str, Any]], schema: dict[str, Any] | None, name: str, native: bool
    ) -> LLMReply:
        payload = self._payload(system, messages, schema, name, native)
        client = self._http.get()
        what = f"{self.provider} chat"

        async def attempt() -> httpx.Response:
            try:
                response = await client.post(
                    self._url,
                    params=self._params or None,
                    json=payload,
                    headers=self._headers(),
                    timeout=self._config.timeout,
                )
            except httpx.TransportError as exc:  # includes every per-attempt timeout
                raise transport_failure(what, exc, self._secrets) from exc
            if response.status_code >= 300:
                failure = status_failure(what, response.status_code, response.content, response.headers,
                                         secrets=self._secrets)  # fmt: skip
                raise mark_schema_refused(failure, _SCHEMA_PARAM, _INVALID_SCHEMA) if native else failure
            return response

        response = await with_retries(
            what, attempt, max_retries=self._config.max_retries, secrets=self._secrets, backoff_base=self.backoff_base
        )
        mode = "text" if schema is None else ("native" if native else "prompt")
        return self._parse(response, mode)

    def _parse(self, response: httpx.Response, mode: Any) -> LLMReply:
        try:
            data = response.json()
            choice = data["choices"][0]
            message = choice["message"]
            usage = data.get("usage") or {}
        except (ValueError, KeyError, IndexError, TypeError):
            raise ProviderError(
                f"{self.provider} chat returned a reply that is not a chat completion",
                code="provider_unavailable",
            ) from None
        if message.get("refusal"):
            raise ProviderError(f"{self.provider} chat: the model refused the request", code="provider_rejected")
        tokens = int(usage.get("total_tokens") or 0) or int(usage.get("prompt_tokens") or 0) + int(
            usage.get("completion_tokens") or 0
        )
        truncated = choice.get("finish_reason") == "length"
        return LLMReply(
            text=str(message.get("content") or ""),
            tokens=tokens,
            mode=mode,
            truncated=truncated,
            input_tokens=int(usage.get("prompt_tokens") or 0),
            output_tokens=int(usage.get("completion_tokens") or 0),
        )

    async def aclose(self) -> None:
        await self._http.aclose()

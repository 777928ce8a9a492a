"""Amazon Bedrock chat through ``boto3``'s Converse API (the ``bedrock`` extra).

Requests are signed with the AWS credential chain (environment, profile, instance or task role);
there is no key setting. boto3 is synchronous, so each call runs in a worker thread and the event
loop never waits on it. botocore's own retries are off and ours run instead (``max_retries`` on
top of the first attempt, throttling and 5xx retried, ``Retry-After`` honoured when sent); its
connect and read timeouts are the per-attempt ``timeout``. boto3 brings its own HTTP stack, so a
host's ``http_client_factory`` does not apply to this provider.

JSON replies, strongest first: Converse ``outputConfig`` (a JSON Schema the service enforces) when
the installed botocore can send it; a forced tool whose input schema is the schema when the service
refuses ``outputConfig`` (``strict`` where botocore can send it: ``mode="tool"``; otherwise the model
is only asked to fill the tool: ``mode="prompt"``). A service-side downgrade is logged once at
WARNING and remembered per region, endpoint and model for the process.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
from collections.abc import Sequence
from typing import Any

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
    schema_instructions,
)
from context_engine.providers.http import HttpClientFactory
from context_engine.providers.redact import redact
from context_engine.providers.retry import RetryableFailure, parse_retry_after, with_retries
from context_engine.providers.sdk import import_sdk

_NEEDS = "The bedrock LLM provider needs boto3"
_SCHEMA_PARAM = re.compile(r"outputConfig|textFormat|json_schema|structured output", re.IGNORECASE)
_INVALID_SCHEMA = re.compile(r"invalid schema|schema is invalid|invalid json schema", re.IGNORECASE)
#: error codes another attempt may get past (besides HTTP 429 and 5xx)
_RETRYABLE_CODES = frozenset(
    {
        "ThrottlingException",
        "ServiceUnavailableException",
        "ModelNotReadyException",
        "ModelTimeoutException",
        "InternalServerException",
    }
)
_REFUSALS = frozenset({"guardrail_intervened", "content_filtered"})

_tool_only = downgrade_memo()


class BedrockLLM(LLMClient):
    """A Bedrock model (``llm.model``: a model or inference-profile id) in ``llm.region``."""

    provider = "bedrock"
    #: first retry waits about this long, doubling (a Retry-After header takes precedence)
    backoff_base: float = 0.5

    def __init__(self, config: LLMConfig, http_client_factory: HttpClientFactory | None = None):
        boto3 = import_sdk("boto3", needed_by=_NEEDS, extra="bedrock")
        botocore_config = import_sdk("botocore.config", needed_by=_NEEDS, extra="bedrock")
        botocore_session = import_sdk("botocore.session", needed_by=_NEEDS, extra="bedrock")
        self._errors = import_sdk("botocore.exceptions", needed_by=_NEEDS, extra="bedrock")
        self._config = config
        if not config.model:
            raise ConfigError("llm.model is required for provider 'bedrock' (a Bedrock model or inference-profile id).")
        self.model = config.model
        # AWS_REGION is what AWS's own runtimes set; botocore by itself reads only AWS_DEFAULT_REGION and profiles
        self._session = boto3.session.Session(region_name=config.region or os.environ.get("AWS_REGION") or None)
        self.region = self._session.region_name
        if not self.region:
            raise ConfigError("llm.region is required for provider 'bedrock' (or set AWS_REGION).")
        self._client_config = botocore_config.Config(
            connect_timeout=config.timeout,
            read_timeout=config.timeout,
            retries={"total_max_attempts": 1, "mode": "standard"},
        )
        converse = botocore_session.get_session().get_service_model("bedrock-runtime").operation_model("Converse")
        tool_spec = converse.input_shape.members["toolConfig"].members["tools"].member.members["toolSpec"]
        #: what the installed botocore can send (Converse gained both in botocore 1.43)
        self.native_schema = "outputConfig" in converse.input_shape.members
        self.strict_tools = "strict" in tool_spec.members
        self._memo_key = (self.region, config.base_url or "", self.model)
        self._lock = threading.Lock()
        self._client: Any = None
        self._secrets: tuple[str, ...] = ()

    def _sdk(self) -> Any:
        """Built on first use, in the worker thread (credential lookup may touch the network)."""
        with self._lock:
            if self._client is None:
                credentials = self._session.get_credentials()
                if credentials is None:
                    raise ConfigError(
                        "provider 'bedrock' found no AWS credentials: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                        "AWS_PROFILE, or run where an instance or task role is attached."
                    )
                frozen = credentials.get_frozen_credentials()
                self._secrets = tuple(s for s in (frozen.secret_key, frozen.token) if s)
                self._client = self._session.client(
                    "bedrock-runtime",
                    region_name=self.region,
                    endpoint_url=self._config.base_url,
                    config=self._client_config,
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
            key=self._memo_key,
            fallback="tool" if self.strict_tools else "prompt",
            warning="llm provider bedrock refused outputConfig; using a forced tool for this model from now on",
            native=self.native_schema,
        )

    def _request(
        self, system: str, messages: list[dict[str, str]], schema: dict[str, Any] | None, name: str, mode: Mode
    ) -> dict[str, Any]:
        if schema is not None and mode == "prompt":
            system += schema_instructions(schema)
        request: dict[str, Any] = {
            "modelId": self.model,
            "system": [{"text": system}],
            "messages": [{"role": m["role"], "content": [{"text": m["content"]}]} for m in messages],
            "inferenceConfig": {"maxTokens": self._config.max_tokens, "temperature": self._config.temperature},
        }
        if mode == "native":
            request["outputConfig"] = {
                "textFormat": {
                    "type": "json_schema",
                    "structure": {"jsonSchema": {"schema": json.dumps(schema), "name": name}},
                }
            }
        elif schema is not None:
            spec: dict[str, Any] = {"name": name, "description": "Return the reply.", "inputSchema": {"json": schema}}
            if mode == "tool":
                spec["strict"] = True
            request["toolConfig"] = {"tools": [{"toolSpec": spec}], "toolChoice": {"tool": {"name": name}}}
        return request

    async def complete_with_images(self, *, system: str, prompt: str, images: Sequence[ImageInput]) -> LLMReply:
        """Images as Converse ``image`` blocks (raw bytes; botocore encodes them), then the prompt."""
        request = self._request(system, [], None, "reply", "text")
        blocks: list[dict[str, Any]] = [
            {"image": {"format": image.mime.split("/", 1)[1], "source": {"bytes": image.data}}} for image in images
        ]
        blocks.append({"text": prompt})
        request["messages"] = [{"role": "user", "content": blocks}]
        return await self._send_request(request, "text")

    async def _send(
        self, system: str, messages: list[dict[str, str]], schema: dict[str, Any] | None, name: str, mode: Mode
    ) -> LLMReply:
        return await self._send_request(self._request(system, messages, schema, name, mode), mode)

    async def _send_request(self, request: dict[str, Any], mode: Mode) -> LLMReply:
        async def attempt() -> dict[str, Any]:
            return await asyncio.to_thread(self._converse_once, request, mode)

        reply = await with_retries(
            "bedrock chat",
            attempt,
            max_retries=self._config.max_retries,
            secrets=self._secrets,
            backoff_base=self.backoff_base,
        )
        return self._reply(reply, mode)

    def _converse_once(self, request: dict[str, Any], mode: Mode) -> dict[str, Any]:
        errors = self._errors
        try:
            return dict(self._sdk().converse(**request))
        except errors.ClientError as exc:
            raise self._client_failure(exc.response, mode) from None
        except (errors.NoCredentialsError, errors.PartialCredentialsError) as exc:
            raise ConfigError(f"provider 'bedrock' could not sign the request ({type(exc).__name__})") from None
        except (
            errors.EndpointConnectionError,
            errors.ConnectionClosedError,
            errors.ConnectTimeoutError,
            errors.ReadTimeoutError,
            errors.HTTPClientError,
        ) as exc:  # includes the per-attempt timeout
            raise RetryableFailure(f"bedrock chat could not be reached ({type(exc).__name__})") from None
        except errors.ParamValidationError as exc:
            raise ProviderError(
                redact(f"bedrock chat request was refused by botocore: {exc}", self._secrets)[:400],
                code="provider_rejected",
            ) from None

    def _client_failure(self, response: dict[str, Any], mode: Mode) -> Exception:
        error = response.get("Error") or {}
        meta = response.get("ResponseMetadata") or {}
        status = int(meta.get("HTTPStatusCode") or 0)
        code = str(error.get("Code") or "")
        text = " ".join(redact(str(error.get("Message") or ""), self._secrets).split())[:300]
        message = f"bedrock chat failed with HTTP {status} ({code})" + (f": {text}" if text else "")
        if status == 429 or status >= 500 or code in _RETRYABLE_CODES:
            return RetryableFailure(message, retry_after=parse_retry_after(meta.get("HTTPHeaders")))
        failure = ProviderError(message, code="provider_rejected", details={"status": status, "error_code": code})
        return mark_schema_refused(failure, _SCHEMA_PARAM, _INVALID_SCHEMA) if mode == "native" else failure

    def _reply(self, reply: dict[str, Any], mode: Mode) -> LLMReply:
        usage = reply.get("usage") or {}
        tokens = int(usage.get("totalTokens") or 0) or int(usage.get("inputTokens") or 0) + int(
            usage.get("outputTokens") or 0
        )
        split: dict[str, Any] = {
            "input_tokens": int(usage.get("inputTokens") or 0),
            "output_tokens": int(usage.get("outputTokens") or 0),
        }
        if reply.get("stopReason") in _REFUSALS:
            raise ProviderError("bedrock chat: the model refused the request", code="provider_rejected")
        try:
            blocks = reply["output"]["message"]["content"]
        except (KeyError, TypeError):
            raise ProviderError(
                "bedrock chat returned a reply that is not a message", code="provider_unavailable"
            ) from None
        if mode in ("tool", "prompt") and any("toolUse" in block for block in blocks):
            tool = next(block["toolUse"] for block in blocks if "toolUse" in block)
            return LLMReply(json.dumps(tool.get("input")), tokens, mode, **split)
        text = "".join(block.get("text", "") for block in blocks if isinstance(block, dict))
        return LLMReply(text, tokens, mode, truncated=reply.get("stopReason") == "max_tokens", **split)

    async def aclose(self) -> None:
        """Close boto3's connection pool (it is always ours: boto3 takes no host client)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

"""``call_llm``: one model call with an optional response schema, and no validation of the reply.

The layer below :func:`context_engine.llm.structured.structured_call`, for a caller that wants the
mechanism (the schema sent the strongest way the provider supports, the reply's ``mode`` and
``tokens``) and reads the text itself.
"""

from __future__ import annotations

from typing import Any

from context_engine.config import LLMConfig
from context_engine.llm.base import HttpClientFactory, LLMClient, LLMReply
from context_engine.llm.factory import build_llm
from context_engine.llm.schema import strict_portable


async def call_llm(
    llm: LLMConfig | LLMClient,
    *,
    user: str | None = None,
    system: str = "",
    messages: list[dict[str, str]] | None = None,
    response_schema: dict[str, Any] | None = None,
    schema_name: str = "reply",
    http_client_factory: HttpClientFactory | None = None,
) -> LLMReply:
    """The reply to ``user`` (or to a whole ``messages`` conversation) under ``system``.

    ``response_schema`` is normalised to the portable subset (``SchemaError`` before any request
    when it falls outside) and sent as ``schema_name``; the reply's ``mode`` says whether the provider
    enforced it (``native``/``tool``) or only took the request in words. The text is not parsed or
    validated here. ``llm`` is a config (a client is built for this call and closed after it) or a
    client the caller keeps.
    """
    if (user is None) == (messages is None):
        raise ValueError("call_llm takes either user= or messages=")
    conversation = messages if messages is not None else [{"role": "user", "content": str(user)}]
    schema = strict_portable(response_schema) if response_schema is not None else None
    if isinstance(llm, LLMConfig):
        client = build_llm(llm, http_client_factory)
        try:
            return await client.complete(system=system, messages=conversation, schema=schema, schema_name=schema_name)
        finally:
            await client.aclose()
    return await llm.complete(system=system, messages=conversation, schema=schema, schema_name=schema_name)

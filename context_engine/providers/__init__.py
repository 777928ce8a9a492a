"""Public helpers of the model-provider seam: schema-enforced calls and the host's HTTP clients."""

from __future__ import annotations

from typing import Literal

from context_engine.llm.base import HttpClientFactory

#: the purposes the engine asks a host's ``http_client_factory`` for a client for
#: (``mcp_oauth``: an mcp tool's OAuth flow and calls, whose MCP SDK needs an ``httpx2.AsyncClient``)
HttpClientPurpose = Literal["llm", "embeddings", "reranker", "tool_http", "mcp_oauth"]

__all__ = ["HttpClientFactory", "HttpClientPurpose"]

"""The HTTP client a provider sends through: the host's when it lends one, else one of our own.

Every remote provider (embedders, LLMs, rerankers) holds one :class:`HttpClientHolder` for its
lifetime; the host's ``http_client_factory(purpose)`` is asked once, and a client it returns is
never closed here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import httpx

#: host hook: ``factory(purpose)`` returns a long-lived client it owns, or None for an engine-built one
HttpClientFactory = Callable[[str], "httpx.AsyncClient | None"]
#: the purposes the engine asks a host's ``http_client_factory`` for a client for
#: (``mcp_oauth``: an mcp tool's OAuth flow and calls, whose MCP SDK needs an ``httpx2.AsyncClient``)
HttpClientPurpose = Literal["llm", "embeddings", "reranker", "tool_http", "mcp_oauth"]


class HttpClientHolder:
    """The host's client for ``purpose`` (never closed here) or one built and later closed by us."""

    def __init__(self, factory: HttpClientFactory | None, purpose: HttpClientPurpose, timeout: float):
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
        """Close the client only when we built it; the next ``get`` builds a fresh one."""
        client, owned = self._client, self._owned
        self._client, self._owned = None, False
        if client is not None and owned:
            await client.aclose()

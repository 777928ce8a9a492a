"""``GET /tools/oauth/callback`` through FastAPI, Flask and Django: the popup page an OAuth provider
returns to after an mcp tool's authorization, against a real authorization server and MCP server.

The page is HTML (not the JSON contract), posts its message only to the origin of the tool's
``oauth.redirect_uri``, runs only its own hashed script, and is never cached; the route needs no
host credentials (the flow's single-use state is the credential). A flow lives on the event loop
that started it, so each adapter's flow is started on the loop that serves that adapter.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlencode

import pytest

from context_engine import ContextEngine
from routing_core import sync_bridge
from tests.conftest import make_config
from tests.fakes.oauth_servers import OAuthServers, follow_authorization, oauth_servers
from tests.test_conformance import CLIENTS, HostLog, fresh_database, host_callables
from tests.test_tools_mcp_oauth import crm_tool
from tests.tools_support import SECRET_KEY

Reply = tuple[int, dict[str, str], str]


@pytest.fixture(scope="module")
def servers() -> Iterator[OAuthServers]:
    with oauth_servers() as running:
        yield running


def _callback(send: Callable[[str], Reply], query: dict[str, str]) -> Reply:
    return send("/context/tools/oauth/callback?" + urlencode(query))


def _message(page: str) -> dict[str, Any]:
    found = re.search(r"var m=(\{.*?\});", page)
    assert found is not None, page
    return json.loads(found.group(1))


def _scenario(servers: OAuthServers, register: Callable[[Any], dict[str, Any]], send: Callable[[str], Reply]) -> None:
    started = register(crm_tool(servers.mcp_url))["authorization"]
    callback = follow_authorization(started["authorization_url"])
    status, headers, page = _callback(send, callback)
    assert status == 200 and headers["content-type"].startswith("text/html")
    if "cache-control" in headers or "content-security-policy" in headers:  # the clients that report them
        assert headers["cache-control"] == "no-store" and headers["referrer-policy"] == "no-referrer"
        assert "script-src 'sha256-" in headers["content-security-policy"]
    message = _message(page)
    assert message["type"] == "mcp-oauth-success" and message["correlation_id"] == started["correlation_id"]
    assert 'postMessage(m,"https://app.example.test")' in page
    assert f"Reference: {started['correlation_id']}" in page
    for secret in servers.provider.issued:
        assert secret not in page
    # the same callback again: the flow is spent, and a page for no flow posts nowhere
    status, headers, page = _callback(send, callback)
    assert status == 200 and headers["content-type"].startswith("text/html")  # the outcome is in the message
    assert _message(page)["code"] == "state_invalid" and "postMessage" not in page
    status, _, page = _callback(send, {"code": "c"})
    assert status == 200 and _message(page)["code"] == "malformed_callback"


def test_the_callback_page_through_flask_and_django(servers: OAuthServers, pg_base_url: str) -> None:
    for adapter in ("flask", "django"):
        with fresh_database(pg_base_url) as url:
            engine = ContextEngine(make_config(url, secret_key=SECRET_KEY))
            auth, principals = host_callables(HostLog())
            with CLIENTS[adapter](engine, auth, principals) as raw:

                def send(path: str) -> Reply:
                    reply = raw("GET", path, None, {})
                    return reply.status, {"content-type": reply.content_type}, reply.raw.decode()

                def register(tool: Any, engine: ContextEngine = engine) -> dict[str, Any]:
                    return sync_bridge.run(engine.register_tool(tool))

                _scenario(servers, register, send)


def test_the_callback_page_through_fastapi(servers: OAuthServers, pg_base_url: str) -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from context_engine import create_router

    with fresh_database(pg_base_url) as url:
        engine = ContextEngine(make_config(url, secret_key=SECRET_KEY))
        auth, principals = host_callables(HostLog())
        app = FastAPI()
        app.include_router(create_router(engine, auth=auth, principals=principals), prefix="/context")
        with TestClient(app) as client:

            def send(path: str) -> Reply:
                answer = client.get(path)
                headers = {k.lower(): v for k, v in answer.headers.items()}
                assert "content-security-policy" in headers
                return answer.status_code, headers, answer.text

            try:
                _scenario(servers, lambda tool: client.portal.call(engine.register_tool, tool), send)
            finally:
                client.portal.call(engine.aclose)

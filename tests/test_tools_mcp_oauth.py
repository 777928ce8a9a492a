"""mcp tools whose server requires OAuth, against a real authorization server and MCP server on 127.0.0.1.

The engine runs the MCP SDK's own OAuth client; these tests drive the whole flow the way a popup
does (register, open the authorization URL, follow the provider's redirect to the callback) and
every documented failure of it, then governed calls with the stored tokens: refreshed when the
server refuses them, a clean ``mcp_oauth_required`` when nothing works, no secret anywhere.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import psycopg
import pytest

from context_engine import TRUSTED, ContextEngine
from context_engine.errors import ConfigError
from context_engine.tools import EgressRefused, ToolConfig, ToolConfigInvalid
from context_engine.tools.mcp_oauth import MESSAGES, McpOAuthRequired, popup_page
from tests import tools_support
from tests.conftest import make_config
from tests.fakes.oauth_servers import OAuthServers, follow_authorization, oauth_servers
from tests.tools_support import table_rows

hook_log = tools_support.hook_log  # a shared fixture
tools_engine = tools_support.tools_engine  # a shared fixture

REDIRECT = "https://app.example.test/connect/callback"


@pytest.fixture
def servers() -> Iterator[OAuthServers]:
    with oauth_servers() as running:
        yield running


def crm_tool(url: str, **oauth: Any) -> ToolConfig:
    return ToolConfig(
        name="lookup",
        kind="mcp",
        description="account manager of a customer",
        config={
            "url": url,
            "tool": "lookup",
            "allowed_hosts": ["127.0.0.1"],
            "timeout": 30,
            "parameters": {"properties": {"customer": {"type": "string"}}, "required": ["customer"]},
            "oauth": {"redirect_uri": REDIRECT, **oauth},
        },
    )


def engine_side(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Every log line but the test's own browser and the fake servers' (they use plain httpx)."""
    theirs = ("httpx", "httpcore")
    return [r.getMessage() for r in caplog.records if r.name.split(".")[0] not in theirs]


async def connected(engine: ContextEngine, servers: OAuthServers) -> dict[str, Any]:
    """Register the tool and complete its authorization the way a popup does."""
    listing = await engine.register_tool(crm_tool(servers.mcp_url))
    started = listing["authorization"]
    assert started["status"] == "authorization_required"
    callback = follow_authorization(started["authorization_url"])
    outcome = await engine.complete_mcp_oauth(callback)
    assert outcome == {
        "type": "mcp-oauth-success",
        "correlation_id": started["correlation_id"],
        "tool_id": listing["tool_id"],
    }
    return listing


async def test_registering_starts_the_flow_and_the_tool_then_runs(
    tools_engine: ContextEngine, servers: OAuthServers, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    listing = await tools_engine.register_tool(crm_tool(servers.mcp_url))
    started = listing["authorization"]
    assert started["status"] == "authorization_required"
    assert started["correlation_id"].startswith("mcpoauth_") and len(started["correlation_id"]) == 9 + 32
    assert started["authorization_url"].startswith(servers.issuer + "/authorize?")
    callback = follow_authorization(started["authorization_url"])
    outcome = await tools_engine.complete_mcp_oauth(callback)
    assert outcome["type"] == "mcp-oauth-success"
    out = await tools_engine.execute_tool("mcp_lookup", {"customer": "acme"}, principals=[])
    assert out["result"]["structured"] == {"customer": "acme", "manager": "R. Okafor"}
    page, _ = popup_page(outcome, "https://app.example.test")
    stored = table_rows(database_url, "SELECT sealed FROM ce_mcp_oauth")
    assert len(stored) == 1
    surfaces = [
        json.dumps(listing),
        json.dumps(outcome),
        json.dumps(out),
        page,
        json.dumps(table_rows(database_url, "SELECT * FROM ce_tool_calls"), default=str),
        bytes(stored[0]["sealed"]).decode("latin-1"),
        *engine_side(caplog),
    ]
    assert servers.provider.issued
    for secret in servers.provider.issued:
        for text in surfaces:
            assert secret not in text


def assert_error(outcome: dict[str, Any], code: str, correlation_id: str | None = None) -> None:
    assert outcome["type"] == "mcp-oauth-error"
    assert outcome["code"] == code
    assert outcome["message"] == MESSAGES[code]
    assert outcome["correlation_id"].startswith("mcpoauth_") and len(outcome["correlation_id"]) == 41
    if correlation_id is not None:
        assert outcome["correlation_id"] == correlation_id
    assert set(outcome) == {"type", "code", "message", "correlation_id"}


async def test_a_declined_consent_is_idp_denied_and_the_providers_words_reach_only_the_log(
    tools_engine: ContextEngine, servers: OAuthServers, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    servers.provider.decision = "deny"
    started = (await tools_engine.register_tool(crm_tool(servers.mcp_url)))["authorization"]
    callback = follow_authorization(started["authorization_url"])
    assert callback["error"] == "access_denied"
    outcome = await tools_engine.complete_mcp_oauth(callback)
    assert_error(outcome, "idp_denied", started["correlation_id"])
    assert "ticket 4711" not in json.dumps(outcome) + popup_page(outcome, "https://app.example.test")[0]
    logged = [m for m in engine_side(caplog) if started["correlation_id"] in m and "ticket 4711" in m]
    assert logged, "the provider's error_description is logged beside the correlation id"
    # the flow is over: the same callback again is an expired attempt, and the tool still needs consent
    assert_error(await tools_engine.complete_mcp_oauth(callback), "state_invalid")
    with pytest.raises(McpOAuthRequired):
        await tools_engine.execute_tool("mcp_lookup", {"customer": "acme"}, principals=[])


async def test_unknown_replayed_and_incomplete_callbacks(tools_engine: ContextEngine, servers: OAuthServers) -> None:
    assert_error(await tools_engine.complete_mcp_oauth({"code": "x", "state": "never-issued"}), "state_invalid")
    assert_error(await tools_engine.complete_mcp_oauth({}), "malformed_callback")
    assert_error(await tools_engine.complete_mcp_oauth({"code": "x", "state": ["", ""]}), "malformed_callback")
    assert_error(await tools_engine.complete_mcp_oauth({"code": "x", "state": "s" * 5000}), "malformed_callback")
    started = (await tools_engine.register_tool(crm_tool(servers.mcp_url)))["authorization"]
    callback = follow_authorization(started["authorization_url"])
    outcome = await tools_engine.complete_mcp_oauth({"state": callback["state"]})  # the code lost on the way
    assert_error(outcome, "malformed_callback", started["correlation_id"])
    # a flow is single-use: the full callback after that is refused too
    assert_error(await tools_engine.complete_mcp_oauth(callback), "state_invalid")


async def test_a_refused_code_exchange_is_token_exchange_failed(
    tools_engine: ContextEngine, servers: OAuthServers, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    servers.provider.refuse_exchange = True
    started = (await tools_engine.register_tool(crm_tool(servers.mcp_url)))["authorization"]
    outcome = await tools_engine.complete_mcp_oauth(follow_authorization(started["authorization_url"]))
    assert_error(outcome, "token_exchange_failed", started["correlation_id"])
    assert "policy rule 9" not in json.dumps(outcome)
    assert any("policy rule 9" in m for m in engine_side(caplog)), "the token endpoint's body is logged"


async def test_an_unreachable_token_endpoint(tools_engine: ContextEngine, servers: OAuthServers) -> None:
    started = (await tools_engine.register_tool(crm_tool(servers.mcp_url)))["authorization"]
    callback = follow_authorization(started["authorization_url"])
    servers.stop_authorization_server()
    outcome = await tools_engine.complete_mcp_oauth(callback)
    assert_error(outcome, "token_endpoint_unreachable", started["correlation_id"])


async def test_tokens_the_server_will_not_accept_are_an_internal_error(
    tools_engine: ContextEngine, servers: OAuthServers
) -> None:
    servers.provider.mint_unusable = True
    started = (await tools_engine.register_tool(crm_tool(servers.mcp_url)))["authorization"]
    outcome = await tools_engine.complete_mcp_oauth(follow_authorization(started["authorization_url"]))
    assert_error(outcome, "internal_error", started["correlation_id"])


async def test_a_refused_access_token_is_refreshed_once(tools_engine: ContextEngine, servers: OAuthServers) -> None:
    await connected(tools_engine, servers)
    servers.provider.revoke_access_tokens()
    out = await tools_engine.execute_tool("mcp_lookup", {"customer": "acme"}, principals=[])
    assert out["result"]["structured"]["manager"] == "R. Okafor"
    assert servers.provider.refreshes == 1


async def test_an_expired_access_token_is_refreshed_before_the_call(
    tools_engine: ContextEngine, servers: OAuthServers, database_url: str
) -> None:
    await connected(tools_engine, servers)
    for n in (1, 2):
        # the access token's lifetime passes (the server would still accept it: only a proactive
        # refresh makes the count move)
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("UPDATE ce_mcp_oauth SET expires_at = extract(epoch FROM now()) - 60")
        out = await tools_engine.execute_tool("mcp_lookup", {"customer": "acme"}, principals=[])
        assert out["result"]["structured"]["manager"] == "R. Okafor"
        assert servers.provider.refreshes == n
    out = await tools_engine.execute_tool("mcp_lookup", {"customer": "acme"}, principals=[])
    assert servers.provider.refreshes == 2  # a token still in its lifetime is used as it is


async def test_a_revoked_grant_fails_cleanly_until_connected_again(
    tools_engine: ContextEngine, servers: OAuthServers, database_url: str, hook_log: tools_support.HookLog
) -> None:
    listing = await connected(tools_engine, servers)
    servers.provider.revoke_everything()
    with pytest.raises(McpOAuthRequired) as refused:
        await tools_engine.execute_tool("mcp_lookup", {"customer": "acme"}, principals=[])
    assert refused.value.code == "mcp_oauth_required" and refused.value.status == 409
    audit = table_rows(database_url, "SELECT outcome, error_message FROM ce_tool_calls ORDER BY started_at")
    assert audit[-1]["outcome"] != "success"
    again = await tools_engine.start_mcp_oauth(listing["tool_id"])
    assert again["status"] == "authorization_required"
    outcome = await tools_engine.complete_mcp_oauth(follow_authorization(again["authorization_url"]))
    assert outcome["type"] == "mcp-oauth-success"
    out = await tools_engine.execute_tool("mcp_lookup", {"customer": "acme"}, principals=[])
    assert out["result"]["structured"]["manager"] == "R. Okafor"
    for secret in servers.provider.issued:
        assert secret not in json.dumps([vars(e) for e in hook_log.events], default=str)


async def test_a_call_before_any_authorization_needs_one(tools_engine: ContextEngine, servers: OAuthServers) -> None:
    await tools_engine.register_tool(crm_tool(servers.mcp_url))  # the popup was never opened
    with pytest.raises(McpOAuthRequired):
        await tools_engine.execute_tool("mcp_lookup", {"customer": "acme"}, principals=[])


async def test_an_authorization_server_the_egress_policy_refuses_is_never_contacted(
    tools_engine: ContextEngine,
) -> None:
    with oauth_servers(issuer_host="localhost") as servers:  # allowed_hosts names only 127.0.0.1
        with pytest.raises(EgressRefused):
            await tools_engine.register_tool(crm_tool(servers.mcp_url))
        assert servers.provider.clients == {}
    assert await tools_engine.list_tools(principals=TRUSTED) == []  # nothing half-registered


async def test_a_bad_oauth_section_is_refused_at_registration(tools_engine: ContextEngine) -> None:
    for oauth in (
        {},
        {"redirect_uri": "ftp://x/cb"},
        {"redirect_uri": "/relative"},
        {"redirect_uri": REDIRECT, "x": 1},
        {"redirect_uri": REDIRECT, "scope": ""},
    ):
        tool = crm_tool("http://127.0.0.1:9/mcp")
        tool.config["oauth"] = oauth
        with pytest.raises(ToolConfigInvalid):
            await tools_engine.register_tool(tool)
    assert await tools_engine.list_tools(principals=TRUSTED) == []


async def test_a_host_client_carries_the_flow_and_the_calls(servers: OAuthServers, database_url: str) -> None:
    sent: list[str] = []

    async def record(request: httpx2.Request) -> None:
        sent.append(f"{request.method} {request.url.path}")

    host_client = httpx2.AsyncClient(event_hooks={"request": [record]}, trust_env=False)
    asked: list[str] = []

    def factory(purpose: str) -> Any:
        asked.append(purpose)
        return host_client if purpose == "mcp_oauth" else None

    config = make_config(database_url, secret_key=tools_support.SECRET_KEY)
    try:
        async with ContextEngine(config, http_client_factory=factory) as engine:
            await connected(engine, servers)
            out = await engine.execute_tool("mcp_lookup", {"customer": "acme"}, principals=[])
            assert out["result"]["structured"]["manager"] == "R. Okafor"
        assert "mcp_oauth" in asked
        assert {"POST /register", "POST /token", "POST /mcp"} <= set(sent)
        assert not host_client.is_closed  # the host's client is the host's to close
    finally:
        await host_client.aclose()


async def test_a_host_client_of_another_library_is_refused(servers: OAuthServers, database_url: str) -> None:
    config = make_config(database_url, secret_key=tools_support.SECRET_KEY)
    async with httpx.AsyncClient() as wrong:
        async with ContextEngine(config, http_client_factory=lambda purpose: wrong) as engine:
            with pytest.raises(ConfigError) as refused:
                await engine.register_tool(crm_tool(servers.mcp_url))
            assert refused.value.code == "invalid_http_client"
            assert await engine.list_tools(principals=TRUSTED) == []

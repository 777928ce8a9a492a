"""A real OAuth authorization server and an MCP server that requires its tokens, both on 127.0.0.1.

The authorization server is the MCP SDK's own (``create_auth_routes``: metadata, dynamic
registration, ``/authorize`` with PKCE, ``/token``, revocation) over a small in-memory provider,
plus an RFC 7662 introspection route. The MCP server is the SDK's ``MCPServer`` with its auth
settings: it publishes protected-resource metadata, answers 401 without a token and checks every
token by asking the authorization server over HTTP. The test plays the browser: it opens the
authorization URL and follows the provider's redirect to the engine's callback.
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.routes import create_auth_routes
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.waiting import until

SCOPE = "crm.read"


@dataclass
class Provider:
    """In-memory ``OAuthAuthorizationServerProvider``; tests steer it through its public fields."""

    #: "approve" redirects back with a code, "deny" with ``error=access_denied``
    decision: str = "approve"
    #: the token endpoint refuses every authorization code
    refuse_exchange: bool = False
    #: tokens are minted but the introspection calls them inactive
    mint_unusable: bool = False
    #: ``expires_in`` of each access token
    access_lifetime: int = 3600
    clients: dict[str, OAuthClientInformationFull] = field(default_factory=dict)
    codes: dict[str, AuthorizationCode] = field(default_factory=dict)
    access: dict[str, AccessToken] = field(default_factory=dict)
    refresh: dict[str, RefreshToken] = field(default_factory=dict)
    #: every secret this server ever handed out (tokens, codes, client secrets)
    issued: list[str] = field(default_factory=list)
    refreshes: int = 0

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.clients[client_info.client_id or ""] = client_info
        if client_info.client_secret:
            self.issued.append(client_info.client_secret)

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        if self.decision == "deny":
            return construct_redirect_uri(
                str(params.redirect_uri),
                error="access_denied",
                error_description="the administrator has not approved this client (ticket 4711)",
                state=params.state,
            )
        code = secrets.token_urlsafe(24)
        self.issued.append(code)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [SCOPE],
            expires_at=time.time() + 300,
            client_id=client.client_id or "",
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client: OAuthClientInformationFull, code: str) -> AuthorizationCode | None:
        return self.codes.get(code)

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(code.code, None)
        if self.refuse_exchange:
            raise TokenError("invalid_grant", "code rejected by policy rule 9 (internal detail)")
        return self._mint(client.client_id or "", code.scopes)

    async def load_refresh_token(self, client: OAuthClientInformationFull, token: str) -> RefreshToken | None:
        found = self.refresh.get(token)
        return found if found is not None and found.client_id == client.client_id else None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self.refreshes += 1
        self.refresh.pop(refresh_token.token, None)
        return self._mint(client.client_id or "", scopes or refresh_token.scopes)

    async def load_access_token(self, token: str) -> AccessToken | None:
        return self.access.get(token)

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    def _mint(self, client_id: str, scopes: list[str]) -> OAuthToken:
        access, refresh = "at-" + secrets.token_urlsafe(24), "rt-" + secrets.token_urlsafe(24)
        self.issued += [access, refresh]
        if not self.mint_unusable:
            self.access[access] = AccessToken(token=access, client_id=client_id, scopes=scopes)
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes)
        return OAuthToken(
            access_token=access, expires_in=self.access_lifetime, refresh_token=refresh, scope=" ".join(scopes)
        )

    def revoke_access_tokens(self) -> None:
        """The server forgets every access token (refresh tokens still work)."""
        self.access.clear()

    def revoke_everything(self) -> None:
        self.access.clear()
        self.refresh.clear()


class IntrospectionVerifier:
    """The MCP server's ``TokenVerifier``: asks the authorization server over HTTP (RFC 7662)."""

    def __init__(self, introspect_url: str):
        self.introspect_url = introspect_url

    async def verify_token(self, token: str) -> AccessToken | None:
        async with httpx.AsyncClient(trust_env=False) as http:
            answer = (await http.post(self.introspect_url, data={"token": token})).json()
        if not answer.get("active"):
            return None
        return AccessToken(token=token, client_id=answer["client_id"], scopes=answer["scope"].split())


def _bound_socket() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


@contextmanager
def _serving(app: Any, sock: socket.socket, name: str) -> Iterator[Any]:
    """Serve ``app`` on ``sock`` in a thread; yields the function that stops it (idempotent)."""
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=name, daemon=True)
    thread.start()
    until(lambda: server.started or not thread.is_alive(), f"the {name} server starting")
    if not server.started:
        raise RuntimeError(f"the {name} server did not start")

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()

    try:
        yield stop
    finally:
        stop()


@dataclass
class OAuthServers:
    provider: Provider
    issuer: str
    mcp_url: str
    #: stops the authorization server (the MCP server keeps running)
    stop_authorization_server: Any = None


@contextmanager
def oauth_servers(*, issuer_host: str = "127.0.0.1") -> Iterator[OAuthServers]:
    """Start the authorization server and the MCP server; ``issuer_host`` names the former in metadata."""
    provider = Provider()
    as_sock, rs_sock = _bound_socket(), _bound_socket()
    issuer = f"http://{issuer_host}:{as_sock.getsockname()[1]}"
    mcp_base = f"http://127.0.0.1:{rs_sock.getsockname()[1]}"

    async def introspect(request: Request) -> JSONResponse:
        token = (await request.form()).get("token")
        found = provider.access.get(str(token))
        if found is None:
            return JSONResponse({"active": False})
        return JSONResponse({"active": True, "client_id": found.client_id, "scope": " ".join(found.scopes)})

    routes = create_auth_routes(
        provider,
        AnyHttpUrl(issuer),
        client_registration_options=ClientRegistrationOptions(enabled=True, valid_scopes=[SCOPE]),
        revocation_options=RevocationOptions(enabled=True),
    )
    authorization_app = Starlette(routes=[*routes, Route("/introspect", introspect, methods=["POST"])])

    mcp = MCPServer(
        "crm",
        auth=AuthSettings(
            issuer_url=AnyHttpUrl(issuer),
            resource_server_url=AnyHttpUrl(f"{mcp_base}/mcp"),
            required_scopes=[SCOPE],
            validate_token_resource=False,
        ),
        token_verifier=IntrospectionVerifier(f"http://127.0.0.1:{as_sock.getsockname()[1]}/introspect"),
    )

    @mcp.tool()
    def lookup(customer: str) -> dict[str, Any]:
        """The account manager of a customer."""
        return {"customer": customer, "manager": "R. Okafor"}

    with _serving(mcp.streamable_http_app(), rs_sock, "mcp-resource"):
        with _serving(authorization_app, as_sock, "oauth-authorization") as stop_authorization:
            yield OAuthServers(provider, issuer, f"{mcp_base}/mcp", stop_authorization)


def follow_authorization(authorization_url: str) -> dict[str, str]:
    """Play the browser: open the authorization URL and read the query of the provider's redirect."""
    with httpx.Client(trust_env=False, follow_redirects=False) as http:
        answer = http.get(authorization_url)
    if answer.status_code not in (302, 303, 307):
        raise AssertionError(f"the authorization server answered {answer.status_code}: {answer.text[:200]}")
    location = httpx.URL(answer.headers["location"])
    return dict(location.params.multi_items())

"""Where an mcp tool's OAuth registration and tokens live: one encrypted row per tool.

It is the MCP SDK's ``TokenStorage`` for one tool, so the SDK's own client (discovery, dynamic
registration, PKCE, refresh) reads and writes the database and nothing else. The blob is sealed
with the tool-config cipher under a purpose-specific associated datum; the access token's expiry
is the only field kept in the clear, because it decides when the SDK refreshes.
"""

from __future__ import annotations

import time
from typing import Any

from mcp.shared.auth import OAuthClientInformationFull, OAuthMetadata, OAuthToken
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.tools.crypto import ConfigCipher

_PURPOSE = "/mcp-oauth"


class McpTokenStore:
    """``TokenStorage`` for one tool: each read and write takes a pooled connection only for its statement."""

    def __init__(self, db: AsyncEngine, cipher: ConfigCipher, tool_id: str):
        self._db, self._cipher, self.tool_id = db, cipher, tool_id
        #: whether this store received tokens (a flow's code exchange worked)
        self.saved_tokens = False

    async def _load(self) -> tuple[dict[str, Any], float | None]:
        async with self._db.connect() as conn:
            row = (
                await conn.execute(
                    text("SELECT sealed, expires_at FROM ce_mcp_oauth WHERE tool_id = CAST(:id AS uuid)"),
                    {"id": self.tool_id},
                )
            ).first()
        if row is None:
            return {}, None
        return self._cipher.decrypt(bytes(row.sealed), self.tool_id + _PURPOSE), row.expires_at

    async def _save(self, state: dict[str, Any], expires_at: float | None) -> None:
        sealed = self._cipher.encrypt(state, self.tool_id + _PURPOSE)
        async with self._db.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO ce_mcp_oauth (tool_id, sealed, expires_at) VALUES (CAST(:id AS uuid), :sealed, :exp) "
                    "ON CONFLICT (tool_id) DO UPDATE SET sealed = EXCLUDED.sealed, "
                    "expires_at = EXCLUDED.expires_at, updated_at = now()"
                ),
                {"id": self.tool_id, "sealed": sealed, "exp": expires_at},
            )

    async def refresh_context(self) -> tuple[OAuthMetadata | None, float | None]:
        """What the SDK needs to refresh without a new discovery: the authorization server's
        metadata (its token endpoint) and when the access token expires (epoch seconds)."""
        state, expires = await self._load()
        metadata = OAuthMetadata.model_validate(state["metadata"]) if "metadata" in state else None
        return metadata, expires

    async def set_metadata(self, metadata: OAuthMetadata) -> None:
        """Keep the authorization server's metadata the flow discovered (refreshes go to its token endpoint)."""
        state, expires = await self._load()
        state["metadata"] = metadata.model_dump(mode="json", exclude_none=True)
        await self._save(state, expires)

    async def authorized(self) -> bool:
        """Whether the tool holds tokens at all (an expired access token with a refresh token counts)."""
        return "tokens" in (await self._load())[0]

    async def get_tokens(self) -> OAuthToken | None:
        state, _ = await self._load()
        return OAuthToken.model_validate(state["tokens"]) if "tokens" in state else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        state, _ = await self._load()
        state["tokens"] = tokens.model_dump(mode="json", exclude_none=True)
        expires = time.time() + tokens.expires_in if tokens.expires_in is not None else None
        await self._save(state, expires)
        self.saved_tokens = True

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        state, _ = await self._load()
        return OAuthClientInformationFull.model_validate(state["client"]) if "client" in state else None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        state, expires = await self._load()
        state["client"] = client_info.model_dump(mode="json", exclude_none=True)
        await self._save(state, expires)

    async def mark_expired(self) -> None:
        """Treat the access token as expired, so the next call refreshes it (a server refused it).

        Epoch second 1, not 0: the SDK reads a zero expiry as "never expires"."""
        async with self._db.begin() as conn:
            await conn.execute(
                text("UPDATE ce_mcp_oauth SET expires_at = 1, updated_at = now() WHERE tool_id = CAST(:id AS uuid)"),
                {"id": self.tool_id},
            )

    async def forget_tokens(self) -> None:
        """Drop the tokens (keep the registration): the next call needs a new authorization."""
        state, _ = await self._load()
        if "tokens" in state:
            del state["tokens"]
            await self._save(state, None)


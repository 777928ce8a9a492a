-- OAuth state of mcp tools whose server requires an authorization (context_engine/tools/mcp_oauth*.py).
--
-- One row per tool: the client registration and the tokens the authorization server issued, as
-- one AES-256-GCM blob under a key derived from the engine's secret_key (the tool's id and a
-- purpose label are the associated data, so neither a tool config nor another tool's blob can be
-- swapped in). Only the expiry of the access token is kept in the clear: it says when to refresh.
-- Deleting the tool deletes its tokens.

CREATE TABLE IF NOT EXISTS ce_mcp_oauth (
    tool_id      uuid        PRIMARY KEY REFERENCES ce_tools (id) ON DELETE CASCADE,
    sealed       bytea       NOT NULL,
    expires_at   double precision,
    updated_at   timestamptz NOT NULL DEFAULT now()
);

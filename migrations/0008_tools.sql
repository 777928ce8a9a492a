-- Governed tools (context_engine/tools/): the registry, single-use approvals and the call audit.
--
-- ce_tools.config is AES-256-GCM ciphertext (version byte, nonce, ciphertext+tag) under a key
-- derived from the engine's secret_key; nothing of a tool's config is stored in the clear except
-- its argument schema (``parameters``), which is what a model is shown anyway.

CREATE TABLE IF NOT EXISTS ce_tools (
    id                uuid        PRIMARY KEY,
    name              text        NOT NULL,
    kind              text        NOT NULL CHECK (kind IN ('http', 'db', 'mcp')),
    call_name         text        NOT NULL,
    description       text        NOT NULL DEFAULT '',
    parameters        jsonb       NOT NULL DEFAULT '{}'::jsonb,
    config            bytea       NOT NULL,
    acl               text[]      NOT NULL DEFAULT '{}',
    requires_approval boolean     NOT NULL DEFAULT false,
    created_at        timestamptz NOT NULL DEFAULT now()
);
-- names are not unique on purpose: two tools may share one, and tool_id says which is meant
CREATE INDEX IF NOT EXISTS ix_ce_tools_call_name ON ce_tools (call_name);

-- One record per gated request: pending -> approved | denied | expired; approved -> consumed (exactly once).
CREATE TABLE IF NOT EXISTS ce_tool_approvals (
    id             uuid        PRIMARY KEY,
    tool_id        uuid,
    call_name      text        NOT NULL,
    request_hash   text        NOT NULL,
    approval_scope text        NOT NULL DEFAULT '',
    principals     text[],
    principals_key text        NOT NULL,
    arguments      text        NOT NULL,
    status         text        NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'consumed', 'expired')),
    approver       text,
    expires_at     timestamptz NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    resolved_at    timestamptz,
    consumed_at    timestamptz
);
-- identical pending requests share one record (a retrying agent gets the same approval_id)
CREATE UNIQUE INDEX IF NOT EXISTS ux_ce_tool_approvals_pending
    ON ce_tool_approvals (request_hash, approval_scope, principals_key)
    WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS ix_ce_tool_approvals_claim
    ON ce_tool_approvals (request_hash, approval_scope)
    WHERE status = 'approved';

-- One row per execute_tool call, written after redaction; arguments/result capped at 50 KB.
CREATE TABLE IF NOT EXISTS ce_tool_calls (
    id             uuid        PRIMARY KEY,
    tool_id        uuid,
    call_name      text        NOT NULL,
    kind           text,
    principals     text[],
    approval_scope text,
    approval_id    uuid,
    arguments      text,
    result         text,
    outcome        text        NOT NULL,
    error_code     text,
    error_message  text,
    started_at     timestamptz NOT NULL,
    duration_ms    double precision NOT NULL
);
CREATE INDEX IF NOT EXISTS ix_ce_tool_calls_started ON ce_tool_calls (started_at);
CREATE INDEX IF NOT EXISTS ix_ce_tool_calls_tool ON ce_tool_calls (tool_id, started_at);

-- Agent -> source links for knowledge queries (context_engine/knowledge/agents.py). Idempotent.
--
-- A link names a document (kind 'document', ref = the document id as text) or a whole collection
-- (kind 'source', ref = the source_id). An agent exists while it has at least one link. Links are
-- configuration, not permissions: every query through an agent still applies the caller's ACL.

CREATE TABLE IF NOT EXISTS ce_agent_links (
    agent_id   text        NOT NULL,
    kind       text        NOT NULL CHECK (kind IN ('document', 'source')),
    ref        text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (agent_id, kind, ref)
);

-- "which agents use this document/collection" (unlinking on delete, audits). Built concurrently, as
-- every index added after the initial schema is, so migrating never locks writers out.
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_ce_agent_links_ref ON ce_agent_links (kind, ref);

-- Graph mode (context_engine/graph/): entities, their chunk-level mentions, relationships and
-- communities, beside the chunks they were read from. OPTIONAL: applied only by
-- `context-engine migrate --graph` (or migrate(..., graph=True)); a plain migrate skips it until then.
--
-- Nothing here carries its own ACL. An entity, relationship or community is visible to a caller only
-- through chunk rows that caller may see (the one ACL + scope predicate on ce_chunks), so a mention
-- names its chunk, a relationship names the chunk it was read from, and a community names every chunk
-- its facts (and so its summary) came from.

-- One row per normalised name (lower-cased, whitespace collapsed). The id is random, so it carries
-- no text and survives output redaction. frequency: distinct chunks that mention the entity.
CREATE TABLE IF NOT EXISTS ce_graph_entities (
    id         uuid        PRIMARY KEY,
    name       text        NOT NULL UNIQUE,
    name_key   text        NOT NULL,
    frequency  integer     NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The type is kept per mention: the type a caller sees is the commonest among the mentions it may see.
CREATE TABLE IF NOT EXISTS ce_graph_mentions (
    entity_id   uuid   NOT NULL REFERENCES ce_graph_entities (id) ON DELETE CASCADE,
    chunk_id    bigint NOT NULL,
    document_id uuid   NOT NULL,
    entity_type text   NOT NULL,
    PRIMARY KEY (entity_id, chunk_id)
);

CREATE TABLE IF NOT EXISTS ce_graph_relationships (
    id            uuid   PRIMARY KEY,
    source_entity uuid   NOT NULL REFERENCES ce_graph_entities (id) ON DELETE CASCADE,
    target_entity uuid   NOT NULL REFERENCES ce_graph_entities (id) ON DELETE CASCADE,
    category      text   NOT NULL,
    label         text   NOT NULL,
    evidence      text   NOT NULL DEFAULT '',
    chunk_id      bigint NOT NULL,
    document_id   uuid   NOT NULL
);

-- Communities are detected within one (source_id, acl) group of chunks, from that group's facts
-- only, so a summary never mixes facts of documents with different readers.
CREATE TABLE IF NOT EXISTS ce_graph_communities (
    id                 uuid        PRIMARY KEY,
    source_id          text        NOT NULL,
    acl                text[]      NOT NULL DEFAULT '{}',
    level              integer     NOT NULL DEFAULT 0,
    facts_hash         text        NOT NULL,
    summary            text,
    entity_count       integer     NOT NULL,
    relationship_count integer     NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS ce_graph_community_entities (
    community_id uuid NOT NULL REFERENCES ce_graph_communities (id) ON DELETE CASCADE,
    entity_id    uuid NOT NULL REFERENCES ce_graph_entities (id) ON DELETE CASCADE,
    PRIMARY KEY (community_id, entity_id)
);

CREATE TABLE IF NOT EXISTS ce_graph_community_chunks (
    community_id uuid   NOT NULL REFERENCES ce_graph_communities (id) ON DELETE CASCADE,
    chunk_id     bigint NOT NULL,
    PRIMARY KEY (community_id, chunk_id)
);

-- Built concurrently, as every index added after the initial schema is.
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_ce_graph_entities_key ON ce_graph_entities (name_key);
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_ce_graph_mentions_chunk ON ce_graph_mentions (chunk_id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_ce_graph_mentions_document ON ce_graph_mentions (document_id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_ce_graph_rel_source ON ce_graph_relationships (source_entity);
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_ce_graph_rel_target ON ce_graph_relationships (target_entity);
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_ce_graph_rel_chunk ON ce_graph_relationships (chunk_id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_ce_graph_rel_document ON ce_graph_relationships (document_id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_ce_graph_rel_category ON ce_graph_relationships (category);
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_ce_graph_communities_group ON ce_graph_communities (source_id, acl);
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_ce_graph_community_chunks_chunk ON ce_graph_community_chunks (chunk_id);

-- Initial schema. Every statement is idempotent so a failed run can simply be re-run.
-- {dim} is the embedding width, validated as an integer and locked in ce_meta on first run.

CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE EXTENSION IF NOT EXISTS unaccent;

CREATE TABLE IF NOT EXISTS ce_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

-- One monotonic counter for the whole store: every ingest, update and delete advances it
-- inside its own transaction (the row lock also orders commits by revision).
CREATE TABLE IF NOT EXISTS ce_store_revision (
    id       smallint PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    revision bigint   NOT NULL DEFAULT 0
);
INSERT INTO ce_store_revision (id, revision) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;

-- The current state of every live document. A deleted document leaves this table; its
-- versions and chunks stay, closed at the revision of the delete.
CREATE TABLE IF NOT EXISTS ce_documents (
    id               uuid PRIMARY KEY,
    source_id        text        NOT NULL,
    name             text        NOT NULL,
    mime             text        NOT NULL,
    text             text        NOT NULL DEFAULT '',
    acl              text[]      NOT NULL DEFAULT '{}',
    attributes       jsonb       NOT NULL DEFAULT '{}'::jsonb,
    status           text        NOT NULL,
    failure_reason   text,
    error            text,
    content_hash     text,
    meta             jsonb       NOT NULL DEFAULT '{}'::jsonb,
    version          integer     NOT NULL DEFAULT 0,
    chunk_count      integer     NOT NULL DEFAULT 0,
    created_revision bigint      NOT NULL,
    updated_revision bigint      NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX IF NOT EXISTS ux_ce_documents_identity ON ce_documents (source_id, name);
CREATE INDEX IF NOT EXISTS ix_ce_documents_acl ON ce_documents USING gin (acl);
CREATE INDEX IF NOT EXISTS ix_ce_documents_created ON ce_documents (created_at, id);

-- Every admitted version of a document and the revision range [valid_from, valid_to) it is
-- visible in; valid_to NULL means "current".
CREATE TABLE IF NOT EXISTS ce_document_versions (
    document_id  uuid    NOT NULL,
    version      integer NOT NULL,
    source_id    text    NOT NULL,
    name         text    NOT NULL,
    content_hash text    NOT NULL,
    valid_from   bigint  NOT NULL,
    valid_to     bigint,
    PRIMARY KEY (document_id, version)
);

-- Chunks carry source_id and acl denormalised from their document so that the ACL and scope
-- predicate of every search leg is a condition on this one table (kept in step on update).
CREATE TABLE IF NOT EXISTS ce_chunks (
    id            bigserial PRIMARY KEY,
    document_id   uuid      NOT NULL,
    version       integer   NOT NULL,
    position      integer   NOT NULL,
    source_id     text      NOT NULL,
    acl           text[]    NOT NULL DEFAULT '{}',
    text          text      NOT NULL,
    text_hash     text      NOT NULL,
    section       text,
    page          integer,
    kind          text      NOT NULL DEFAULT 'text',
    tsv           tsvector  NOT NULL,
    embedding     vector({dim}),
    embedding_key text,
    meta          jsonb     NOT NULL DEFAULT '{}'::jsonb,
    valid_from    bigint    NOT NULL,
    valid_to      bigint
);
CREATE INDEX IF NOT EXISTS ix_ce_chunks_doc ON ce_chunks (document_id, version, position);
CREATE INDEX IF NOT EXISTS ix_ce_chunks_source ON ce_chunks (source_id) WHERE valid_to IS NULL;
CREATE INDEX IF NOT EXISTS ix_ce_chunks_acl ON ce_chunks USING gin (acl) WHERE valid_to IS NULL;
CREATE INDEX IF NOT EXISTS ix_ce_chunks_tsv ON ce_chunks USING gin (tsv) WHERE valid_to IS NULL;
CREATE INDEX IF NOT EXISTS ix_ce_chunks_trgm ON ce_chunks USING gin (text gin_trgm_ops) WHERE valid_to IS NULL;
CREATE INDEX IF NOT EXISTS ix_ce_chunks_embedding ON ce_chunks
    USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)
    WHERE valid_to IS NULL;
CREATE INDEX IF NOT EXISTS ix_ce_chunks_reuse ON ce_chunks (document_id, text_hash, embedding_key);

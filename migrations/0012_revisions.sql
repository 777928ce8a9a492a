-- A readable revision history (context_engine/revisions/, storage/repository.py). Every statement is
-- idempotent.
--
-- A document version row now carries what a read as of its revisions answers with: the ACL, the
-- attributes, the MIME type, the meta and the chunk count the document had while that version was
-- current. A change of ACL, name or attributes writes a new version (and new chunk rows) instead of
-- rewriting the old ones, so a search, list or get as of an earlier revision answers what the store
-- answered then, ACL outcome included.

ALTER TABLE ce_document_versions ADD COLUMN IF NOT EXISTS acl text[];
ALTER TABLE ce_document_versions ADD COLUMN IF NOT EXISTS attributes jsonb;
ALTER TABLE ce_document_versions ADD COLUMN IF NOT EXISTS mime text;
ALTER TABLE ce_document_versions ADD COLUMN IF NOT EXISTS meta jsonb;
ALTER TABLE ce_document_versions ADD COLUMN IF NOT EXISTS chunk_count integer;
ALTER TABLE ce_document_versions ADD COLUMN IF NOT EXISTS created_at timestamptz NOT NULL DEFAULT now();

-- Versions written before this revision: the live document's values, else the version's own chunks.
UPDATE ce_document_versions v
SET acl = d.acl, attributes = d.attributes, mime = d.mime, meta = d.meta, chunk_count = d.chunk_count
FROM ce_documents d
WHERE d.id = v.document_id AND v.acl IS NULL;

UPDATE ce_document_versions v
SET acl = coalesce((SELECT c.acl FROM ce_chunks c WHERE c.document_id = v.document_id AND c.version = v.version
                    LIMIT 1), '{}'),
    attributes = '{}'::jsonb, mime = '', meta = '{}'::jsonb,
    chunk_count = (SELECT count(*) FROM ce_chunks c WHERE c.document_id = v.document_id AND c.version = v.version)
WHERE v.acl IS NULL;

-- The ingest path inserts a version row right after it wrote the document row: the row's history
-- columns are taken from there unless the writer gave them. (Body in E'' with \073 for each
-- semicolon: the migration runner splits files on semicolons.)
CREATE OR REPLACE FUNCTION ce_document_versions_fill() RETURNS trigger LANGUAGE plpgsql AS E'
BEGIN
    IF NEW.acl IS NULL THEN
        SELECT d.acl, d.attributes, d.mime, d.meta, d.chunk_count
        INTO NEW.acl, NEW.attributes, NEW.mime, NEW.meta, NEW.chunk_count
        FROM ce_documents d WHERE d.id = NEW.document_id\073
    END IF\073
    NEW.acl := coalesce(NEW.acl, ''{}'')\073
    NEW.attributes := coalesce(NEW.attributes, ''{}''::jsonb)\073
    NEW.mime := coalesce(NEW.mime, '''')\073
    NEW.meta := coalesce(NEW.meta, ''{}''::jsonb)\073
    NEW.chunk_count := coalesce(NEW.chunk_count, 0)\073
    RETURN NEW\073
END';

DROP TRIGGER IF EXISTS ce_document_versions_fill ON ce_document_versions;
CREATE TRIGGER ce_document_versions_fill BEFORE INSERT ON ce_document_versions
    FOR EACH ROW EXECUTE FUNCTION ce_document_versions_fill();

CREATE INDEX IF NOT EXISTS ix_ce_document_versions_range ON ce_document_versions (valid_from, valid_to);
CREATE INDEX IF NOT EXISTS ix_ce_chunks_closed ON ce_chunks (valid_to) WHERE valid_to IS NOT NULL;

-- Idempotency keys of ingests and deletes, per source. A key is claimed (state 'pending') in its own
-- transaction before the work starts, so of concurrent callers with one key exactly one does the
-- work; the others wait for its record. request_hash tells a retry from a reuse with other content.
CREATE TABLE IF NOT EXISTS ce_idempotency_keys (
    source_id    text        NOT NULL,
    key          text        NOT NULL,
    operation    text        NOT NULL,
    request_hash text        NOT NULL,
    state        text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'done')),
    document_id  uuid,
    version      integer,
    revision     bigint,
    result       jsonb,
    claimed_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    PRIMARY KEY (source_id, key)
);

-- Structured fields extracted from a document by a model (opt-in at ingest), one row per document.
-- The row names the document version it was read from: a read joins on the current version, so a
-- document re-ingested with new content shows no fields until it is extracted again, and a deleted
-- document takes its row with it.
CREATE TABLE IF NOT EXISTS ce_document_fields (
    document_id   uuid        PRIMARY KEY REFERENCES ce_documents (id) ON DELETE CASCADE,
    version       integer     NOT NULL,
    document_type text,
    fields        jsonb       NOT NULL DEFAULT '{}'::jsonb,
    field_types   jsonb       NOT NULL DEFAULT '{}'::jsonb,
    mode          text        NOT NULL,
    tokens        integer     NOT NULL DEFAULT 0,
    extracted_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS ix_ce_document_fields_keys ON ce_document_fields USING gin (fields);

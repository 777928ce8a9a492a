-- Embedding jobs submitted with ingest(batch=True) (context_engine/ingest/batch_embedding.py).
--
-- One row per job. The provider embeds the document's whole chunk set and answers input i with
-- the vector of the chunk at position i, so a row records what that pairing needs: the document,
-- the version and content hash it was submitted for, how many chunks it holds and the provider's
-- handle (batch id, input file, embedding key). A poll writes the vectors onto the document's
-- current rows by position, and only while the row is still the document's live job: a later
-- ingest of the document marks it 'superseded' instead. poll_holder / poll_until are a short
-- lease, so two pollers never collect the same job at once; no connection is held for it.
CREATE TABLE IF NOT EXISTS ce_embedding_batches (
    id              bigserial   PRIMARY KEY,
    document_id     uuid        NOT NULL REFERENCES ce_documents (id) ON DELETE CASCADE,
    version         integer     NOT NULL,
    content_hash    text        NOT NULL,
    provider        text        NOT NULL,
    batch_id        text        NOT NULL,
    handle          jsonb       NOT NULL,
    chunk_count     integer     NOT NULL,
    tokens          bigint      NOT NULL DEFAULT 0,
    state           text        NOT NULL DEFAULT 'pending'
                                CHECK (state IN ('pending', 'completed', 'failed', 'superseded')),
    provider_status text,
    message         text,
    poll_holder     uuid,
    poll_until      timestamptz,
    submitted_at    timestamptz NOT NULL DEFAULT now(),
    polled_at       timestamptz,
    finished_at     timestamptz
);

-- at most one live job per document; also what a poll scans for its work
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ux_ce_embedding_batches_pending
    ON ce_embedding_batches (document_id) WHERE state = 'pending';

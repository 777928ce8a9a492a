-- Two narrow indexes over the current chunks for the document full-text leg's postings pass
-- (context_engine/retrieval/legs/document_fts.py), so that it reads no chunk row:
--
-- * a chunk's document, by the chunk's id: each posting of a query term (migration 0020) is mapped
--   to its document by an index-only lookup;
-- * a document's chunks with their length, source and ACL: a scored document's length over the
--   chunks the caller may see, and the count of the documents they may see, by index-only scans.
--
-- Without them each posting and each scored document read its chunk rows (about 3 KB each, the vector
-- and tsvector included): on SciFact one claim's statement went from about 430 to 60-95 ms at load 9
-- with them (benchmarks/README.md, "Retrieval quality"). Each statement is idempotent.
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_ce_chunks_id_document ON ce_chunks (id) INCLUDE (document_id)
    WHERE valid_to IS NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_ce_chunks_document_length ON ce_chunks (document_id)
    INCLUDE (tsv_tokens, source_id, acl) WHERE valid_to IS NULL;

-- Undoes 0026_hnsw_halfvec (run by migrate when `storage.hnsw_halfvec` is off and 0026 is recorded):
-- the float4 graph of 0006 built concurrently beside the half-precision one, then that one dropped.
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_ce_chunks_embedding ON ce_chunks
    USING hnsw (embedding vector_cosine_ops) WITH (m = 24, ef_construction = 200)
    WHERE valid_to IS NULL;
DROP INDEX CONCURRENTLY IF EXISTS ix_ce_chunks_embedding_half;

-- The vector index over half-precision copies of the vectors. OPTIONAL: applied when
-- `storage.hnsw_halfvec` is on in the configuration the engine starts with (or `context-engine migrate`
-- reads), and undone by `migrations/undo/0026_hnsw_halfvec.sql` when a later run finds it off.
--
-- The stored column stays `vector` (float4): the exact scan, the planner's proofs and every returned
-- similarity are computed in full precision; only the graph's ordering uses `embedding::halfvec`, an
-- expression the vector leg's ORDER BY repeats so the index serves it. The graph is half the size of
-- the float4 one and its build reads half the bytes (benchmarks/README.md, "Scale", "halfvec").
--
-- The new graph is built concurrently beside the old one, which keeps serving searches until the new
-- one is valid; then the old one is dropped. Each statement is idempotent.
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_ce_chunks_embedding_half ON ce_chunks
    USING hnsw ((embedding::halfvec({dim})) halfvec_cosine_ops) WITH (m = 24, ef_construction = 200)
    WHERE valid_to IS NULL;
DROP INDEX CONCURRENTLY IF EXISTS ix_ce_chunks_embedding;

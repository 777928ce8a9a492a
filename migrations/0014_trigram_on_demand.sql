-- The trigram GIN index serves one search leg only, the typo-tolerant `trigram` leg, which is off
-- by default (weight 0). Kept for everyone, it was the largest index after HNSW (21 MB for SciFact's
-- 12,921 chunks, more than the full-text index and the BM25 statistics together) and about a
-- quarter of what writing a chunk costs. It is dropped here and built again by the optional
-- revision 0016_trigram_index when the trigram leg is enabled (`search.weights.trigram` above 0,
-- or `context-engine migrate --trigram`). Without it the leg still answers, by reading every row.
DROP INDEX CONCURRENTLY IF EXISTS ix_ce_chunks_trgm;

-- The trigram leg's index (see 0014_trigram_on_demand). OPTIONAL: applied when the trigram leg is
-- enabled in the configuration the engine starts with, or by `context-engine migrate --trigram`.
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_ce_chunks_trgm ON ce_chunks USING gin (text gin_trgm_ops)
    WHERE valid_to IS NULL;

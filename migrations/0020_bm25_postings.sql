-- BM25 postings: one row per (lexeme, current chunk), kept by the statements that keep the BM25
-- statistics (context_engine/storage/bm25_stats.py, the bulk load). Every statement is idempotent;
-- re-running refills the table from the current chunks.
--
-- The full-text leg's direct pass (context_engine/retrieval/bm25.py) used to read every candidate's
-- row and unnest its tsvector to find the query terms' frequencies: about 8 microseconds a
-- candidate, 5,000 candidates for a claim-length query on SciFact. Here a query term's frequency
-- and the chunk's length sit in the key's included columns, so scoring reads an index-only range
-- per term, and only the best-scored rows are then checked against the chunk itself.
--
-- group_id is the chunk's (source, ACL) group in ce_bm25_groups, so a caller's scoring keeps only
-- the postings of the groups they may see, the same groups their statistics are summed over.

-- Held as migrations 0015 and 0019 held them (terms, then groups): a writer's statistics update
-- waits until the fill has committed, so the fill and the writers start from the same chunks.
LOCK TABLE ce_bm25_terms, ce_bm25_groups IN ACCESS EXCLUSIVE MODE;

CREATE TABLE IF NOT EXISTS ce_bm25_postings (
    lexeme   text     NOT NULL,
    chunk_id bigint   NOT NULL,
    group_id integer  NOT NULL,
    tf       smallint NOT NULL,
    tokens   integer  NOT NULL,
    PRIMARY KEY (lexeme, chunk_id) INCLUDE (group_id, tf, tokens)
);

TRUNCATE ce_bm25_postings;

INSERT INTO ce_bm25_postings (lexeme, chunk_id, group_id, tf, tokens)
SELECT u.lexeme, c.id, g.group_id, coalesce(array_length(u.positions, 1), 1), c.tsv_tokens
FROM ce_chunks c JOIN ce_bm25_groups g ON g.source_id = c.source_id AND g.acl = c.acl, unnest(c.tsv) u
WHERE c.valid_to IS NULL ORDER BY 1, 2;

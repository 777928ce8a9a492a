-- Per-lexeme bounds for BM25 pruning (context_engine/retrieval/bm25.py, bm25_stats.py).
-- Every statement is idempotent; re-running recomputes the bounds from the current chunks.
--
-- For each (lexeme, group) row of ce_bm25_terms: the largest term frequency of the lexeme in any
-- current chunk of the group (max_tf) and the fewest indexed tokens of such a chunk (min_len). A
-- term's BM25 contribution grows with its frequency and falls with the chunk's length, so
-- idf * max_tf (k1 + 1) / (max_tf + k1 (1 - b + b min_len / avgdl)) bounds it in every chunk the
-- caller may see, where idf * (k1 + 1) (an endless term in an empty chunk) was the only bound
-- before. Writes keep the bounds (a count that falls leaves them as they were: still bounds, only
-- looser); NULL means unknown, and a reader takes the loose bound then.

-- Held as migration 0015 held them (terms, then groups), so no writer's counts land between the
-- recount's read of the chunks and its commit. Writes and searches wait meanwhile.
LOCK TABLE ce_bm25_terms, ce_bm25_groups IN ACCESS EXCLUSIVE MODE;

ALTER TABLE ce_bm25_terms ADD COLUMN IF NOT EXISTS max_tf integer, ADD COLUMN IF NOT EXISTS min_len integer;

UPDATE ce_bm25_terms t SET max_tf = z.max_tf, min_len = z.min_len
FROM (
    SELECT u.lexeme, g.group_id, max(coalesce(array_length(u.positions, 1), 1)) AS max_tf,
           min(c.tsv_tokens) AS min_len
    FROM ce_chunks c JOIN ce_bm25_groups g ON g.source_id = c.source_id AND g.acl = c.acl, unnest(c.tsv) u
    WHERE c.valid_to IS NULL GROUP BY 1, 2
) z
WHERE t.lexeme = z.lexeme AND t.group_id = z.group_id;

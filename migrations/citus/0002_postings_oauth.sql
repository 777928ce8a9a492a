-- The tables the numbered migrations added after 0001 of this folder (applied after them, like 0001).
--
-- ce_bm25_postings (migration 0020): one row per (lexeme, current chunk), written by the statements
-- that keep the BM25 statistics, which join it to the chunks they count in or out, and read by the
-- full-text leg's direct pass, which joins it back to its chunks. It is co-located with ce_chunks:
-- each row carries its chunk's document_id (the distribution key), and the key becomes
-- (lexeme, chunk_id, document_id), since Citus requires the distribution column in every unique key.
-- A lexeme's postings are still one index-only range per shard. The table is refilled from the
-- current chunks, as migration 0020 fills it.
--
-- ce_mcp_oauth (migration 0025): one row per mcp tool, referencing ce_tools, which is a reference
-- table, and it is one as well (a foreign key from a reference table may only point at another).
--
-- Migrations 0022 (a row of ce_meta) and 0024 (a CHECK dropped from ce_tools) change tables 0001
-- already made reference tables, and need nothing here.

SET LOCAL citus.multi_shard_modify_mode = 'sequential';

TRUNCATE ce_bm25_postings;
ALTER TABLE ce_bm25_postings ADD COLUMN IF NOT EXISTS document_id uuid NOT NULL;
ALTER TABLE ce_bm25_postings DROP CONSTRAINT IF EXISTS ce_bm25_postings_pkey;
ALTER TABLE ce_bm25_postings ADD CONSTRAINT ce_bm25_postings_pkey
    PRIMARY KEY (lexeme, chunk_id, document_id) INCLUDE (group_id, tf, tokens);
SELECT create_distributed_table('ce_bm25_postings', 'document_id', colocate_with => 'ce_chunks');

INSERT INTO ce_bm25_postings (lexeme, chunk_id, group_id, tf, tokens, document_id)
SELECT u.lexeme, c.id, g.group_id, coalesce(array_length(u.positions, 1), 1), c.tsv_tokens, c.document_id
FROM ce_chunks c JOIN ce_bm25_groups g ON g.source_id = c.source_id AND g.acl = c.acl, unnest(c.tsv) u
WHERE c.valid_to IS NULL;

SELECT create_reference_table('ce_mcp_oauth');
SELECT truncate_local_data_after_distributing_table('ce_mcp_oauth');

-- Okapi BM25 for the full-text leg (context_engine/retrieval/bm25.py). Every statement is idempotent.
--
-- Statistics are kept per (source, ACL) group so a query can sum exactly the groups its caller may
-- see: the IDF and average length of a ranking never come from chunks the caller cannot read.

-- Indexed tokens in a tsvector (positions counted, stop words already gone). SQL-language, one
-- statement, immutable: it depends on its argument only, so it may back a generated column.
CREATE OR REPLACE FUNCTION ce_tsv_tokens(tsvector) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS 'SELECT coalesce(sum(coalesce(array_length(positions, 1), 1)), 0)::integer FROM unnest($1)';

-- A chunk's BM25 length, computed once when the row is written (existing rows are filled in here).
ALTER TABLE ce_chunks ADD COLUMN IF NOT EXISTS tsv_tokens integer
    GENERATED ALWAYS AS (ce_tsv_tokens(tsv)) STORED;

-- Document frequency (in current chunks) of each lexeme, per source and ACL.
CREATE TABLE IF NOT EXISTS ce_bm25_terms (
    lexeme    text   NOT NULL,
    source_id text   NOT NULL,
    acl       text[] NOT NULL,
    df        bigint NOT NULL,
    PRIMARY KEY (lexeme, source_id, acl)
);

-- Current chunk count and their token total, per source and ACL.
CREATE TABLE IF NOT EXISTS ce_bm25_groups (
    source_id text   NOT NULL,
    acl       text[] NOT NULL,
    chunks    bigint NOT NULL,
    tokens    bigint NOT NULL,
    PRIMARY KEY (source_id, acl)
);

-- From this revision a chunk's section heading is indexed with its text (repository.write_document),
-- so the heading's words find every chunk under it; current rows written before are rebuilt here.
UPDATE ce_chunks
SET tsv = to_tsvector(
    CAST((SELECT value FROM ce_meta WHERE key = 'text_search_config') AS regconfig),
    unaccent(concat_ws(' ', section, text)))
WHERE valid_to IS NULL AND section IS NOT NULL;

-- Backfill from the chunks already stored (a no-op on a new database; the whole file is one
-- transaction, so this never runs twice over the same rows).
INSERT INTO ce_bm25_terms (lexeme, source_id, acl, df)
SELECT u.lexeme, c.source_id, c.acl, count(*) FROM ce_chunks c, unnest(c.tsv) u
WHERE c.valid_to IS NULL GROUP BY 1, 2, 3
ON CONFLICT (lexeme, source_id, acl) DO NOTHING;

INSERT INTO ce_bm25_groups (source_id, acl, chunks, tokens)
SELECT c.source_id, c.acl, count(*), coalesce(sum(c.tsv_tokens), 0) FROM ce_chunks c
WHERE c.valid_to IS NULL GROUP BY 1, 2
ON CONFLICT (source_id, acl) DO NOTHING;

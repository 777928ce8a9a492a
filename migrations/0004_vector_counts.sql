-- Searchable vectors per source and ACL entry, read by the vector leg's planner
-- (context_engine/retrieval/planner.py). Every statement is idempotent; re-running recounts.
--
-- The planner chooses between an exact scan of the rows a caller may see and the HNSW index by
-- how many rows the caller's ACL and scope admit. Counting them at query time costs about as much
-- as the exact scan it is meant to decide on, and the planner's own statistics on the ACL array
-- are sampled and stale (benchmarks/README.md, "ACL recall"), so the counts are kept here instead,
-- current in the same transaction as every write to ce_chunks.
--
-- A row counts when it is current (valid_to IS NULL) and has a vector: exactly the rows the
-- partial HNSW index holds. Per source:
--   kind 'all'    principal ''   every such row
--   kind 'public' principal ''   those with an empty ACL (visible to everyone)
--   kind 'acl'    principal p    those whose ACL contains p
-- A caller holding principals P in sources S may see at most public + sum over P of 'acl' rows,
-- and never more than 'all' (a row carrying two of the caller's principals is counted twice, so
-- for such callers this is an upper bound). Rows whose count fell to zero are kept at zero.

CREATE TABLE IF NOT EXISTS ce_vector_counts (
    source_id text   NOT NULL,
    kind      text   NOT NULL CHECK (kind IN ('all', 'public', 'acl')),
    principal text   NOT NULL DEFAULT '',
    chunks    bigint NOT NULL,
    -- kind and principal first: the planner reads a caller's principals across every source
    PRIMARY KEY (kind, principal, source_id)
);

-- The keys one row is counted under.
CREATE OR REPLACE FUNCTION ce_vector_count_keys(acl text[])
    RETURNS TABLE (kind text, principal text)
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
        SELECT 'all', '' UNION ALL
        SELECT 'public', '' WHERE cardinality(acl) = 0 UNION ALL
        SELECT DISTINCT 'acl', p FROM unnest(acl) AS p
    $$;

-- Statement-level triggers with transition tables: one aggregate upsert per statement, however
-- many rows it wrote, in a fixed key order so concurrent writers lock counter rows in one order.
-- The body is an E'' string with \073 for each semicolon because the migration runner splits
-- files on semicolons (context_engine/storage/migrate.py); quotes inside are doubled.
CREATE OR REPLACE FUNCTION ce_vector_counts_apply() RETURNS trigger LANGUAGE plpgsql AS E'
BEGIN
    IF TG_OP = ''TRUNCATE'' THEN
        DELETE FROM ce_vector_counts\073
    ELSIF TG_OP = ''INSERT'' THEN
        INSERT INTO ce_vector_counts AS t (source_id, kind, principal, chunks)
        SELECT r.source_id, k.kind, k.principal, count(*)
        FROM new_rows r CROSS JOIN LATERAL ce_vector_count_keys(r.acl) k
        WHERE r.valid_to IS NULL AND r.embedding IS NOT NULL
        GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (kind, principal, source_id) DO UPDATE SET chunks = t.chunks + EXCLUDED.chunks\073
    ELSIF TG_OP = ''DELETE'' THEN
        INSERT INTO ce_vector_counts AS t (source_id, kind, principal, chunks)
        SELECT r.source_id, k.kind, k.principal, -count(*)
        FROM old_rows r CROSS JOIN LATERAL ce_vector_count_keys(r.acl) k
        WHERE r.valid_to IS NULL AND r.embedding IS NOT NULL
        GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (kind, principal, source_id) DO UPDATE SET chunks = t.chunks + EXCLUDED.chunks\073
    ELSE
        INSERT INTO ce_vector_counts AS t (source_id, kind, principal, chunks)
        SELECT d.source_id, k.kind, k.principal, sum(d.w)
        FROM (
            SELECT n.source_id, n.acl, 1 AS w FROM new_rows n
            WHERE n.valid_to IS NULL AND n.embedding IS NOT NULL
            UNION ALL
            SELECT o.source_id, o.acl, -1 FROM old_rows o
            WHERE o.valid_to IS NULL AND o.embedding IS NOT NULL
        ) d CROSS JOIN LATERAL ce_vector_count_keys(d.acl) k
        GROUP BY 1, 2, 3 HAVING sum(d.w) <> 0 ORDER BY 1, 2, 3
        ON CONFLICT (kind, principal, source_id) DO UPDATE SET chunks = t.chunks + EXCLUDED.chunks\073
    END IF\073
    RETURN NULL\073
END
';

DROP TRIGGER IF EXISTS ce_vector_counts_insert ON ce_chunks;
CREATE TRIGGER ce_vector_counts_insert AFTER INSERT ON ce_chunks
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ce_vector_counts_apply();
DROP TRIGGER IF EXISTS ce_vector_counts_update ON ce_chunks;
CREATE TRIGGER ce_vector_counts_update AFTER UPDATE ON ce_chunks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ce_vector_counts_apply();
DROP TRIGGER IF EXISTS ce_vector_counts_delete ON ce_chunks;
CREATE TRIGGER ce_vector_counts_delete AFTER DELETE ON ce_chunks
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION ce_vector_counts_apply();
DROP TRIGGER IF EXISTS ce_vector_counts_truncate ON ce_chunks;
CREATE TRIGGER ce_vector_counts_truncate AFTER TRUNCATE ON ce_chunks
    FOR EACH STATEMENT EXECUTE FUNCTION ce_vector_counts_apply();

-- Recount from the rows already stored. The triggers above hold a lock that keeps writers out
-- until this transaction commits, so the count and the triggers start from the same state.
DELETE FROM ce_vector_counts;
INSERT INTO ce_vector_counts (source_id, kind, principal, chunks)
SELECT c.source_id, k.kind, k.principal, count(*)
FROM ce_chunks c CROSS JOIN LATERAL ce_vector_count_keys(c.acl) k
WHERE c.valid_to IS NULL AND c.embedding IS NOT NULL
GROUP BY 1, 2, 3;

-- The sum of the searchable vectors under each ce_vector_counts key, kept current by the same
-- triggers as the counts. The vector leg's planner divides sums by counts to compare the centroid
-- of the rows a caller may see with the centroid of every row in scope: a slice spread over the
-- whole space like the corpus (its centroid no longer than the corpus's) is searched well through
-- the index's iterative scan, a slice concentrated in one region is not (benchmarks/README.md,
-- "ACL recall"). Only rows the caller may see enter the caller's side of that comparison.
--
-- As in 0004, the function body is an E'' string with \073 for each semicolon (the migration
-- runner splits files on semicolons) and doubled quotes.
ALTER TABLE ce_vector_counts ADD COLUMN IF NOT EXISTS embedding_sum vector({dim});

CREATE OR REPLACE FUNCTION ce_vector_counts_apply() RETURNS trigger LANGUAGE plpgsql AS E'
BEGIN
    IF TG_OP = ''TRUNCATE'' THEN
        DELETE FROM ce_vector_counts\073
    ELSIF TG_OP = ''INSERT'' THEN
        INSERT INTO ce_vector_counts AS t (source_id, kind, principal, chunks, embedding_sum)
        SELECT r.source_id, k.kind, k.principal, count(*), sum(r.embedding)
        FROM new_rows r CROSS JOIN LATERAL ce_vector_count_keys(r.acl) k
        WHERE r.valid_to IS NULL AND r.embedding IS NOT NULL
        GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (kind, principal, source_id) DO UPDATE SET chunks = t.chunks + EXCLUDED.chunks,
            embedding_sum = coalesce(t.embedding_sum + EXCLUDED.embedding_sum, EXCLUDED.embedding_sum)\073
    ELSIF TG_OP = ''DELETE'' THEN
        INSERT INTO ce_vector_counts AS t (source_id, kind, principal, chunks, embedding_sum)
        SELECT r.source_id, k.kind, k.principal, -count(*),
            sum(r.embedding * CAST(array_fill(CAST(-1 AS real), ARRAY[{dim}]) AS vector))
        FROM old_rows r CROSS JOIN LATERAL ce_vector_count_keys(r.acl) k
        WHERE r.valid_to IS NULL AND r.embedding IS NOT NULL
        GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (kind, principal, source_id) DO UPDATE SET chunks = t.chunks + EXCLUDED.chunks,
            embedding_sum = coalesce(t.embedding_sum + EXCLUDED.embedding_sum, EXCLUDED.embedding_sum)\073
    ELSE
        -- no HAVING on the change: a vector replaced in place changes the sum, not the count
        INSERT INTO ce_vector_counts AS t (source_id, kind, principal, chunks, embedding_sum)
        SELECT d.source_id, k.kind, k.principal, sum(d.w), sum(d.v)
        FROM (
            SELECT n.source_id, n.acl, 1 AS w, n.embedding AS v FROM new_rows n
            WHERE n.valid_to IS NULL AND n.embedding IS NOT NULL
            UNION ALL
            SELECT o.source_id, o.acl, -1, o.embedding * CAST(array_fill(CAST(-1 AS real), ARRAY[{dim}]) AS vector)
            FROM old_rows o
            WHERE o.valid_to IS NULL AND o.embedding IS NOT NULL
        ) d CROSS JOIN LATERAL ce_vector_count_keys(d.acl) k
        GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (kind, principal, source_id) DO UPDATE SET chunks = t.chunks + EXCLUDED.chunks,
            embedding_sum = coalesce(t.embedding_sum + EXCLUDED.embedding_sum, EXCLUDED.embedding_sum)\073
    END IF\073
    RETURN NULL\073
END
';

-- Recount counts and sums from the rows already stored (the triggers' lock keeps writers out until
-- this transaction commits).
DELETE FROM ce_vector_counts;
INSERT INTO ce_vector_counts (source_id, kind, principal, chunks, embedding_sum)
SELECT c.source_id, k.kind, k.principal, count(*), sum(c.embedding)
FROM ce_chunks c CROSS JOIN LATERAL ce_vector_count_keys(c.acl) k
WHERE c.valid_to IS NULL AND c.embedding IS NOT NULL
GROUP BY 1, 2, 3;

-- The schema on a Citus coordinator (context_engine/storage/migrate.py applies the files of this folder
-- after the numbered revisions, on a database where the citus extension is installed). The single-node
-- schema is left as it is everywhere else; this file reshapes it once, in one transaction.
--
-- Distribution key: the document. ce_documents is distributed by id and its versions, chunks, extracted
-- fields and embedding jobs by document_id, all co-located: every statement the engine runs joins these
-- tables on the document (a chunk's name from its version, its ACL from its document, a version's text
-- from its chunks), and with one key each of those joins and correlated lookups stays inside one shard.
-- A whole source is spread over every shard, so a source of any size is split evenly and a search over
-- it runs on every worker at once.
--
-- Small, shared tables are reference tables (a copy on every node, written in every write's transaction):
-- the store revision, the metadata, the BM25 statistics, the idempotency keys, agents and tools.
--
-- Citus requires every unique key of a distributed table to contain its distribution column:
--   ce_chunks           (id)          -> (document_id, id)
--   ce_embedding_batches (id)         -> (document_id, id)
--   ce_documents        (source_id, name, acl) unique -> an ordinary index: a name's uniqueness per
--                       visibility is kept by the writers' identity locks, which every write takes on the
--                       coordinator before it files a name (context_engine/ingest/holders.py)
--   ce_vector_counts    (kind, principal, source_id) -> (shard_key, kind, principal, source_id)
--
-- Triggers. The version-row fill trigger read ce_documents from a row trigger, which on a worker would be
-- a distributed query nested in a shard's: it is dropped (every writer gives the version's columns).
-- The vector counts (0004, 0007) become per-shard counts: ce_vector_counts is co-located with ce_chunks
-- and a statement trigger on each ce_chunks shard upserts the statement's change into the counts shard
-- beside it, on the same node, in the same transaction. A reader sums every shard's rows, so the counts
-- and sums the planner reads are exact across shards (a key may have one row per shard).
--
-- Bodies are E'' strings with \073 for each semicolon (the migration runner splits files on semicolons)
-- and \045 for each percent sign (the driver reads a bare one as a parameter placeholder).

SET LOCAL citus.enable_unsafe_triggers = on;
SET LOCAL citus.multi_shard_modify_mode = 'sequential';

-- Every session of this database writes over one connection per node: a write transaction touches a
-- reference table (the revision, the BM25 statistics) and then reads or writes shards joined to it,
-- which Citus refuses once a placement was written over more than one connection. Searches are reads
-- and keep their parallel fan-out. (Set for the sessions that start from now on, and for this one.)
DO E'BEGIN EXECUTE format(''ALTER DATABASE \045I SET citus.multi_shard_modify_mode = sequential'', current_database())\073 END';
SET citus.multi_shard_modify_mode = 'sequential';

-- The vector leg's scan settings (hnsw.ef_search, the iterative scan, the disabled plan nodes) are
-- planned on the shards: a transaction's SET LOCAL goes on to the shards' connections.
DO E'BEGIN EXECUTE format(''ALTER DATABASE \045I SET citus.propagate_set_commands = local'', current_database())\073 END';
SET citus.propagate_set_commands = 'local';

DROP TRIGGER IF EXISTS ce_document_versions_fill ON ce_document_versions;
DROP TRIGGER IF EXISTS ce_vector_counts_insert ON ce_chunks;
DROP TRIGGER IF EXISTS ce_vector_counts_update ON ce_chunks;
DROP TRIGGER IF EXISTS ce_vector_counts_delete ON ce_chunks;
DROP TRIGGER IF EXISTS ce_vector_counts_truncate ON ce_chunks;

ALTER TABLE ce_chunks DROP CONSTRAINT IF EXISTS ce_chunks_pkey;
ALTER TABLE ce_chunks ADD CONSTRAINT ce_chunks_pkey PRIMARY KEY (document_id, id);
CREATE INDEX IF NOT EXISTS ix_ce_chunks_id ON ce_chunks (id);

ALTER TABLE ce_embedding_batches DROP CONSTRAINT IF EXISTS ce_embedding_batches_pkey;
ALTER TABLE ce_embedding_batches ADD CONSTRAINT ce_embedding_batches_pkey PRIMARY KEY (document_id, id);

DROP INDEX IF EXISTS ux_ce_documents_identity_acl;
CREATE INDEX IF NOT EXISTS ix_ce_documents_identity ON ce_documents (source_id, name);

-- counted again below, per shard
TRUNCATE ce_vector_counts;
ALTER TABLE ce_vector_counts DROP CONSTRAINT IF EXISTS ce_vector_counts_pkey;
ALTER TABLE ce_vector_counts ADD COLUMN IF NOT EXISTS shard_key uuid NOT NULL;
ALTER TABLE ce_vector_counts ADD CONSTRAINT ce_vector_counts_pkey PRIMARY KEY (shard_key, kind, principal, source_id);

SELECT create_reference_table(t) FROM unnest(ARRAY['ce_meta', 'ce_store_revision', 'ce_bm25_groups',
    'ce_bm25_terms', 'ce_idempotency_keys', 'ce_agent_links', 'ce_tools', 'ce_tool_approvals',
    'ce_tool_calls']) AS t;

-- The functions of the numbered revisions that run on the shards are created on every node. A database
-- created on the cluster has them there already (Citus propagates a function created once it is
-- installed); one moved from a single node was created before, so only the coordinator has them. A
-- table's own dependencies (ce_tsv_tokens, of a generated column) go with it; ce_vector_count_keys,
-- called by the shards' count triggers and by the recount below, is no table's dependency.
SELECT create_distributed_function('ce_vector_count_keys(text[])');

SELECT create_distributed_table('ce_documents', 'id');
SELECT create_distributed_table('ce_document_versions', 'document_id', colocate_with => 'ce_documents');
SELECT create_distributed_table('ce_chunks', 'document_id', colocate_with => 'ce_documents');
SELECT create_distributed_table('ce_document_fields', 'document_id', colocate_with => 'ce_documents');
SELECT create_distributed_table('ce_embedding_batches', 'document_id', colocate_with => 'ce_documents');
SELECT create_distributed_table('ce_vector_counts', 'shard_key', colocate_with => 'ce_documents');

-- the rows copied into the shards leave the coordinator's own copy (a database moved from one node)
SELECT truncate_local_data_after_distributing_table(CAST(t AS regclass)) FROM unnest(ARRAY['ce_meta',
    'ce_store_revision', 'ce_bm25_groups', 'ce_bm25_terms', 'ce_idempotency_keys', 'ce_agent_links', 'ce_tools',
    'ce_tool_approvals', 'ce_tool_calls', 'ce_documents', 'ce_document_versions', 'ce_chunks', 'ce_document_fields',
    'ce_embedding_batches']) AS t;

-- One change to the counts under one key (the trigger collects a statement's changes in an array of these).
DROP TYPE IF EXISTS ce_vector_count_change;
CREATE TYPE ce_vector_count_change AS (
    source_id text, kind text, principal text, chunks bigint, embedding_sum vector({dim})
);

-- A fixed shard_key for the counts shard covering hash values lo..hi: the first of md5('1'), md5('2'), ...
-- that hashes there. Fixed, so every statement on a shard upserts the same rows.
CREATE OR REPLACE FUNCTION ce_vector_count_anchor(lo integer, hi integer) RETURNS uuid
    LANGUAGE plpgsql IMMUTABLE STRICT AS E'
DECLARE
    candidate uuid\073
BEGIN
    FOR i IN 1..1000000 LOOP
        candidate := CAST(md5(CAST(i AS text)) AS uuid)\073
        IF worker_hash(candidate) BETWEEN lo AND hi THEN
            RETURN candidate\073
        END IF\073
    END LOOP\073
    RAISE EXCEPTION ''no anchor for the hash range \045 .. \045'', lo, hi\073
END';

-- The statement trigger of every ce_chunks shard: the statement's change to the counts, upserted into the
-- co-located ce_vector_counts shard (found by the same hash range in Citus's shard metadata).
CREATE OR REPLACE FUNCTION ce_vector_counts_apply_shard() RETURNS trigger LANGUAGE plpgsql AS E'
DECLARE
    own_shard bigint\073
    counts_shard bigint\073
    lo integer\073
    hi integer\073
    changes ce_vector_count_change[]\073
BEGIN
    own_shard := CAST(substring(TG_TABLE_NAME FROM ''_([0-9]+)$'') AS bigint)\073
    SELECT s2.shardid, CAST(s1.shardminvalue AS integer), CAST(s1.shardmaxvalue AS integer)
    INTO counts_shard, lo, hi
    FROM pg_dist_shard s1 JOIN pg_dist_shard s2
        ON s2.logicalrelid = CAST(''ce_vector_counts'' AS regclass) AND s2.shardminvalue = s1.shardminvalue
    WHERE s1.shardid = own_shard\073
    IF counts_shard IS NULL THEN
        RAISE EXCEPTION ''no ce_vector_counts shard beside \045'', TG_TABLE_NAME\073
    END IF\073
    IF TG_OP = ''TRUNCATE'' THEN
        EXECUTE format(''DELETE FROM \045I.\045I'', TG_TABLE_SCHEMA, ''ce_vector_counts_'' || counts_shard)\073
        RETURN NULL\073
    ELSIF TG_OP = ''INSERT'' THEN
        SELECT array_agg(CAST(ROW(z.source_id, z.kind, z.principal, z.n, z.s) AS ce_vector_count_change)
                         ORDER BY z.source_id, z.kind, z.principal)
        INTO changes FROM (
            SELECT r.source_id, k.kind, k.principal, count(*) AS n, sum(r.embedding) AS s
            FROM new_rows r CROSS JOIN LATERAL ce_vector_count_keys(r.acl) k
            WHERE r.valid_to IS NULL AND r.embedding IS NOT NULL GROUP BY 1, 2, 3) z\073
    ELSIF TG_OP = ''DELETE'' THEN
        SELECT array_agg(CAST(ROW(z.source_id, z.kind, z.principal, z.n, z.s) AS ce_vector_count_change)
                         ORDER BY z.source_id, z.kind, z.principal)
        INTO changes FROM (
            SELECT r.source_id, k.kind, k.principal, -count(*) AS n,
                sum(r.embedding * CAST(array_fill(CAST(-1 AS real), ARRAY[{dim}]) AS vector)) AS s
            FROM old_rows r CROSS JOIN LATERAL ce_vector_count_keys(r.acl) k
            WHERE r.valid_to IS NULL AND r.embedding IS NOT NULL GROUP BY 1, 2, 3) z\073
    ELSE
        SELECT array_agg(CAST(ROW(z.source_id, z.kind, z.principal, z.n, z.s) AS ce_vector_count_change)
                         ORDER BY z.source_id, z.kind, z.principal)
        INTO changes FROM (
            SELECT d.source_id, k.kind, k.principal, sum(d.w) AS n, sum(d.v) AS s
            FROM (
                SELECT n.source_id, n.acl, 1 AS w, n.embedding AS v FROM new_rows n
                WHERE n.valid_to IS NULL AND n.embedding IS NOT NULL
                UNION ALL
                SELECT o.source_id, o.acl, -1, o.embedding * CAST(array_fill(CAST(-1 AS real), ARRAY[{dim}]) AS vector)
                FROM old_rows o
                WHERE o.valid_to IS NULL AND o.embedding IS NOT NULL
            ) d CROSS JOIN LATERAL ce_vector_count_keys(d.acl) k GROUP BY 1, 2, 3) z\073
    END IF\073
    IF changes IS NULL THEN
        RETURN NULL\073
    END IF\073
    EXECUTE format(''INSERT INTO \045I.\045I AS t (shard_key, source_id, kind, principal, chunks, embedding_sum) ''
        ''SELECT $1, c.source_id, c.kind, c.principal, c.chunks, c.embedding_sum FROM unnest($2) AS c ''
        ''ON CONFLICT (shard_key, kind, principal, source_id) DO UPDATE SET chunks = t.chunks + EXCLUDED.chunks, ''
        ''embedding_sum = coalesce(t.embedding_sum + EXCLUDED.embedding_sum, EXCLUDED.embedding_sum)'',
        TG_TABLE_SCHEMA, ''ce_vector_counts_'' || counts_shard)
    USING ce_vector_count_anchor(lo, hi), changes\073
    RETURN NULL\073
END';

CREATE TRIGGER ce_vector_counts_insert AFTER INSERT ON ce_chunks
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ce_vector_counts_apply_shard();
CREATE TRIGGER ce_vector_counts_update AFTER UPDATE ON ce_chunks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION ce_vector_counts_apply_shard();
CREATE TRIGGER ce_vector_counts_delete AFTER DELETE ON ce_chunks
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION ce_vector_counts_apply_shard();
CREATE TRIGGER ce_vector_counts_truncate AFTER TRUNCATE ON ce_chunks
    FOR EACH STATEMENT EXECUTE FUNCTION ce_vector_counts_apply_shard();

-- Count the rows already stored (a database moved from one node), each shard's into its own counts shard.
INSERT INTO ce_vector_counts (shard_key, source_id, kind, principal, chunks, embedding_sum)
SELECT ce_vector_count_anchor(CAST(s.shardminvalue AS integer), CAST(s.shardmaxvalue AS integer)),
    x.source_id, x.kind, x.principal, x.n, x.s
FROM (
    SELECT get_shard_id_for_distribution_column('ce_chunks', c.document_id) AS shard, c.source_id, k.kind,
        k.principal, count(*) AS n, sum(c.embedding) AS s
    FROM ce_chunks c CROSS JOIN LATERAL ce_vector_count_keys(c.acl) k
    WHERE c.valid_to IS NULL AND c.embedding IS NOT NULL
    GROUP BY 1, 2, 3, 4
) x JOIN pg_dist_shard s ON s.shardid = x.shard;

-- The key of the revision handles (context_engine/revisions/handles.py): a non-trusted caller is
-- told a keyed permutation of each revision instead of the store-wide number, whose gaps would count
-- other tenants' writes. 244 random bits from the server's strong random source, written once; the
-- statement is idempotent and never replaces a key already in use (handles given out stay valid).

INSERT INTO ce_meta (key, value)
SELECT 'revision_handle_key', replace(CAST(gen_random_uuid() AS text) || CAST(gen_random_uuid() AS text), '-', '')
ON CONFLICT (key) DO NOTHING;

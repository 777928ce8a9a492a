-- Names are unique per visibility (context_engine/ingest/holders.py): a document is named by
-- (source_id, name) among the documents a caller may see, so two documents with different ACLs may
-- share a name, and filing under a name held only by a document the caller cannot see creates the
-- caller's own document instead of answering that the name is taken (which told a caller that a
-- hidden document exists). ACLs are stored sorted and without repeats, so equal ACLs are equal
-- arrays. Every statement is idempotent.

CREATE UNIQUE INDEX IF NOT EXISTS ux_ce_documents_identity_acl ON ce_documents (source_id, name, acl);
DROP INDEX IF EXISTS ux_ce_documents_identity;

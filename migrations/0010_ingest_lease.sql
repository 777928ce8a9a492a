-- The run that is embedding a document holds a lease on it: which run (lease_holder) and until
-- when (lease_until). A live lease keeps a second ingest or a resume of the same document away;
-- the run renews it while it works, so a run that dies (a killed process) lets go once its lease
-- runs out instead of leaving the document locked. No connection is held for the lease itself.
ALTER TABLE ce_documents ADD COLUMN IF NOT EXISTS lease_holder uuid;
ALTER TABLE ce_documents ADD COLUMN IF NOT EXISTS lease_until timestamptz;

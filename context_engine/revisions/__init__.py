"""The store's revision history made usable: reads as of a revision, idempotency keys, retention."""

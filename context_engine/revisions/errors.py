"""The errors of revisioned reads and idempotent writes, each with its stable code and status."""

from __future__ import annotations

from context_engine.errors import ContextEngineError, InvalidRequest


class RevisionExpired(InvalidRequest):
    """A read as of a revision whose history was removed by ``vacuum_revisions``."""

    code = "revision_expired"


class IdempotencyKeyReused(ContextEngineError):
    """An idempotency key sent again with other content: the earlier request owns it."""

    code = "idempotency_key_reused"
    status = 409


class IdempotencyInProgress(ContextEngineError):
    """The request that holds the key is still running after the wait allowed for it."""

    code = "idempotency_in_progress"
    status = 409
    retry_after = 2

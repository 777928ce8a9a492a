"""Errors with stable codes.

Every error the engine raises on purpose carries a machine-readable ``code`` and the HTTP status
the routers answer with, so the engine, the routes and later the knowledge tool report the same
failure the same way. Messages never carry secrets or raw stack traces.
"""

from __future__ import annotations

from typing import Any


class ContextEngineError(Exception):
    """Base class: a failure with a stable ``code`` and an HTTP ``status``."""

    code: str = "internal_error"
    status: int = 500
    #: seconds after which the same call may succeed: set on retryable errors (routes send ``Retry-After``)
    retry_after: int | None = None

    def __init__(self, message: str, *, code: str | None = None, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details = details or {}


class FixedMessageError(ContextEngineError):
    """A refusal that always says the same sentence, its class's ``fixed_message``: raised with no
    arguments, so every place that raises it reads alike."""

    fixed_message: str = ""

    def __init__(self) -> None:
        super().__init__(self.fixed_message)


class ConfigError(ContextEngineError):
    code = "config_error"
    status = 500


class InvalidRequest(ContextEngineError):
    """The caller sent something we refuse (empty query, bad bound, wrong type)."""

    code = "invalid_request"
    status = 400


class InvalidCursor(InvalidRequest):
    """A page cursor this server did not issue (or issued for another query): every list says it alike."""

    code = "invalid_cursor"


class NotFound(ContextEngineError):
    """Missing, or not visible to the caller: the two read the same on purpose."""

    code = "not_found"
    status = 404


class Forbidden(ContextEngineError):
    code = "forbidden"
    status = 403


class NameTaken(ContextEngineError):
    """A document the caller may see already holds this (source, name, ACL), or a filing could name
    more than one visible document. Names are unique per visibility, so a hidden document never
    causes it (see ``context_engine.ingest.holders``)."""

    code = "conflict"
    status = 409

    def __init__(self, message: str = "a document with that name already exists in this source") -> None:
        super().__init__(message)


class IngestTooLarge(ContextEngineError):
    """An intake cap refused the input; never trimmed, never sampled."""

    code = "too_large"
    status = 413

    def __init__(self, knob: str, limit: int, actual: int, unit: str = "bytes"):
        super().__init__(
            f"{knob} is {limit} {unit}; this input is {actual} {unit}. Raise {knob} (or set it to None) to accept it.",
            details={"knob": knob, "limit": limit, "actual": actual},
        )
        self.knob, self.limit, self.actual = knob, limit, actual


class InputTooLarge(ContextEngineError):
    """One embedding input exceeds the provider's per-input cap (never split silently)."""

    code = "input_too_large"
    status = 413


class ProviderError(ContextEngineError):
    """An outbound provider failed. ``code`` is provider_unavailable or provider_rejected."""

    code = "provider_unavailable"
    status = 502


class ModelNotInstalled(ContextEngineError):
    code = "model_not_installed"
    status = 500


class DimensionMismatch(ContextEngineError):
    code = "dimension_mismatch"
    status = 500


class StorageUnavailable(ContextEngineError):
    code = "storage_unavailable"
    status = 503
    retry_after = 1


class MissingExtra(ContextEngineError, ImportError):
    """A feature's optional dependencies are not installed; the message names the extra that brings them."""

    code = "missing_extra"
    status = 500


def require_extra(extra: str, module: str, feature: str) -> None:
    """Raise ``MissingExtra`` unless ``module`` imports: ``pip install "pg-context-engine[<extra>]"``."""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError:
        raise MissingExtra(
            f'{feature} needs the {extra} extra ({module} is not installed): pip install "pg-context-engine[{extra}]"',
            details={"extra": extra},
        ) from None


class DatabaseRefused(ContextEngineError):
    """The server answered and said no (a wrong password, a database that does not exist): not transient."""

    code = "database_authentication_failed"
    status = 500


class StorageBusy(ContextEngineError):
    """Every pooled connection stayed in use for ``storage.pool_timeout``: the request was not run."""

    code = "storage_busy"
    status = 503
    retry_after = 1


class DocumentBusy(ContextEngineError):
    """Another run kept the document (its identity) past ``ingest.write_wait_seconds``: nothing was
    written and no idempotency key was spent, so the same call may simply be sent again."""

    code = "document_busy"
    status = 409
    retry_after = 2

    def __init__(self) -> None:
        super().__init__("another ingest of this document is still running; send the same request again shortly")


def known_failure(exc: BaseException) -> ContextEngineError | None:
    """The stable error a door answers for a third-party failure we can name, else ``None``.

    A pool checkout that timed out is load, not a bug: the caller is told to retry (503), and
    nothing was run, so nothing was half-written.
    """
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    if isinstance(exc, PoolTimeout):
        return StorageBusy("every database connection is in use; retry shortly")
    return None

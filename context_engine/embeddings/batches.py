"""What a provider's asynchronous batch job is, as the engine stores and polls it.

A batch embeds one document's whole chunk set in a single provider job that finishes within hours
at a lower price. The job is identified by a :class:`BatchHandle` (plain JSON, stored beside the
document until the job is done); :class:`BatchProgress` is one poll's answer. Results are paired
with chunks by position (input ``i`` is chunk ordinal ``i``), so a handle always covers the whole
chunk set and its ``count`` is checked against every reply.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from context_engine.errors import InvalidRequest, ProviderError

BatchStatus = Literal["pending", "completed", "failed"]


class BatchNotSupported(InvalidRequest):
    """``batch=True`` was asked of a provider without a batch API (or a document too big for one job).

    422, not 400: the request is well formed, this deployment's provider cannot carry it out."""

    code = "batch_unsupported"
    status = 422


class BatchResultInvalid(ProviderError):
    """A finished job's output does not cover every input exactly once with a vector of the right width."""

    code = "provider_unavailable"


@dataclass(frozen=True)
class BatchHandle:
    """Everything needed to poll and collect a submitted job, in any later process."""

    provider: str
    batch_id: str
    input_file_id: str
    #: how many inputs the job holds: positions 0..count-1
    count: int
    #: ``provider\\tmodel\\tdim`` of the embedder that submitted it; vectors are stored under this key
    embedding_key: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BatchHandle:
        try:
            return cls(
                provider=str(data["provider"]),
                batch_id=str(data["batch_id"]),
                input_file_id=str(data["input_file_id"]),
                count=int(data["count"]),
                embedding_key=str(data["embedding_key"]),
            )
        except (KeyError, TypeError, ValueError):
            raise InvalidRequest("a stored embedding batch handle is incomplete", code="batch_handle_invalid") from None


@dataclass(frozen=True)
class BatchProgress:
    """One poll: ``pending`` (ask again later), ``completed`` (collect the vectors) or ``failed`` (why)."""

    status: BatchStatus
    #: the provider's own word for the state (``validating``, ``in_progress``, ``expired``...)
    provider_status: str
    done: int
    failed: int
    total: int
    output_file_id: str | None = None
    message: str | None = None

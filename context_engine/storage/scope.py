"""The host's ceiling: which sources, and optionally which documents, a tool may ever reach.

A ceiling is set by the host, never by a model. A model may narrow inside it (name fewer source
ids or document ids) and can never widen past it: :func:`narrow_to_ceiling` drops what lies outside.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Scope:
    """Source ids, and optionally document ids within them; ``None`` on a field means no limit there."""

    source_ids: tuple[str, ...] | None = None
    document_ids: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "source_ids", _strings("source_ids", self.source_ids))
        documents = _strings("document_ids", self.document_ids)
        if documents is not None:
            documents = tuple(dict.fromkeys(_document_id(d) for d in documents))
        object.__setattr__(self, "document_ids", documents)



def _strings(field: str, values: Sequence[str] | None) -> tuple[str, ...] | None:
    if values is None:
        return None
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise TypeError(f"Scope.{field} must be a sequence of strings")
    return tuple(dict.fromkeys(values))


def _document_id(value: str) -> str:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise ValueError(f"Scope.document_ids holds {value!r}, which is not a document id (a UUID)") from None


#: the whole corpus, on purpose (every source, every document the caller's principals may read)
UNSCOPED = Scope()


def resolve_scope(scope: Scope | Sequence[str] | None) -> Scope:
    """A ``Scope`` from what a host passed: a ``Scope``, ``UNSCOPED`` or a list of source ids.

    ``None`` raises: a missing ceiling must never mean "everything".
    """
    if scope is None:
        raise ValueError("scope is required: pass a list of source ids, a Scope, or UNSCOPED for the whole corpus")
    if isinstance(scope, Scope):
        return scope
    if isinstance(scope, str):
        raise TypeError("scope must be a list of source ids, not a single string")
    return Scope(source_ids=tuple(scope))


def narrow_to_ceiling(requested: Sequence[str] | None, ceiling: Sequence[str] | None) -> list[str] | None:
    """What a caller asked for, within the ceiling; ``None`` only when neither limits anything.

    ``requested=None`` takes the whole ceiling; an id outside the ceiling is dropped, so a request
    made only of such ids narrows to ``[]`` (nothing in scope), never to the whole ceiling.
    """
    if requested is None:
        return None if ceiling is None else list(ceiling)
    wanted = list(dict.fromkeys(requested))
    if ceiling is None:
        return wanted
    allowed = set(ceiling)
    return [value for value in wanted if value in allowed]

"""The search legs the retriever runs, registered once by name.

A leg is one module with one object: its ``name`` (what ``matched_by``, ``usage``, the fusion
weights and the evaluation harness call it), a ``default_weight`` (used when
``fusion.weights`` does not name it; 0 means off unless configured), ``applies`` (whether it runs
for this query under this configuration) and ``run``, which returns ``[(chunk_id, score)]`` best
first for one of the search's queries. Every leg reads through the caller's ``ReadScope`` predicate,
so a leg added here cannot see more than the others. A leg that scores whole documents and hands
each chunk its document's score sets ``scores_documents = True``, so rank fusion ranks a document's
chunks as one.

The built-in legs (``fts``, ``trigram``, ``vector``, ``graph``, ``document_fts``) register themselves when
:mod:`context_engine.retrieval.legs` is imported; :func:`legs` imports it first, so the registry is
never seen without them. A host or a test adds a leg with :func:`register`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from context_engine.config import ContextEngineConfig
    from context_engine.retrieval.retriever import Search

_LEGS: dict[str, Leg] = {}
_BUILTINS = "context_engine.retrieval.legs"


class Leg(Protocol):
    name: str
    default_weight: float

    def applies(self, query: str, config: ContextEngineConfig) -> bool:
        """Whether this leg runs for ``query`` (its weight is checked by the retriever)."""
        ...

    async def run(self, search: Search, index: int) -> list[tuple[int, float]]:
        """Candidates for ``search.queries[index]``: ``(chunk_id, score)``, higher is better, best first."""
        ...


def register(leg: Leg) -> Leg:
    """Add a leg; a second leg with a registered name is refused (call :func:`unregister` first)."""
    name = getattr(leg, "name", None)
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError("a leg needs a name that is a Python identifier (it is a key in fusion.weights)")
    if name in _LEGS and _LEGS[name] is not leg:
        raise ValueError(f"a search leg named {name!r} is already registered")
    _LEGS[name] = leg
    return leg


def unregister(name: str) -> None:
    _LEGS.pop(name, None)


def legs() -> list[Leg]:
    """Every registered leg, built-ins first, then in registration order."""
    importlib.import_module(_BUILTINS)
    return list(_LEGS.values())


def names() -> list[str]:
    return [leg.name for leg in legs()]


def default_weights() -> dict[str, float]:
    return {leg.name: leg.default_weight for leg in legs()}

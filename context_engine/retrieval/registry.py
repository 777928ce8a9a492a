"""The search legs the retriever runs, registered once by name.

A leg is one module with one object: its ``name`` (what ``matched_by``, ``usage``, the fusion
weights and the evaluation harness call it), a ``default_weight`` (used when
``fusion.weights`` does not name it; 0 means off unless configured), ``applies`` (whether it runs
for this query under this configuration) and ``run``, which returns ``[(chunk_id, score)]`` best
first for one of the search's queries. Every leg reads through the caller's ``ReadScope`` predicate,
so a leg added here cannot see more than the others. A leg that scores whole documents and hands
each chunk its document's score sets ``scores_documents = True``, so rank fusion ranks a document's
chunks as one. A leg that awaits ``search.vectors()`` sets ``embeds_queries = True``, so the
retriever starts the embedding before any leg's statements (it is the longest wait of a search).

The built-in legs (``fts``, ``trigram``, ``vector``, ``graph``, ``document_fts``) register themselves when
:mod:`context_engine.retrieval.legs` is imported; :func:`legs` imports it first, so the registry is
never seen without them. A host or a test adds a leg with :func:`register`. What a leg is
(:class:`~context_engine.retrieval.leg.Leg`) is defined in :mod:`context_engine.retrieval.leg`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from context_engine.errors import ConfigError
from context_engine.retrieval.leg import Leg

_LEGS: dict[str, Leg] = {}
_BUILTINS = "context_engine.retrieval.legs"


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


def weights(configured: Mapping[str, float]) -> dict[str, float]:
    """Every registered leg's fusion weight: ``configured`` (``fusion.weights``) where it names the
    leg, else the leg's default. A name no registered leg has is refused: the settings are read
    before a host registers its legs, so this, not the settings, is where a misspelt leg is caught."""
    merged = {leg.name: leg.default_weight for leg in legs()}
    for leg in configured:
        if leg not in merged:
            raise ConfigError(
                f"fusion.weights: no search leg is named {leg!r}; known legs: {', '.join(merged)}",
                code="unknown_search_leg",
            )
    merged.update(configured)
    return merged

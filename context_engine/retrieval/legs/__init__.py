"""The built-in search legs, registered with :mod:`context_engine.retrieval.registry` on import."""

from context_engine.retrieval.legs.document_fts import DocumentFullTextLeg, document_fts_leg
from context_engine.retrieval.legs.fts import FullTextLeg, fts_leg
from context_engine.retrieval.legs.graph import GraphLeg
from context_engine.retrieval.legs.trigram import TrigramLeg, trigram_leg
from context_engine.retrieval.legs.vector import VectorLeg, plan_for, vector_leg
from context_engine.retrieval.registry import register

for _leg in (FullTextLeg(), TrigramLeg(), VectorLeg(), GraphLeg(), DocumentFullTextLeg()):
    register(_leg)

__all__ = [
    "DocumentFullTextLeg",
    "FullTextLeg",
    "GraphLeg",
    "TrigramLeg",
    "VectorLeg",
    "document_fts_leg",
    "fts_leg",
    "plan_for",
    "trigram_leg",
    "vector_leg",
]

"""Rerankers behind one interface: Cohere, Voyage and Jina over HTTP, and an LLM judge.

Scores are 0-1 for every provider. Which judge the knowledge pipeline uses, and the guards that
decide whether its verdict is used at all, are in :mod:`context_engine.knowledge.pipeline`.
"""

from context_engine.rerank.base import Reranker, RerankResult
from context_engine.rerank.factory import build_reranker

__all__ = ["RerankResult", "Reranker", "build_reranker"]

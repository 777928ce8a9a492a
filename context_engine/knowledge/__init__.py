"""The knowledge pipeline behind ``ContextEngine.knowledge_query`` and ``POST /knowledge/query``.

- :mod:`~context_engine.knowledge.pipeline`: expand, search, fuse, widen, guarded rerank, trace;
- :mod:`~context_engine.knowledge.guard`: when a rerank verdict is used, and the fallback order;
- :mod:`~context_engine.knowledge.agents`: agent -> source links (``agentId``);
- the route's scope check and per-caller rate limit live in :mod:`routing_core.access` (HTTP policy).
"""

from context_engine.knowledge.models import AgentLinks, KnowledgeMatch, KnowledgeResult, KnowledgeTrace

__all__ = ["AgentLinks", "KnowledgeMatch", "KnowledgeResult", "KnowledgeTrace"]

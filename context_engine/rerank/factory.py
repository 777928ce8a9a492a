"""From settings to the rerank judge the knowledge pipeline uses (or none)."""

from __future__ import annotations

from context_engine.config import ContextEngineConfig
from context_engine.errors import ConfigError
from context_engine.llm.base import LLMClient
from context_engine.llm.factory import build_llm
from context_engine.providers.http import HttpClientFactory
from context_engine.rerank.base import Reranker
from context_engine.rerank.http import HttpReranker
from context_engine.rerank.llm_judge import LLMJudgeReranker


def build_reranker(
    config: ContextEngineConfig, http_client_factory: HttpClientFactory | None = None, llm: LLMClient | None = None
) -> Reranker | None:
    """``rerank.provider`` when set; the LLM judge when only ``llm`` is set; else None (no rerank).

    ``llm`` lets the judge share an already-built client (and its connection) with expansion.
    """
    rerank = config.rerank
    if rerank is None or rerank.provider == "llm":
        if config.llm is None:
            if rerank is not None:
                raise ConfigError("rerank.provider 'llm' needs the llm section (CE_LLM__PROVIDER, ...).")
            return None
        return LLMJudgeReranker(llm or build_llm(config.llm, http_client_factory))
    return HttpReranker(rerank, http_client_factory)

"""context-engine: permission-aware hybrid retrieval on your own PostgreSQL.

``import context_engine`` imports no web framework: the mount functions for FastAPI, Flask and
Django are resolved lazily on first access.
"""

from __future__ import annotations

from typing import Any

from context_engine.compute.action import CodeRunner, compute_over_frames
from context_engine.config import (
    ContextEngineConfig,
    EmbeddingConfig,
    FusionConfig,
    IngestConfig,
    LLMConfig,
    SearchConfig,
    StorageConfig,
)
from context_engine.document_fields import extract_structured_data
from context_engine.engine import ContextEngine
from context_engine.errors import (
    ContextEngineError,
    Forbidden,
    IngestTooLarge,
    InputTooLarge,
    InvalidRequest,
    NotFound,
    ProviderError,
)
from context_engine.knowledge.tool import KNOWLEDGE_ACTIONS, call_knowledge_tool, knowledge_tool_definition
from context_engine.llm import call_llm
from context_engine.principals import TRUSTED
from context_engine.providers import HttpClientFactory, HttpClientPurpose
from context_engine.redaction import RedactionPolicy, RedactionRule, presidio_detectors
from context_engine.retrieval.legs.graph import GRAPH_REASONS
from context_engine.storage.scope import UNSCOPED, Scope
from context_engine.tools import ToolConfig, format_result, resolve_approval, rows_to_tsv
from context_engine.vision import extract_pdf_pages, extract_text_from_images

__version__ = "0.1.0"

#: mount functions imported on first use: (their module, the extra that installs their framework, its module)
_LAZY = {
    "create_router": ("adapters.fastapi", "fastapi", "fastapi"),
    "create_flask_blueprint": ("adapters.flask", "flask", "flask"),
    "create_django_urlpatterns": ("adapters.django", "django", "django"),
    "create_mcp_app": ("context_engine.mcp", "mcp", "mcp"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        from context_engine.errors import require_extra

        module, extra, framework = _LAZY[name]
        require_extra(extra, framework, name)
        return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module 'context_engine' has no attribute {name!r}")


__all__ = [
    "GRAPH_REASONS",
    "KNOWLEDGE_ACTIONS",
    "TRUSTED",
    "UNSCOPED",
    "CodeRunner",
    "ContextEngine",
    "ContextEngineConfig",
    "ContextEngineError",
    "EmbeddingConfig",
    "Forbidden",
    "FusionConfig",
    "HttpClientFactory",
    "HttpClientPurpose",
    "IngestConfig",
    "IngestTooLarge",
    "InputTooLarge",
    "InvalidRequest",
    "LLMConfig",
    "NotFound",
    "ProviderError",
    "RedactionPolicy",
    "RedactionRule",
    "Scope",
    "SearchConfig",
    "StorageConfig",
    "ToolConfig",
    "call_knowledge_tool",
    "call_llm",
    "compute_over_frames",
    "create_django_urlpatterns",
    "create_flask_blueprint",
    "create_mcp_app",
    "create_router",
    "extract_pdf_pages",
    "extract_structured_data",
    "extract_text_from_images",
    "format_result",
    "knowledge_tool_definition",
    "presidio_detectors",
    "resolve_approval",
    "rows_to_tsv",
]

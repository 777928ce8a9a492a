"""context-engine: permission-aware hybrid retrieval on your own PostgreSQL.

``import context_engine`` imports no web framework: the mount functions for FastAPI, Flask and
Django are resolved lazily on first access.
"""

from __future__ import annotations

from typing import Any

from context_engine.config import (
    ContextEngineConfig,
    EmbeddingConfig,
    FusionConfig,
    IngestConfig,
    SearchConfig,
    StorageConfig,
)
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
from context_engine.principals import TRUSTED

__version__ = "0.1.0"

_LAZY = {
    "create_router": ("adapters.fastapi", "create_router"),
    "create_flask_blueprint": ("adapters.flask", "create_flask_blueprint"),
    "create_django_urlpatterns": ("adapters.django", "create_django_urlpatterns"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'context_engine' has no attribute {name!r}")


__all__ = [
    "TRUSTED",
    "ContextEngine",
    "ContextEngineConfig",
    "ContextEngineError",
    "EmbeddingConfig",
    "Forbidden",
    "FusionConfig",
    "IngestConfig",
    "IngestTooLarge",
    "InputTooLarge",
    "InvalidRequest",
    "NotFound",
    "ProviderError",
    "SearchConfig",
    "StorageConfig",
    "create_django_urlpatterns",
    "create_flask_blueprint",
    "create_router",
]

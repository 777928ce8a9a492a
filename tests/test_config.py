"""Configuration: nested sections, CE_ environment variables, misspellings raise by name."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from context_engine import ContextEngineConfig
from context_engine.retrieval import registry


def test_defaults_need_nothing() -> None:
    config = ContextEngineConfig()
    assert config.database_url is None
    assert config.embedding.provider == "local"
    assert config.fusion.k == 10
    assert config.fusion.method == "convex"
    # the settings hold only the weights set; each leg's default comes from the leg registry
    assert config.fusion.weights == {}
    assert registry.weights(config.fusion.weights) == {
        "fts": 1.4, "trigram": 0.0, "vector": 1.0, "graph": 1.0, "document_fts": 0.0
    }


def test_misspelt_setting_raises_naming_it() -> None:
    with pytest.raises(ValidationError, match="pool_sise"):
        ContextEngineConfig(storage={"pool_sise": 3})  # type: ignore[arg-type]
    config = ContextEngineConfig()
    with pytest.raises(ValidationError, match="vector_flor"):
        config.search.vector_flor = "adaptive"  # type: ignore[attr-defined]
    with pytest.raises(ValidationError, match="vector_floor"):
        config.search.vector_floor = "sometimes"  # type: ignore[assignment]


def test_environment_with_nesting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CE_EMBEDDING__PROVIDER", "openai")
    monkeypatch.setenv("CE_STORAGE__POOL_SIZE", "7")
    monkeypatch.setenv("CE_FUSION__K", "30")
    config = ContextEngineConfig.from_env()
    assert config.embedding.provider == "openai"
    assert config.storage.pool_size == 7
    assert config.fusion.k == 30


def test_unknown_environment_setting_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CE_EMBEDDNG__PROVIDER", "openai")
    with pytest.raises(ValueError, match="CE_EMBEDDNG__PROVIDER"):
        ContextEngineConfig.from_env()


def test_secrets_do_not_print() -> None:
    config = ContextEngineConfig(database_url="postgresql://u:hunter2@db/x", embedding={"api_key": "sk-secret"})
    assert "hunter2" not in repr(config) and "sk-secret" not in repr(config)

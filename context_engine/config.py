"""``ContextEngineConfig``: the one settings object.

Built in code or from ``CE_``-prefixed environment variables with ``__`` nesting
(``CE_EMBEDDING__PROVIDER=openai``). Every section forbids unknown keys and validates on
assignment, so a misspelt setting raises and names itself instead of being silently ignored.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

_STRICT = ConfigDict(extra="forbid", validate_assignment=True)

EmbeddingProvider = Literal["local", "openai", "azure_openai", "custom", "cohere", "voyage"]


class EmbeddingConfig(BaseModel):
    """Which model turns text into vectors, and how requests to it are shaped."""

    model_config = _STRICT

    provider: EmbeddingProvider = "local"
    #: model name; ``None`` picks the provider's default (all-MiniLM-L6-v2 for ``local``)
    model: str | None = None
    api_key: SecretStr | None = None
    base_url: str | None = None
    #: vector width; ``None`` = the model's native width (384 for the local default)
    dim: int | None = Field(default=None, ge=1, le=16000)
    #: Azure OpenAI only
    api_version: str | None = None
    deployment: str | None = None
    max_retries: int = Field(default=2, ge=0, le=20)
    #: per-attempt timeout in seconds
    timeout: float = Field(default=60.0, gt=0)
    #: batch caps; ``None`` = the per-provider table
    max_batch_items: int | None = Field(default=None, ge=1)
    max_batch_tokens: int | None = Field(default=None, ge=1)
    max_input_tokens: int | None = Field(default=None, ge=1)
    max_concurrency: int = Field(default=4, ge=1, le=64)
    tokenizer: Literal["auto", "estimate"] = "auto"
    token_bytes_ratio: float = Field(default=3.0, gt=0)
    safety_margin: float = Field(default=0.85, gt=0, le=1)
    #: ``local`` only: worker threads for the numpy forward pass
    local_threads: int = Field(default=2, ge=1, le=64)


class StorageConfig(BaseModel):
    """Where the data lives and how connections are pooled."""

    model_config = _STRICT

    #: directory for the embedded PostgreSQL when no ``database_url`` is given
    data_dir: Path | None = None
    pool_size: int = Field(default=5, ge=1)
    max_overflow: int = Field(default=10, ge=0)
    pool_timeout: float = Field(default=30.0, gt=0)
    pool_recycle: int = Field(default=1800, ge=-1)
    pool_pre_ping: bool = True
    #: migrate a configured ``database_url`` on first use (the embedded server always is)
    auto_migrate: bool = False
    #: vector leg: below this many eligible rows scan exactly, above it use the HNSW index
    ann_exact_threshold: int = Field(default=20000, ge=0)


class SearchConfig(BaseModel):
    """How each search leg matches and ranks."""

    model_config = _STRICT

    #: text-search configuration of the full-text leg (fixed at migrate time, see README)
    text_search_config: Literal["english", "simple"] = "english"
    #: ``all``: every query word must match; ``any``: any non-stopword may match
    lexical_match: Literal["all", "any"] = "any"
    lexical_rank: Literal["ts_rank_cd", "ts_rank"] = "ts_rank_cd"
    #: Postgres length-normalisation bitmask passed to the rank function (0..63)
    lexical_normalization: int = Field(default=1, ge=0, le=63)
    #: candidates each leg hands to fusion
    candidates: int = Field(default=50, ge=1, le=1000)
    #: pin the trigram threshold; ``None`` follows the query's shape
    trgm_limit: float | None = Field(default=None, gt=0, le=1)
    #: skip the trigram leg for queries longer than this many words; ``None`` = never skip
    trgm_max_query_words: int | None = Field(default=None, ge=1)
    #: ``adaptive`` drops weak vector candidates by a query-shaped cosine floor
    vector_floor: Literal["adaptive"] | None = None
    #: upper bound accepted for ``top_k``
    max_top_k: int = Field(default=100, ge=1, le=1000)


class FusionConfig(BaseModel):
    """Weighted reciprocal rank fusion across legs."""

    model_config = _STRICT

    k: int = Field(default=20, ge=1)
    #: weight per leg; a leg weighted 0 does not run
    weights: dict[Literal["fts", "trigram", "vector"], float] = Field(
        default_factory=lambda: {"fts": 1.0, "trigram": 0.4, "vector": 1.0}
    )

    @field_validator("weights")
    @classmethod
    def _non_negative(cls, value: dict[str, float]) -> dict[str, float]:
        for leg, weight in value.items():
            if weight < 0:
                raise ValueError(f"fusion weight for {leg!r} must be >= 0, got {weight}")
        merged = {"fts": 1.0, "trigram": 0.4, "vector": 1.0}
        merged.update(value)
        return merged


class IngestConfig(BaseModel):
    """Intake caps and chunking."""

    model_config = _STRICT

    max_file_bytes: int | None = Field(default=256 * 1024 * 1024, ge=1)
    max_rows: int | None = Field(default=None, ge=1)
    #: target size of one chunk, in tokens of the embedder's tokenizer
    chunk_tokens: int = Field(default=256, ge=16, le=8192)
    resume_stale_seconds: int = Field(default=600, ge=0)


class ContextEngineConfig(BaseSettings):
    """All settings. ``database_url=None`` starts an embedded PostgreSQL in ``storage.data_dir``."""

    model_config = SettingsConfigDict(
        env_prefix="CE_",
        env_nested_delimiter="__",
        extra="forbid",
        validate_assignment=True,
    )

    database_url: SecretStr | None = None
    embedding: EmbeddingConfig = Field(default_factory=EmbeddingConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    fusion: FusionConfig = Field(default_factory=FusionConfig)
    ingest: IngestConfig = Field(default_factory=IngestConfig)
    #: general secret (hash keys fall back to it)
    secret_key: SecretStr | None = None

    @classmethod
    def from_env(cls) -> ContextEngineConfig:
        """Build from ``CE_*`` variables; an unknown ``CE_`` variable raises and is named."""
        import os

        known = {f"CE_{name.upper()}" for name in cls.model_fields}
        for var in os.environ:
            if var.startswith("CE_") and var.split("__", 1)[0] not in known:
                raise ValueError(f"unknown setting in environment: {var}")
        return cls()


def database_url_text(config: ContextEngineConfig) -> str | None:
    """The plain URL (kept secret everywhere else so it never lands in a log or repr)."""
    return config.database_url.get_secret_value() if config.database_url else None


def warn_deprecated(message: str) -> None:
    warnings.warn(message, DeprecationWarning, stacklevel=3)

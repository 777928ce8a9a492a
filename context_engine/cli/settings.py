"""The settings a command starts from, shared by every subcommand."""

from __future__ import annotations

from context_engine.config import ContextEngineConfig


def config_for(database_url: str | None) -> ContextEngineConfig:
    """The settings from ``CE_*`` variables, with ``--database-url`` over ``CE_DATABASE_URL``."""
    return ContextEngineConfig(database_url=database_url) if database_url else ContextEngineConfig()

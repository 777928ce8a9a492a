"""The ``compute`` settings live with every other setting, in :mod:`context_engine.config`."""

from __future__ import annotations

from context_engine.config import ComputeConfig

__all__ = ["ComputeConfig"]

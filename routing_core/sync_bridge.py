"""The one background loop sync hosts (Flask, Django) run the engine on; it lives in the library
(``context_engine.sync_loop``) so the framework integrations share it too."""

from __future__ import annotations

from context_engine.sync_loop import ExitSafeExecutor, run

__all__ = ["ExitSafeExecutor", "run"]

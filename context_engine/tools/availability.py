"""Whether stored tools (http, db, mcp) can run here: their configs are sealed under ``secret_key``.

A deployment without one still serves function tools and the knowledge tool; it says that the stored
tools are off (``GET /ready``, the knowledge tool's ``discover``) and refuses to run one with a
stable 503 ``tools_disabled``, rather than failing inside the call.
"""

from __future__ import annotations

from pydantic import SecretStr

from context_engine.errors import ContextEngineError

#: what ``/ready`` and ``discover`` say when there is no key
NO_SECRET_KEY = (
    "http, db and mcp tools are disabled: no secret_key is set (CE_SECRET_KEY), and their stored configs "
    "are encrypted under it; function tools still run"
)


class ToolsDisabled(ContextEngineError):
    """A stored tool was called on a deployment that has no key to open its config."""

    code = "tools_disabled"
    status = 503


def stored_tools_off(secret_key: SecretStr | str | bytes | None) -> str | None:
    """Why stored tools cannot run here (``None``: they can)."""
    if isinstance(secret_key, SecretStr):
        secret_key = secret_key.get_secret_value()
    return NO_SECRET_KEY if not secret_key else None

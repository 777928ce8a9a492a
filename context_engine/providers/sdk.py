"""Optional SDKs are imported when their provider is built, never at ``import context_engine``.

A missing extra fails at startup, with the install command, rather than on the first request.
"""

from __future__ import annotations

import importlib
from typing import Any


def install_hint(extra: str) -> str:
    return f'pip install "pg-context-engine[{extra}]"'


def import_sdk(module: str, *, needed_by: str, extra: str) -> Any:
    """``module`` imported, or ImportError saying who needs it and which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{needed_by}: {install_hint(extra)}") from exc

"""Keeping credentials out of what a provider's failure says: its key, and its whole error body.

A provider may echo the key back in an error body; every message built from a reply passes
through :func:`redact` (and :func:`error_snippet` shortens the body after redacting, so a key cut
in half by the limit cannot leak either).
"""

from __future__ import annotations

import json
from typing import Any

SNIPPET_CHARS = 300


def redact(text: str, secrets: tuple[str, ...]) -> str:
    """Remove every secret from ``text``."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    return text


def secret_of(value: Any) -> str | None:
    """The plain text of a ``SecretStr`` (or None), kept out of every repr and message."""
    if value is None:
        return None
    plain = value.get_secret_value() if hasattr(value, "get_secret_value") else str(value)
    return plain or None


def error_snippet(body: Any, secrets: tuple[str, ...] = ()) -> str:
    """The provider's own error text, short: enough to act on, never a whole payload."""
    if isinstance(body, (bytes, bytearray)):
        body = body.decode("utf-8", errors="replace")
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            pass
    text: str
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            found = inner.get("message") or inner.get("detail") or inner.get("error")
            text = str(found) if found else json.dumps(body)
        else:
            text = str(body.get("message") or body.get("detail") or inner)
    elif body is None:
        text = ""
    else:
        text = str(body)
    text = " ".join(redact(text, secrets).split())
    if len(text) > SNIPPET_CHARS:
        text = text[: SNIPPET_CHARS - 3] + "..."
    return text

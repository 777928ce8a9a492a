"""A failed call's error text, reduced before anyone sees it.

First what carries row data goes (DETAIL/HINT/CONTEXT/``LINE n`` and caret lines, the
``[SQL: ...]``/``[parameters: ...]`` echo, the statement echoed back, every single-quoted literal
blanked to ``'?'``; double-quoted identifiers stay, as they name what broke), then the call's
redaction policy masks the rest. If masking fails the fixed ``WITHHELD`` sentence is used instead.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable

log = logging.getLogger("context_engine.tools")

WITHHELD = "error text withheld: the redaction policy could not be applied"
_DROP_LINE = re.compile(r"^\s*(DETAIL|HINT|CONTEXT|QUERY|WHERE|STATEMENT|LINE \d+)\b.*$|^\s*\^\s*$", re.MULTILINE)
_ECHO = re.compile(r"\[(SQL|parameters): .*?\](?=\s*(\(Background|\[|$))", re.DOTALL)
_BACKGROUND = re.compile(r"\(Background on this error at: [^)]*\)")
_QUOTED = re.compile(r"'(?:[^']|'')*'")
MAX_ERROR_CHARS = 2000


def strip_error_text(text: str, *, statements: Iterable[str] = (), secrets: Iterable[str] = ()) -> str:
    """``text`` without the parts that carry data, and without any of ``secrets`` or ``statements``."""
    text = _without(text, secrets)
    text = _ECHO.sub("", text)
    text = _BACKGROUND.sub("", text)
    for statement in statements:
        if statement and statement.strip():
            text = text.replace(statement, "").replace(statement.strip(), "")
    text = _DROP_LINE.sub("", text)
    text = _QUOTED.sub("'?'", text)
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    reduced = " ".join(lines).strip() or "the tool call failed"
    return reduced[:MAX_ERROR_CHARS]


def _without(text: str, secrets: Iterable[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        if secret:
            text = text.replace(secret, "[secret]")
    return text


def masked_error_text(
    text: str,
    mask: Callable[[str], str | None],
    *,
    strip: bool = True,
    statements: Iterable[str] = (),
    secrets: Iterable[str] = (),
) -> str:
    """Stripped (unless ``strip`` is false: our own messages carry no row data), then masked; the
    fixed ``WITHHELD`` sentence when masking itself fails. Secrets are always replaced."""
    if strip:
        stripped = strip_error_text(text, statements=statements, secrets=secrets)
    else:
        stripped = _without(text, secrets)
    try:
        masked = mask(stripped)
    except Exception as exc:
        log.error("tool error text withheld: masking failed (%s: %s)", type(exc).__name__, exc)
        return WITHHELD
    return masked if masked is not None else stripped

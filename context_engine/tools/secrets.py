"""The secret values inside a tool's config, so none of them can leave in a result or an error.

A remote service may echo a credential back (an error page quoting the Authorization header, a
driver message naming the URL); every returned value, audit row and error is scrubbed of these,
and so is any record the HTTP libraries log while the tool runs (httpx logs each request's URL,
static query secrets included).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from urllib.parse import unquote, urlsplit

REPLACEMENT = "[secret]"
_SECRET_KEY = re.compile(r"secret|token|password|passwd|api[_-]?key|authorization|credential|cookie", re.I)
_MIN_CHARS = 6


def secret_values(config: dict[str, Any]) -> list[str]:
    """Header and static query values, any value under a secret-sounding key, and URL passwords."""
    found: set[str] = set()
    for key in ("headers", "query"):
        section = config.get(key)
        if isinstance(section, dict):
            found.update(v for v in section.values() if isinstance(v, str))
    _walk(config, found, inherited=False)
    for key in ("url", "database_url"):
        value = config.get(key)
        if isinstance(value, str):
            try:
                parts = urlsplit(value)
            except ValueError:
                continue
            if parts.password:
                found.update({parts.password, unquote(parts.password)})
            if key == "database_url":
                found.add(value)
    for value in list(found):  # "Bearer xyz": the token alone must go too
        found.update(word for word in value.split() if len(word) >= _MIN_CHARS)
    return sorted((v for v in found if len(v) >= _MIN_CHARS), key=len, reverse=True)


def _walk(value: Any, found: set[str], *, inherited: bool) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _walk(item, found, inherited=inherited or bool(_SECRET_KEY.search(str(key))))
    elif isinstance(value, list):
        for item in value:
            _walk(item, found, inherited=inherited)
    elif isinstance(value, str) and inherited:
        found.add(value)


def scrub(value: Any, secrets: list[str]) -> Any:
    """``value`` with every occurrence of a secret replaced, in strings at any depth (and keys)."""
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in secrets:
            if secret in value:
                value = value.replace(secret, REPLACEMENT)
        return value
    if isinstance(value, dict):
        return {scrub(k, secrets): scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v, secrets) for v in value]
    return value


#: the secrets of the tool call running in this context (a task's own copy, so calls never mix)
_ACTIVE: ContextVar[tuple[str, ...]] = ContextVar("context_engine_tool_secrets", default=())
#: the HTTP libraries that log request lines (httpx logs every URL, query string included, at INFO)
_LIBRARY_LOGGERS = (
    "httpx",
    "httpx2",
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "mcp.client.streamable_http",
)
_installed = False
_install_lock = threading.Lock()


class _ScrubSecrets(logging.Filter):
    """Rewrites a library's log record when the current tool call's secrets appear in it."""

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = _ACTIVE.get()
        if secrets:
            message = record.getMessage()
            cleaned = scrub(message, list(secrets))
            if cleaned != message:
                record.msg, record.args = cleaned, None
        return True


@contextmanager
def hidden_from_logs(secrets: list[str]) -> Iterator[None]:
    """While a tool runs, keep its config's secrets out of the HTTP libraries' log records."""
    global _installed
    if not _installed:
        with _install_lock:
            if not _installed:
                for name in _LIBRARY_LOGGERS:
                    logging.getLogger(name).addFilter(_ScrubSecrets())
                _installed = True
    token = _ACTIVE.set(tuple(secrets))
    try:
        yield
    finally:
        _ACTIVE.reset(token)

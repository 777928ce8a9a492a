"""The secret values inside a tool's config, so none of them can leave in a result or an error.

A remote service may echo a credential back (an error page quoting the Authorization header, a
driver message naming the URL), and a transport encodes it first (httpx sends ``a+b/c`` as
``a%2Bb%2Fc``, Basic auth sends ``user:password`` as base64). Every returned value, audit row and
error is scrubbed of each secret in each such encoding, and so is every log record made while the
tool runs, whichever logger makes it (httpx logs each request's URL, static query secrets included).
"""

from __future__ import annotations

import base64
import html
import json
import logging
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlencode, urlsplit

import httpx

REPLACEMENT = "[secret]"
_SECRET_KEY = re.compile(r"secret|token|password|passwd|api[_-]?key|authorization|credential|cookie", re.I)
_MIN_CHARS = 6


def secret_values(config: dict[str, Any]) -> list[str]:
    """Every form in which the config's secrets could leave: each raw secret (header and static
    query values, the url's own query values, any value under a secret-sounding key, URL
    passwords, Basic credentials) and each of its encodings (see :func:`encodings`)."""
    found: set[str] = set()
    for key in ("headers", "query"):
        section = config.get(key)
        if isinstance(section, dict):
            found.update(v for v in section.values() if isinstance(v, str))
    _walk(config, found, inherited=False)
    for key in ("url", "database_url"):
        value = config.get(key)
        if isinstance(value, str):
            found.update(_url_secrets(value, whole=key == "database_url"))
    headers = config.get("headers")
    if isinstance(headers, dict):
        for header in headers.values():
            if isinstance(header, str):
                found |= _basic_credentials(header)
    for value in list(found):  # "Bearer xyz": the token alone must go too
        found.update(word for word in value.split() if len(word) >= _MIN_CHARS)
    every = {form for value in found if len(value) >= _MIN_CHARS for form in encodings(value)}
    return sorted((v for v in every if len(v) >= _MIN_CHARS), key=len, reverse=True)


def encodings(value: str) -> set[str]:
    """``value`` as each transport may carry it: raw; percent-encoded as ``quote`` (with and
    without ``/`` kept), ``quote_plus`` and form bodies, httpx's own query encoding, each with
    upper- and lower-case hex, and once more percent-encoded; JSON-escaped (ASCII or not, ``/`` kept
    or escaped); HTML-escaped; base64 (standard and URL-safe, with and without padding)."""
    percent = {
        quote(value, safe=""),
        quote(value, safe="/"),
        quote_plus(value, safe=""),
        quote_plus(value, safe="/"),
        urlencode({"": value})[1:],
        str(httpx.QueryParams({"k": value}))[2:],
    }
    percent |= {_lower_hex(p) for p in percent}
    percent |= {quote(p, safe="") for p in set(percent)}
    as_json = {json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
    as_json |= {j.replace("/", "\\/") for j in as_json}
    raw = value.encode("utf-8")
    as_base64 = {base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()}
    as_base64 |= {b.rstrip("=") for b in as_base64}
    return {value, html.escape(value), *percent, *as_json, *as_base64}


def _lower_hex(text: str) -> str:
    return _PERCENT.sub(lambda m: m.group(0).lower(), text)


_PERCENT = re.compile(r"%[0-9A-F]{2}")


def _url_secrets(url: str, *, whole: bool) -> set[str]:
    """A URL's password, its ``user:password`` pair (what Basic auth encodes), its query values,
    and for a database URL the whole URL."""
    try:
        parts = urlsplit(url)
        found = {url} if whole else set()
        if parts.password:
            password = unquote(parts.password)
            found |= {parts.password, password, f"{unquote(parts.username or '')}:{password}"}
        found.update(v for _k, v in parse_qsl(parts.query, keep_blank_values=False))
    except ValueError:
        return set()
    return found


def _basic_credentials(header: str) -> set[str]:
    """The ``user:password`` inside a ``Basic`` header value, and its password."""
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic" or not token:
        return set()
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return set()
    return {decoded, decoded.partition(":")[2]}


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
_installed = False
_install_lock = threading.Lock()


def _scrubbing_factory(previous: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    """A log-record factory that builds each record with ``previous``, then, while a tool call runs
    in this context, rewrites its message, traceback and stack text without the call's secrets.

    Scrubbing where records are made covers every logger (httpx's request line, httpcore, the
    MCP SDK, a host client's own event hooks, ours) and every handler, added before or after.
    """

    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        secrets = _ACTIVE.get()
        if secrets:
            _scrub_record(record, list(secrets))
        return record

    return make


def _scrub_record(record: logging.LogRecord, secrets: list[str]) -> None:
    """Rewrite only what carries a secret, so other records keep their message template and args."""
    try:
        message = record.getMessage()
    except Exception:  # a malformed call (its arguments do not fit): the bare message is kept
        message = str(record.msg)
    cleaned = scrub(message, secrets)
    if cleaned != message:
        record.msg, record.args = cleaned, None
    if record.exc_info:
        text = logging.Formatter().formatException(record.exc_info)
        cleaned = scrub(text, secrets)
        if cleaned != text:
            record.exc_info, record.exc_text = None, cleaned
    elif record.exc_text:
        record.exc_text = scrub(record.exc_text, secrets)
    if record.stack_info:
        record.stack_info = scrub(record.stack_info, secrets)


def _install() -> None:
    global _installed
    if not _installed:
        with _install_lock:
            if not _installed:
                logging.setLogRecordFactory(_scrubbing_factory(logging.getLogRecordFactory()))
                _installed = True


@contextmanager
def hidden_from_logs(secrets: list[str]) -> Iterator[None]:
    """While a tool call runs, keep its config's secrets (in every encoding) out of every log record
    made in its context, whichever logger makes it."""
    _install()
    token = _ACTIVE.set(tuple(secrets))
    try:
        yield
    finally:
        _ACTIVE.reset(token)

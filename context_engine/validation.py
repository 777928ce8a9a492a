"""Pure checks of caller input: what PostgreSQL, the JSON encoder or a reader later could not take.

A value that passes is safe to store and to read back: no NUL character (PostgreSQL text refuses
it), no lone surrogate (it cannot be encoded as UTF-8), no non-finite number (JSON has none), no
nesting deeper than a reader will follow, nothing longer than its limit. Every refusal is an
:class:`~context_engine.errors.InvalidRequest` (400) whose message names the field, except that a
string that is no document id names no document: :func:`check_document_id` answers ``NotFound``.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from typing import Any

from context_engine.errors import InvalidRequest, NotFound


def check_text(value: Any, field: str, max_chars: int | None = None, *, required: bool = False) -> str:
    """A string that PostgreSQL can store and UTF-8 can encode, at most ``max_chars`` long."""
    if not isinstance(value, str):
        raise InvalidRequest(f"{field} must be a string")
    if required and not value.strip():
        raise InvalidRequest(f"{field} must be a non-empty string")
    if "\x00" in value:
        raise InvalidRequest(f"{field} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest(f"{field} must be valid Unicode text (it contains a lone surrogate)") from None
    if max_chars is not None and len(value) > max_chars:
        raise InvalidRequest(f"{field} is longer than {max_chars} characters")
    return value


def check_question(value: Any, field: str, max_chars: int) -> str:
    """A query, question or instruction: a string with a word in it, at most ``max_chars`` long, stripped."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest(f"{field} must be a non-empty string")
    if len(value) > max_chars:
        raise InvalidRequest(f"{field} is longer than {max_chars} characters")
    return value.strip()


def check_text_list(values: Any, field: str, *, max_items: int, max_chars: int) -> list[str]:
    """A list of non-empty strings, each passing :func:`check_text`."""
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise InvalidRequest(f"{field} must be a list of strings")
    if len(values) > max_items:
        raise InvalidRequest(f"{field} lists more than {max_items} items")
    return [check_text(value, f"{field}[{i}]", max_chars, required=True) for i, value in enumerate(values)]


def check_int_range(value: Any, field: str, minimum: int, maximum: int) -> int:
    """An integer (never a bool or a numeric string) within ``minimum..maximum``."""
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise InvalidRequest(f"{field} must be an integer between {minimum} and {maximum}")
    return value


def check_id_list(values: Sequence[str] | None, field: str) -> list[str] | None:
    """``None``, or a list (never a lone string) of strings: a filter of ids, as given."""
    if values is None:
        return None
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise InvalidRequest(f"{field} must be a list of strings")
    return list(values)


def check_document_ids(values: Sequence[str] | None) -> list[str] | None:
    """``None``, or a ``document_ids`` filter of document ids (UUIDs) in their canonical form."""
    if values is None:
        return None
    checked = check_id_list(values, "document_ids") or []
    try:
        return [str(uuid.UUID(v)) for v in checked]
    except ValueError:
        raise InvalidRequest("document_ids must be document id strings (UUIDs)") from None


def check_document_id(value: Any) -> str:
    """A document id in its canonical form; anything else is ``NotFound``, as an id nothing holds is."""
    try:
        return str(uuid.UUID(str(value)))
    except (ValueError, TypeError):
        raise NotFound(f"document {value} not found") from None


def check_json_value(value: Any, field: str, max_depth: int) -> Any:
    """A JSON value whose strings, keys and numbers pass, nested at most ``max_depth`` deep.

    ``field`` names the value in messages (``""`` for a whole request body, whose members are then
    named by their own keys). Walks iteratively, so a hostile depth costs a refusal, not a
    ``RecursionError``.
    """
    stack: list[tuple[Any, str, int]] = [(value, field, 1)]
    while stack:
        node, where, depth = stack.pop()
        if isinstance(node, dict | list) and depth > max_depth:
            raise InvalidRequest(f"{field or 'the body'} nests deeper than {max_depth} levels")
        if isinstance(node, dict):
            for key, item in node.items():
                check_text(key, f"a key of {where or 'the body'}")
                stack.append((item, f"{where}.{key[:40]}" if where else key[:40], depth + 1))
        elif isinstance(node, list):
            stack.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(node))
        elif isinstance(node, str):
            check_text(node, where or "the body")
        elif isinstance(node, float) and not math.isfinite(node):
            raise InvalidRequest(f"{where or 'the body'} must be a finite number")
        elif node is not None and not isinstance(node, bool | int | float):
            raise InvalidRequest(f"{where or 'the body'} must be a JSON value")
    return value


def check_json_object(value: Any, field: str, max_depth: int) -> dict[str, Any]:
    """A JSON object (a ``dict``) that passes :func:`check_json_value`."""
    if not isinstance(value, dict):
        raise InvalidRequest(f"{field} must be a JSON object")
    return check_json_value(value, field, max_depth)

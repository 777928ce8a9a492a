"""``search_tools``: filters that AND together, a query that ranks and excludes, and bound cursors."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from context_engine.errors import InvalidCursor, InvalidRequest
from context_engine.tools.models import ToolPage
from context_engine.tools.registry import ToolEntry

MAX_LIMIT = 100
_TERM = re.compile(r"\w+")


def _kinds(kind: str | Sequence[str] | None) -> set[str] | None:
    if kind is None:
        return None
    values = [kind] if isinstance(kind, str) else list(kind)
    if not all(isinstance(k, str) for k in values):
        raise InvalidRequest("kind must be a tool kind or a list of them")
    return set(values)


def _score(entry: ToolEntry, terms: list[str]) -> int:
    name, description = entry.call_name.lower(), entry.description.lower()
    return sum(2 if term in name else 1 if term in description else 0 for term in terms)


def _fingerprint(query: str, kinds: set[str] | None, name_contains: str | None, requires_approval: bool | None) -> str:
    raw = json.dumps([query, sorted(kinds) if kinds is not None else None, name_contains, requires_approval])
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def search(
    entries: list[ToolEntry],
    query: str,
    *,
    trusted: bool,
    kind: str | Sequence[str] | None = None,
    name_contains: str | None = None,
    requires_approval: bool | None = None,
    limit: int = 20,
    cursor: str | None = None,
) -> ToolPage:
    """One page of the visible tools that pass every filter, best match first.

    A non-empty query keeps only tools one of its terms matches (in the call name or description);
    an unknown kind matches nothing. The cursor is an offset bound to the query and filters.
    """
    if not isinstance(query, str):
        raise InvalidRequest("query must be a string (empty to list)")
    if name_contains is not None and not isinstance(name_contains, str):
        raise InvalidRequest("name_contains must be a string")
    if requires_approval is not None and not isinstance(requires_approval, bool):
        raise InvalidRequest("requires_approval must be true or false")
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be an integer between 1 and {MAX_LIMIT}")
    kinds = _kinds(kind)
    bound = _fingerprint(query.strip(), kinds, name_contains, requires_approval)
    offset = _decode(cursor, bound) if cursor else 0
    terms = [t.lower() for t in _TERM.findall(query)]
    ranked: list[tuple[int, int, ToolEntry]] = []
    for order, entry in enumerate(entries):
        if kinds is not None and entry.kind not in kinds:
            continue
        if name_contains is not None and name_contains.lower() not in entry.call_name.lower():
            continue
        if requires_approval is not None and entry.requires_approval != requires_approval:
            continue
        score = _score(entry, terms)
        if terms and score == 0:
            continue
        ranked.append((-score, order, entry))
    ranked.sort(key=lambda item: (item[0], item[1]))
    page = ranked[offset : offset + limit]
    more = offset + limit < len(ranked)
    next_cursor = _encode(offset + limit, bound) if more else None
    return ToolPage([entry.public(trusted=trusted) for _, _, entry in page], next_cursor)


def _encode(offset: int, bound: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"o": offset, "b": bound}).encode()).decode().rstrip("=")


def _decode(cursor: Any, bound: str) -> int:
    try:
        data = json.loads(base64.urlsafe_b64decode(str(cursor) + "=" * (-len(str(cursor)) % 4)))
        offset, owner = int(data["o"]), str(data["b"])
    except (ValueError, KeyError, TypeError):
        raise InvalidCursor("cursor is not valid; pass the next_cursor of a previous page") from None
    if owner != bound or offset < 0:
        raise InvalidCursor("this cursor belongs to another query or other filters; pass the same ones")
    return offset

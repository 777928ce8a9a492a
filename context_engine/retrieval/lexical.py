"""Parse a keyword query into bound tsquery pieces: words, "quoted phrases" and -terms.

The query is split on ASCII whitespace. In ``all`` mode every positive piece must match; in
``any`` mode one is enough. Negated pieces exclude in both modes. Each piece becomes its own
bound ``websearch_to_tsquery`` call, so the text is never spliced into SQL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_PIECE = re.compile(r'(-?)"([^"]+)"|(\S+)')


@dataclass
class LexicalQuery:
    positive: list[str]
    negative: list[str]


def parse(query: str) -> LexicalQuery:
    positive: list[str] = []
    negative: list[str] = []
    for match in _PIECE.finditer(query):
        neg, phrase, word = match.groups()
        if phrase is not None:
            (negative if neg else positive).append(f'"{phrase.strip()}"')
        elif word.startswith("-") and len(word) > 1:
            negative.append(word[1:])
        elif word.strip('"'):
            positive.append(word.strip('"'))
    return LexicalQuery(positive=positive, negative=negative)


def tsquery_sql(query: str, *, match: str, params: dict[str, Any]) -> str | None:
    """A SQL tsquery expression over bound pieces, or ``None`` when nothing is searchable."""
    parsed = parse(query)
    if not parsed.positive:
        return None
    joiner = " && " if match == "all" else " || "
    pos = []
    for i, piece in enumerate(parsed.positive):
        params[f"lx_p{i}"] = piece
        pos.append(f"websearch_to_tsquery(CAST(:lx_cfg AS regconfig), unaccent(:lx_p{i}))")
    expr = "(" + joiner.join(pos) + ")"
    for i, piece in enumerate(parsed.negative):
        params[f"lx_n{i}"] = piece
        expr += f" && !!websearch_to_tsquery(CAST(:lx_cfg AS regconfig), unaccent(:lx_n{i}))"
    return expr

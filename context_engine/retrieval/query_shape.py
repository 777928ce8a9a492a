"""Thresholds that follow the query's shape.

A fixed trigram threshold is wrong for some query whatever its value: two characters need a
strict one or ``<%`` matches noise, twelve words need a loose one or nothing matches. Length is
measured in characters for scripts written without spaces and in words otherwise.
"""

from __future__ import annotations

import re
import unicodedata

_SPACELESS = re.compile(
    "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # Japanese kana, CJK
    "\u0e00-\u0e7f\u0e80-\u0eff\u0f00-\u0fff\u1000-\u109f\u1780-\u17ff]"  # Thai Lao Tibetan Burmese Khmer
)
_WORD = re.compile(r"\w+", re.UNICODE)
_ACRONYM = re.compile(r"\b[A-Z][A-Z0-9]{1,}\b")
_CODE = re.compile(r"\b(?=\w*\d)(?=\w*[A-Za-z])[\w-]{3,}\b")

TRGM_STRICT, TRGM_LOOSE = 0.45, 0.15


def is_spaceless(query: str) -> bool:
    letters = [c for c in query if unicodedata.category(c).startswith("L")]
    if not letters:
        return False
    return sum(1 for c in letters if _SPACELESS.match(c)) / len(letters) > 0.5


def length_units(query: str) -> int:
    """Words, or characters for spaceless scripts."""
    if is_spaceless(query):
        return len([c for c in query if not c.isspace()])
    return len(_WORD.findall(query))


def trigram_threshold(query: str) -> float:
    """0.45 for up to two units, falling 0.03 a unit to 0.15 at twelve and beyond."""
    units = length_units(query)
    value = TRGM_STRICT - max(0, units - 2) * (TRGM_STRICT - TRGM_LOOSE) / 10
    return round(min(TRGM_STRICT, max(TRGM_LOOSE, value)), 4)


def is_exact_lookup(query: str) -> bool:
    stripped = query.strip()
    return len(stripped) > 2 and stripped[0] == stripped[-1] == '"'


def vector_floor(query: str) -> float:
    """Minimum cosine similarity for the opt-in adaptive floor."""
    if is_exact_lookup(query) or _ACRONYM.search(query) or _CODE.search(query):
        return 0.40
    units = length_units(query)
    if units <= 2:
        return 0.45
    if units <= 5:
        return 0.35
    return 0.25

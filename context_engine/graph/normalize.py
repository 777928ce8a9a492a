"""One spelling per entity: the stored name, and the key a query is matched against.

Why two forms: the stored name keeps what distinguishes an entity (``apple inc.``), while the key
drops punctuation so that a query spelling it ``Apple Inc`` or ``apple, inc.`` still finds it.
Both are pure functions, so ingest, the navigation functions and the graph leg agree on them.
"""

from __future__ import annotations

import re
import unicodedata

#: the widest name (in words) a query n-gram is compared with
MAX_NAME_WORDS = 8
#: the shortest key a query can match (two characters: "HR", "EU")
MIN_KEY_CHARS = 2

_SPACE = re.compile(r"\s+")
_NOT_WORD = re.compile(r"[^\w\s]+")
_EDGE = " \t\r\n\"'`“”‘’«»()[]{}<>,;:!?*_|"


def normalise_name(raw: str) -> str:
    """Lower-cased (NFKC), whitespace collapsed, quotes and stray punctuation trimmed from both ends."""
    text = unicodedata.normalize("NFKC", raw).lower()
    return _SPACE.sub(" ", text).strip(_EDGE).strip()


def name_key(name: str) -> str:
    """The punctuation-free form of a (normalised) name; empty when nothing word-like is left."""
    return _SPACE.sub(" ", _NOT_WORD.sub(" ", normalise_name(name))).strip()


def normalise_type(raw: str) -> str:
    """Entity types are upper-case words joined by underscores (``ORG``, ``PERSON``); blank is ``OTHER``."""
    cleaned = re.sub(r"[^\w]+", "_", unicodedata.normalize("NFKC", raw).strip().upper()).strip("_")
    return cleaned[:40] or "OTHER"


def query_keys(query: str) -> set[str]:
    """Every run of 1 to ``MAX_NAME_WORDS`` consecutive words of the query, in key form."""
    words = name_key(query).split(" ")
    keys: set[str] = set()
    for start in range(len(words)):
        for width in range(1, MAX_NAME_WORDS + 1):
            if start + width > len(words):
                break
            key = " ".join(words[start : start + width])
            if len(key) >= MIN_KEY_CHARS:
                keys.add(key)
    return keys

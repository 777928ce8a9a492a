"""Cheap, deterministic reads of a question and a passage (no model involved).

- :func:`maybe_compound`: could this question ask more than one thing? Only then is the model
  asked to split it, so a plain single-fact question never costs an expansion call.
- :func:`is_enumeration`: does it ask for a list ("all deadlines", "every client")? Those widen the
  candidate pool and prefer the chunk that holds the list or table.
- :func:`shared_terms`: how many of the question's content words a passage contains; the
  deterministic order used when a rerank verdict is discarded.
"""

from __future__ import annotations

import re

MAX_CONTENT_CHARS = 2000

_WORD = re.compile(r"\w+", re.UNICODE)
_STOP = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers him his how i if in into is it its itself just me more most my no nor not of
    off on once only or other our ours out over own same she should so some such than that the their
    theirs them then there these they this those through to too under until up very was we were what
    when where which while who whom why will with would you your yours please tell give show find list
    every""".split()
)
_COMPOUND = re.compile(
    r"\b(and|also|as well as|plus|along with|together with|versus|vs\.?|compared (?:to|with)|both)\b|;",
    re.IGNORECASE,
)
_ENUMERATION = re.compile(
    r"\b(all|every|each|list|lists|listing|enumerate|how many|complete set|full set|overview of)\b",
    re.IGNORECASE,
)
_ITEM_LINE = re.compile(r"^\s*(?:[-*•+]|\d{1,3}[.)]|[a-z][.)]|\|)\s*\S", re.IGNORECASE)
_SUFFIXES = ("ing", "ies", "es", "ed", "ly", "s")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def stem(word: str) -> str:
    """A crude suffix strip, enough for "deadlines" to meet "deadline" (not a linguistic stemmer)."""
    for suffix in _SUFFIXES:
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def content_terms(text: str) -> set[str]:
    """The question's searchable words: lower-cased, stop words out, suffix-stripped."""
    return {stem(w) for w in words(text) if w not in _STOP and (len(w) > 1 or w.isdigit())}


def shared_terms(question_terms: set[str], passage: str) -> int:
    return len(question_terms & {stem(w) for w in words(passage)})


def maybe_compound(question: str) -> bool:
    """True when a question may ask several things: two question marks, a joining word, or length."""
    count = len(words(question))
    if question.count("?") >= 2 or count >= 25:
        return True
    return count >= 5 and _COMPOUND.search(question) is not None


def is_enumeration(question: str) -> bool:
    return _ENUMERATION.search(question) is not None


def list_like(text: str, kind: str | None) -> bool:
    """A table, spreadsheet rows, or at least three list-item lines."""
    if kind in ("table", "rows"):
        return True
    return sum(1 for line in text.splitlines() if _ITEM_LINE.match(line)) >= 3


def clip(text: str, limit: int = MAX_CONTENT_CHARS) -> str:
    """At most ``limit`` characters, cut at a word boundary and marked with an ellipsis when cut."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space >= limit - 200:
        cut = cut[:space]
    return cut.rstrip() + "…"

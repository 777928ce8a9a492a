"""Units in, chunks out: each chunk fits the token budget and keeps its nearest section.

Neighbouring units of the same section and page are packed together until the budget is
reached; a unit that is too large on its own is split at sentence boundaries, then words, then
characters. Atomic units (a slide, a sheet's schema) are never merged with their neighbours. A
packed chunk keeps the ``language`` of the code blocks in it when they share one (the knowledge
tool's ``get_chunks`` shows it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from context_engine.ingest.extracted import Unit

_SENTENCE = re.compile(r"(?<=[.!?;:])\s+|\n+")
_WS = re.compile(r"\s+")


@dataclass(slots=True)
class Chunk:
    text: str
    section: str | None
    page: int | None
    kind: str = "text"
    meta: dict[str, Any] = field(default_factory=dict)


def normalise(text: str) -> str:
    """Whitespace-folded text: the identity a chunk is matched on for vector reuse."""
    return _WS.sub(" ", text).strip()


def chunk_units(units: Iterable[Unit], *, budget: int, count_tokens: Callable[[str], int]) -> Iterator[Chunk]:
    """Pack ``units`` into chunks of at most ``budget`` tokens (as ``count_tokens`` counts)."""
    buf: list[str] = []
    buf_tokens = 0
    languages: set[str] = set()
    key: tuple[str | None, int | None, str] | None = None

    def flush() -> Iterator[Chunk]:
        nonlocal buf, buf_tokens, languages
        if buf and key is not None:
            meta = {"language": next(iter(languages))} if len(languages) == 1 else {}
            yield Chunk(text="\n\n".join(buf), section=key[0], page=key[1], kind=key[2], meta=meta)
        buf, buf_tokens, languages = [], 0, set()

    for unit in units:
        text = unit.text.strip()
        if not text:
            continue
        unit_key = (unit.section, unit.page, unit.kind)
        tokens = count_tokens(text)
        if unit.atomic or tokens > budget:
            yield from flush()
            key = unit_key
            for piece in _split(text, budget, count_tokens):
                yield Chunk(text=piece, section=unit.section, page=unit.page, kind=unit.kind, meta=dict(unit.meta))
            key = None
            continue
        if key != unit_key or buf_tokens + tokens > budget:
            yield from flush()
            key = unit_key
        buf.append(text)
        buf_tokens += tokens
        language = unit.meta.get("language")
        if isinstance(language, str) and language:
            languages.add(language)
    yield from flush()


def _split(text: str, budget: int, count_tokens: Callable[[str], int]) -> Iterator[str]:
    """Split one oversized text into budget-sized pieces at the largest boundary that works."""
    if count_tokens(text) <= budget:
        yield text
        return
    for pattern in (_SENTENCE, _WS):
        parts = [p for p in pattern.split(text) if p.strip()]
        if len(parts) > 1:
            if pattern is _WS and text.endswith("\r"):
                # a sheet's row end (its CRLF split at the line feed): kept, so the pieces still
                # read back as "\r " between rows (compute.frames.parse_sheet)
                parts[-1] += "\r"
            yield from _pack(parts, budget, count_tokens, " ")
            return
    # one unbroken run (e.g. a long token): cut by characters
    step = max(1, len(text) // max(2, count_tokens(text) // budget + 1))
    for start in range(0, len(text), step):
        yield from _split(text[start : start + step], budget, count_tokens)


def _pack(parts: list[str], budget: int, count_tokens: Callable[[str], int], sep: str) -> Iterator[str]:
    current: list[str] = []
    current_tokens = 0
    for part in parts:
        tokens = count_tokens(part)
        if tokens > budget:
            if current:
                yield sep.join(current)
                current, current_tokens = [], 0
            yield from _split(part, budget, count_tokens)
            continue
        if current and current_tokens + tokens > budget:
            yield sep.join(current)
            current, current_tokens = [], 0
        current.append(part)
        current_tokens += tokens
    if current:
        yield sep.join(current)

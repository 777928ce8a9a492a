"""Plain text and Markdown.

Plain text has no structure to keep beyond its paragraphs, so each blank-line-separated block is
one unit. Markdown keeps what a reader navigates by: ATX and setext headings become the
``section`` of what follows them (the nearest heading's text; the full path rides in
``meta["headings"]``), a fenced code block is one unit however many blank lines it holds, and a
pipe table is one ``kind="table"`` unit in its original Markdown.
"""

from __future__ import annotations

import re

from context_engine.ingest.extracted import Extracted, Unit
from context_engine.ingest.formats import detect
from context_engine.ingest.formats._base import SectionReader, Source, decode_text, extractor, no_text

_BLANK_RUN = re.compile(r"\n[ \t]*\n+")


def paragraphs(text: str) -> list[str]:
    """Blank-line-separated blocks, trailing whitespace trimmed, empty blocks dropped."""
    blocks = (block.strip("\n").rstrip() for block in _BLANK_RUN.split(text))
    return [block for block in blocks if block.strip()]


@extractor(detect.TEXT)
def extract_text(source: Source) -> Extracted:
    """One unit per paragraph block."""
    text, stats = decode_text(source)
    units = [Unit(text=block) for block in paragraphs(text)]
    if not units:
        raise no_text(source)
    return Extracted(mime=detect.TEXT, units=units, meta=stats.as_meta())


# ----------------------------------------------------------------------------------------- markdown

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_TABLE_DELIMITER = re.compile(r"^ {0,3}\|?[ \t]*:?-+:?[ \t]*(\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")


class _MarkdownReader(SectionReader):
    """A line-by-line reader; enough of CommonMark for structure, not a renderer."""

    def __init__(self) -> None:
        super().__init__()
        self.buffer: list[str] = []

    def flush(self) -> None:
        if self.buffer:
            self.emit("\n".join(self.buffer).strip("\n"))
            self.buffer = []

    def heading(self, level: int, title: str) -> None:
        self.flush()
        while self.headings and self.headings[-1][0] >= level:
            self.headings.pop()
        self.headings.append((level, title.strip()))

    def read(self, text: str) -> list[Unit]:
        lines = text.split("\n")
        index = self._front_matter(lines)
        while index < len(lines):
            line = lines[index]
            fence = _FENCE.match(line)
            if fence and not (fence.group(1)[0] == "`" and "`" in fence.group(2)):
                index = self._fenced(lines, index, fence.group(1))
                continue
            atx = _ATX.match(line)
            if atx:
                self.heading(len(atx.group(1)), atx.group(2) or "")
                index += 1
                continue
            if (
                "|" in line
                and index + 1 < len(lines)
                and _TABLE_DELIMITER.match(lines[index + 1])
                and "|" in lines[index + 1]
            ):
                index = self._table(lines, index)
                continue
            setext = _SETEXT.match(line)
            if setext and len(self.buffer) == 1 and self.buffer[0].strip():
                title = self.buffer.pop()
                self.heading(1 if setext.group(1)[0] == "=" else 2, title)
                index += 1
                continue
            if not line.strip():
                self.flush()
            else:
                self.buffer.append(line.rstrip())
            index += 1
        self.flush()
        return self.units

    def _front_matter(self, lines: list[str]) -> int:
        """YAML front matter is kept as its own unit, so its ``---`` is not read as a heading."""
        if not lines or lines[0].strip() != "---":
            return 0
        for end in range(1, min(len(lines), 200)):
            if lines[end].strip() in ("---", "..."):
                self.emit("\n".join(lines[: end + 1]), block="front_matter")
                return end + 1
        return 0

    def _fenced(self, lines: list[str], start: int, fence: str) -> int:
        """A fenced block is one unit, blank lines and all; an unclosed fence runs to the end."""
        self.flush()
        closing = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        end = start + 1
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        block = lines[start : end + 1]
        language = _FENCE.match(lines[start]).group(2).strip().split(" ")[0]  # type: ignore[union-attr]
        self.emit("\n".join(block), block="code", language=language or None)
        return end + 1

    def _table(self, lines: list[str], start: int) -> int:
        self.flush()
        end = start + 2
        while end < len(lines) and lines[end].strip() and "|" in lines[end]:
            end += 1
        self.emit("\n".join(line.rstrip() for line in lines[start:end]), kind="table")
        return end


class MarkdownPages:
    """Markdown that arrives a page at a time (a transcribed scan): a heading carries on across pages."""

    def __init__(self) -> None:
        self._reader = _MarkdownReader()

    def read(self, text: str, page: int, meta: dict[str, object] | None = None) -> list[Unit]:
        """The units of one page, numbered ``page``, with ``meta`` added to each."""
        start = len(self._reader.units)
        self._reader.read(text)
        units = self._reader.units[start:]
        for unit in units:
            unit.page = page
            unit.meta.update(meta or {})
        return units


@extractor(detect.MARKDOWN)
def extract_markdown(source: Source) -> Extracted:
    """Headings become sections; code fences and tables stay whole."""
    text, stats = decode_text(source)
    units = _MarkdownReader().read(text)
    if not units:
        raise no_text(source)
    return Extracted(mime=detect.MARKDOWN, units=units, meta=stats.as_meta())

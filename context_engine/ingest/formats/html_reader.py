"""HTML, read with beautifulsoup4 and the stdlib ``html.parser`` (no lxml needed).

Imported by :mod:`.html` on the first HTML file, so a process that reads none never loads bs4.

Chrome (``script``, ``style``, ``nav`` and friends) is dropped; ``h1``–``h6`` become the section
of what follows; each paragraph, list, quote or preformatted block is one text unit; each
``<table>`` is one ``kind="table"`` unit in pipe rows (see :func:`_base.pipe_table`). Loose text
directly inside a container is gathered into a unit at the next block boundary, so nothing
visible is lost. ``<title>`` goes to ``meta["title"]``.
"""

from __future__ import annotations

import re

from bs4 import BeautifulSoup, Comment, Declaration, Doctype, NavigableString, ProcessingInstruction, Tag

from context_engine.ingest.extracted import Extracted
from context_engine.ingest.formats import detect
from context_engine.ingest.formats._base import (
    SectionReader,
    Source,
    decode_text,
    no_text,
    pipe_table,
    squash,
)

#: Chrome, not content. ``form`` is deliberately absent: some frameworks wrap a whole page in one.
_DROP = frozenset(
    {"script", "style", "nav", "noscript", "template", "svg", "canvas", "iframe", "object", "head",
     "button", "select"}
)
_HEADINGS = {f"h{level}": level for level in range(1, 7)}
_PARAGRAPHS = frozenset({"p", "blockquote", "address", "figcaption", "caption", "dt", "dd", "summary",
                         "legend", "label"})
_LISTS = frozenset({"ul", "ol", "menu", "dl"})
_BREAKS = frozenset({"br", "hr"})
_SKIPPED_STRINGS = (Comment, Doctype, Declaration, ProcessingInstruction)
_SPACES = re.compile(r"[ \t\r\f\v]+")


def inline_text(tag: Tag) -> str:
    """The visible text of ``tag`` with whitespace collapsed and ``<br>`` kept as a line break."""
    parts: list[str] = []
    for node in tag.descendants:
        if isinstance(node, Tag):
            if node.name in _BREAKS:
                parts.append("\n")
            continue
        if isinstance(node, NavigableString) and not isinstance(node, _SKIPPED_STRINGS):
            if any(parent.name in _DROP for parent in node.parents if isinstance(parent, Tag)):
                continue
            parts.append(str(node).replace("\r", " ").replace("\n", " "))
    lines = (_SPACES.sub(" ", line).strip() for line in "".join(parts).split("\n"))
    return "\n".join(line for line in lines if line)


class _HtmlReader(SectionReader):
    def __init__(self) -> None:
        super().__init__()
        self.loose: list[str] = []

    def emit(self, text: str, kind: str = "text", **meta: object) -> None:
        super().emit(text.strip(), kind, **meta)

    def flush(self) -> None:
        if self.loose:
            text = "\n".join(line for line in (squash(part) for part in "".join(self.loose).split("\n"))
                             if line)
            self.loose = []
            self.emit(text)

    def walk(self, node: Tag) -> None:
        for child in node.children:
            if isinstance(child, _SKIPPED_STRINGS):
                continue
            if isinstance(child, NavigableString):
                # Source line breaks are just spaces in HTML; only <br> breaks a line.
                self.loose.append(str(child).replace("\n", " ").replace("\r", " "))
                continue
            if not isinstance(child, Tag):
                continue
            name = child.name
            if name in _DROP:
                continue
            if name in _HEADINGS:
                self.flush()
                level = _HEADINGS[name]
                while self.headings and self.headings[-1][0] >= level:
                    self.headings.pop()
                self.headings.append((level, squash(inline_text(child))))
            elif name == "table":
                self.flush()
                self.emit(self.table(child), kind="table")
            elif name in _LISTS:
                self.flush()
                self.emit("\n".join(self.list_lines(child, 0)))
            elif name == "pre":
                self.flush()
                self.emit(child.get_text())
            elif name in _PARAGRAPHS and not child.find(["table", "ul", "ol", "pre", *_HEADINGS]):
                self.flush()
                self.emit(inline_text(child))
            elif name in _BREAKS:
                self.loose.append("\n")
            elif name in ("li",):
                self.flush()
                self.emit("- " + inline_text(child))
            else:
                block = name in _BLOCKS or name in _PARAGRAPHS
                if block:
                    self.flush()
                self.walk(child)
                if block:
                    self.flush()

    def list_lines(self, tag: Tag, depth: int) -> list[str]:
        """One line per item, nested lists indented, ordered lists numbered."""
        lines: list[str] = []
        number = 0
        for item in tag.find_all(["li", "dt", "dd"], recursive=False):
            number += 1
            marker = f"{number}." if tag.name == "ol" else ("-" if item.name != "dd" else " ")
            nested = item.find_all(list(_LISTS), recursive=False)
            for sub in nested:
                sub.extract()
            text = squash(inline_text(item))
            if text:
                lines.append(f"{'  ' * depth}{marker} {text}")
            for sub in nested:
                lines.extend(self.list_lines(sub, depth + 1))
        return lines

    def table(self, tag: Tag) -> str:
        """Rows of this table only (a nested table's text stays inside its cell)."""
        rows: list[list[str]] = []
        caption = tag.find("caption")
        for row in tag.find_all("tr"):
            if row.find_parent("table") is not tag:
                continue
            cells: list[str] = []
            for cell in row.find_all(["td", "th"], recursive=False):
                cells.append(inline_text(cell))
                span = cell.get("colspan")
                if isinstance(span, str) and span.isdigit():
                    cells.extend([""] * (min(int(span), 100) - 1))
            rows.append(cells)
        text = pipe_table(rows)
        if caption is not None and caption.find_parent("table") is tag and squash(caption.get_text()):
            text = squash(caption.get_text()) + "\n" + text
        return text


_BLOCKS = frozenset(
    {"div", "section", "article", "main", "header", "footer", "aside", "body", "html", "figure",
     "details", "fieldset", "center"}
)


def read_html(source: Source) -> Extracted:
    """Structure-keeping text of an HTML page."""
    text, stats = decode_text(source)
    soup = BeautifulSoup(text, "html.parser")
    meta: dict[str, object] = dict(stats.as_meta())
    if soup.title is not None and squash(soup.title.get_text()):
        meta["title"] = squash(soup.title.get_text())
    reader = _HtmlReader()
    reader.walk(soup.body if soup.body is not None else soup)
    reader.flush()
    if not reader.units:
        raise no_text(source)
    return Extracted(mime=detect.HTML, units=reader.units, meta=meta)

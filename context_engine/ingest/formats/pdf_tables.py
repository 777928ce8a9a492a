"""Ruled tables on a born-digital PDF page, kept as Markdown tables (the ``pdf`` extra, pdfplumber).

pypdf's text layer flattens a table into a run of words, so the chunker and the model lose which
value sits in which column. With pdfplumber installed, each page that has a text layer is
searched for tables drawn with ruling lines; on a page that has one, the text above, between and
below the tables becomes paragraphs as before, and each table becomes one ``kind="table"`` unit in
pipe rows, in reading order, under the page's own number. Everything happens locally on the text
layer: no OCR, no model, no network. Pages without a table keep pypdf's text unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from context_engine.ingest.extracted import Unit
from context_engine.ingest.formats._base import Source, pipe_table
from context_engine.ingest.formats.text import paragraphs


def available() -> bool:
    """True when pdfplumber can be imported (the ``pdf`` extra is installed)."""
    try:
        import pdfplumber  # noqa: F401
    except ImportError:
        return False
    return True


def table_pages(source: Source, pages: Iterable[int]) -> dict[int, list[Unit]]:
    """Units of each listed page (1-based) that holds at least one table; other pages are absent."""
    import pdfplumber

    found: dict[int, list[Unit]] = {}
    # any readable binary file works; pdfplumber's annotation names two concrete classes only
    with source.open() as stream, pdfplumber.open(cast(Any, stream)) as document:
        for number in pages:
            page = document.pages[number - 1]
            try:
                tables = [table for table in page.find_tables() if _is_table(table)]
                if tables:
                    found[number] = _page_units(page, tables, number)
            finally:
                page.close()  # drop the page's parsed objects: memory stays flat over long files
    return found


def _is_table(table: Any) -> bool:
    """At least two rows and two columns with text in them (a framed paragraph is not a table)."""
    rows = [row for row in table.extract() if any(cell and cell.strip() for cell in row)]
    return len(rows) >= 2 and max(len(row) for row in rows) >= 2


def _page_units(page: Any, tables: list[Any], number: int) -> list[Unit]:
    """The page top to bottom: text outside the tables as paragraphs, each table as pipe rows."""
    tables = sorted(tables, key=lambda table: (table.bbox[1], table.bbox[0]))
    outside = page
    for table in tables:
        outside = outside.outside_bbox(table.bbox)
    units: list[Unit] = []
    top = page.bbox[1]
    for table in tables:
        units.extend(_text_between(outside, page, top, table.bbox[1], number))
        rows = [[cell or "" for cell in row] for row in table.extract()]
        markdown = pipe_table(rows)
        if markdown:
            units.append(Unit(text=markdown, page=number, kind="table"))
        top = max(top, table.bbox[3])
    units.extend(_text_between(outside, page, top, page.bbox[3], number))
    return units


def _text_between(outside: Any, page: Any, top: float, bottom: float, number: int) -> list[Unit]:
    """Paragraph units of the non-table text in a horizontal band of the page."""
    top, bottom = max(top, page.bbox[1]), min(bottom, page.bbox[3])
    if bottom <= top:
        return []
    band = outside.crop((page.bbox[0], top, page.bbox[2], bottom))
    return [Unit(text=block, page=number) for block in paragraphs(band.extract_text() or "")]

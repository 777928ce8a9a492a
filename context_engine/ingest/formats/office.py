"""Word (DOCX) and PowerPoint (PPTX), read with python-docx and python-pptx.

DOCX: paragraphs in body order; ``Title`` and ``Heading N`` paragraphs become the section of what
follows; list paragraphs get a ``- `` marker; each table is one ``kind="table"`` unit in pipe rows
(see :func:`_base.pipe_table`; merged cells appear once). ``meta["pages"]`` /
``meta["pages_source"]`` follow the billing rule in :func:`docx_page_count`.

PPTX: one ATOMIC unit per slide (a slide is read as a whole), ``page`` = slide number,
``section`` = the slide title; the text of every shape (groups and tables included, in reading
order top-to-bottom, left-to-right) and then the speaker notes.
"""

from __future__ import annotations

import math
import re
import zipfile
from collections.abc import Iterator
from typing import Any

from context_engine.ingest.extracted import Extracted, ExtractionFailed, Unit
from context_engine.ingest.formats import detect
from context_engine.ingest.formats._base import Source, extractor, no_text, pipe_table
from context_engine.ingest.formats.zipguard import check_zip
from context_engine.providers.sdk import import_sdk

#: Words per page for the last-resort page estimate.
WORDS_PER_PAGE = 250

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_HEADING = re.compile(r"^heading\s*(\d+)$", re.IGNORECASE)
_PAGES = re.compile(rb"<(?:\w+:)?Pages>\s*(\d+)\s*</(?:\w+:)?Pages>")


def _open_office(source: Source, module: str, reader: str, what: str) -> Any:
    """The file as ``module.reader`` reads it (an optional package: its ImportError names the extra),
    after the zip checks every Office file passes first."""
    read = getattr(import_sdk(module, needed_by=f"this format needs {module}", extra="office"), reader)
    check_zip(source, what)
    with source.open() as stream:
        return read(stream)


# --------------------------------------------------------------------------------------------- DOCX


def _declared_pages(source: Source) -> int | None:
    """``<Pages>`` from ``docProps/app.xml``, if the file has one (the zip was already vetted)."""
    with source.open() as stream, zipfile.ZipFile(stream) as archive:
        try:
            with archive.open("docProps/app.xml") as member:
                xml = member.read(1 << 20)
        except KeyError:
            return None
    match = _PAGES.search(xml)
    return int(match.group(1)) if match else None


def docx_page_count(body: Any, declared: int | None, words: int) -> tuple[int, str]:
    """``(pages, pages_source)``: the file's own count where the body could hold it.

    In order: ``app_xml`` (the word processor's ``<Pages>``), ``rendered_breaks`` (the page breaks
    the last render left, + 1), ``page_breaks`` (hard page breaks and non-continuous section
    breaks, + 1), else ``estimate`` (~250 words a page). A declared count is believed only up to
    blocks (body paragraphs and table rows) + breaks + 1, so a tiny file declaring 100,000 pages
    falls through to the next source.
    """
    rendered = sum(1 for _ in body.iter(f"{_W}lastRenderedPageBreak"))
    hard = sum(1 for br in body.iter(f"{_W}br") if br.get(f"{_W}type") == "page")
    # A paragraph's sectPr ends a section; how the NEXT section starts (its w:type) is what says
    # whether there is a page break, so the body's closing sectPr speaks for the last boundary.
    boundaries = [sect for sect in body.iter(f"{_W}sectPr")
                  if (parent := sect.getparent()) is not None and parent.tag == f"{_W}pPr"]
    following = [*boundaries[1:], *(child for child in body if child.tag == f"{_W}sectPr")]
    sections = 0
    for sect in following[: len(boundaries)]:
        kind = sect.find(f"{_W}type")
        if kind is None or kind.get(f"{_W}val") != "continuous":
            sections += 1
    paragraphs = sum(1 for child in body if child.tag == f"{_W}p")
    rows = sum(1 for _ in body.iter(f"{_W}tr"))
    bound = paragraphs + rows + rendered + hard + sections + 1
    if declared is not None and 1 <= declared <= bound:
        return declared, "app_xml"
    if rendered:
        return rendered + 1, "rendered_breaks"
    if hard + sections:
        return hard + sections + 1, "page_breaks"
    return max(1, math.ceil(words / WORDS_PER_PAGE)), "estimate"


def _heading_level(style_name: str) -> int | None:
    if style_name.lower() == "title":
        return 0
    match = _HEADING.match(style_name.strip())
    return int(match.group(1)) if match else None


def _docx_table(table: Any) -> list[list[str]]:
    rows: list[list[str]] = []
    for row in table.rows:
        cells: list[str] = []
        previous = None
        for cell in row.cells:
            if previous is not None and cell._tc is previous:
                continue  # a horizontally merged cell is repeated by python-docx
            previous = cell._tc
            parts = [paragraph.text for paragraph in cell.paragraphs]
            for nested in cell.tables:
                parts.extend(" ".join(r) for r in _docx_table(nested))
            cells.append(" ".join(part for part in parts if part.strip()))
        rows.append(cells)
    return rows


@extractor(detect.DOCX)
def extract_docx(source: Source) -> Extracted:
    """Sections from headings, paragraphs, tables as tables, and a page count with its source."""
    document = _open_office(source, "docx", "Document", "Word document")
    declared = _declared_pages(source)

    units: list[Unit] = []
    headings: list[tuple[int, str]] = []
    words = 0

    def add(text: str, kind: str = "text") -> None:
        section = headings[-1][1] if headings else None
        units.append(Unit(text=text, section=section, kind=kind,
                          meta={"headings": [title for _, title in headings]}))

    for block in document.iter_inner_content():
        if hasattr(block, "rows"):
            rows = _docx_table(block)
            words += sum(len(cell.split()) for row in rows for cell in row)
            text = pipe_table(rows)
            if text:
                add(text, kind="table")
            continue
        text = block.text.strip()
        if not text:
            continue
        words += len(text.split())
        style = block.style.name if block.style is not None else ""
        level = _heading_level(style or "")
        if level is not None:
            while headings and headings[-1][0] >= level:
                headings.pop()
            headings.append((level, " ".join(text.split())))
            continue
        if "list" in (style or "").lower():
            text = "- " + text
        add(text)

    pages, pages_source = docx_page_count(document.element.body, declared, words)
    meta: dict[str, Any] = {"pages": pages, "pages_source": pages_source}
    title = document.core_properties.title
    if title:
        meta["title"] = title
    if not units:
        if headings:
            units = [Unit(text=title, section=title) for _, title in headings]
        else:
            raise no_text(source)
    return Extracted(mime=detect.DOCX, units=units, meta=meta)


# --------------------------------------------------------------------------------------------- PPTX


def _shape_texts(shapes: Any) -> Iterator[str]:
    """Text of shapes in reading order; groups are entered, tables become pipe rows."""

    def position(shape: Any) -> tuple[int, int]:
        return (shape.top or 0, shape.left or 0)

    for shape in sorted(shapes, key=position):
        if hasattr(shape, "shapes"):  # a group (shape_type itself can raise on exotic shapes)
            yield from _shape_texts(shape.shapes)
            continue
        if getattr(shape, "has_table", False) and shape.has_table:
            rows = [[cell.text for cell in row.cells] for row in shape.table.rows]
            text = pipe_table(rows)
            if text:
                yield text
            continue
        if getattr(shape, "has_text_frame", False) and shape.has_text_frame:
            text = "\n".join(
                paragraph_text
                for paragraph in shape.text_frame.paragraphs
                if (paragraph_text := "".join(run.text for run in paragraph.runs).strip())
            )
            if text:
                yield text


@extractor(detect.PPTX)
def extract_pptx(source: Source) -> Extracted:
    """One atomic unit per slide: title as section, slide number as page, shapes then notes."""
    presentation = _open_office(source, "pptx", "Presentation", "PowerPoint presentation")
    units: list[Unit] = []
    slides = 0
    for number, slide in enumerate(presentation.slides, start=1):
        slides = number
        title_shape = slide.shapes.title
        title = " ".join(title_shape.text.split()) if title_shape is not None and title_shape.has_text_frame \
            else ""
        parts = list(_shape_texts(slide.shapes))
        if slide.has_notes_slide:
            notes_frame = slide.notes_slide.notes_text_frame
            notes = notes_frame.text.strip() if notes_frame is not None else ""
            if notes:
                parts.append(f"Notes: {notes}")
        if not parts:
            continue
        units.append(Unit(text="\n\n".join(parts), section=title or None, page=number, atomic=True,
                          meta={"slide": number}))
    if not units:
        if slides == 0:
            raise ExtractionFailed(f"{source.label} has no slides")
        raise no_text(source)
    meta: dict[str, Any] = {"pages": slides, "slides": slides}
    title = presentation.core_properties.title
    if title:
        meta["title"] = title
    return Extracted(mime=detect.PPTX, units=units, meta=meta)

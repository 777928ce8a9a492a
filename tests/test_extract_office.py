"""DOCX and PPTX extraction, page counting, and the zip container defences."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import docx
import pptx
import pytest
from docx.enum.section import WD_SECTION
from pptx.util import Inches

from context_engine.ingest.extracted import ExtractionFailed
from context_engine.ingest.formats import extract, zipguard
from tests.filegen import docx_bytes, set_app_pages, write_zip_bomb

DOCX_MIME = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def _handbook() -> docx.document.Document:
    document = docx.Document()
    document.core_properties.title = "Handbook"
    document.add_paragraph("Staff Handbook", style="Title")
    document.add_paragraph("Welcome to the company.")
    document.add_heading("Leave", level=1)
    document.add_paragraph("Everyone gets 25 days.")
    document.add_paragraph("Ask your manager first", style="List Bullet")
    table = document.add_table(rows=3, cols=3)
    for r, row in enumerate([["Grade", "Days", "Notes"], ["A", "25", "base | standard"], ["B", "30", ""]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    document.add_heading("Carry over", level=2)
    document.add_paragraph("Five days carry over.")
    document.add_heading("Pay", level=1)
    document.add_paragraph("Paid monthly.")
    return document


def test_docx_sections_paragraphs_tables() -> None:
    result = extract(docx_bytes(_handbook()), name="handbook.docx")
    assert result.mime == DOCX_MIME
    assert result.meta["title"] == "Handbook"
    units = list(result.units)
    assert [(u.section, u.kind, u.text.splitlines()[0]) for u in units] == [
        ("Staff Handbook", "text", "Welcome to the company."),
        ("Leave", "text", "Everyone gets 25 days."),
        ("Leave", "text", "- Ask your manager first"),
        ("Leave", "table", "| Grade | Days | Notes |"),
        ("Carry over", "text", "Five days carry over."),
        ("Pay", "text", "Paid monthly."),
    ]
    assert units[3].text.splitlines()[2:] == ["| A | 25 | base \\| standard |", "| B | 30 |  |"]
    assert units[4].meta["headings"] == ["Staff Handbook", "Leave", "Carry over"]
    assert units[5].meta["headings"] == ["Staff Handbook", "Pay"]


def test_docx_merged_cells_appear_once() -> None:
    document = docx.Document()
    table = document.add_table(rows=2, cols=3)
    merged = table.cell(0, 0).merge(table.cell(0, 2))
    merged.text = "Wide header"
    for c, value in enumerate(["1", "2", "3"]):
        table.cell(1, c).text = value
    [unit] = list(extract(docx_bytes(document), name="m.docx").units)
    assert unit.text.splitlines()[0] == "| Wide header |  |  |"


# --------------------------------------------------------------------------------------- page count


def _pages(document: docx.document.Document, declared: int | None) -> tuple[int, str]:
    meta = extract(set_app_pages(docx_bytes(document), declared), name="p.docx").meta
    return meta["pages"], meta["pages_source"]


def test_docx_pages_from_app_xml_when_the_body_can_hold_them() -> None:
    document = docx.Document()
    for i in range(10):
        document.add_paragraph(f"paragraph {i}")
    assert _pages(document, 7) == (7, "app_xml")
    assert _pages(document, 11) == (11, "app_xml")  # 10 blocks + 0 breaks + 1


def test_docx_declared_pages_beyond_the_body_are_not_believed() -> None:
    document = docx.Document()
    document.add_paragraph("one enormous paragraph " * 600)  # 1,800 words
    assert _pages(document, 100_000) == (8, "estimate")
    assert _pages(document, 2) == (2, "app_xml")


def test_docx_pages_from_rendered_breaks() -> None:
    document = docx.Document()
    for i in range(3):
        paragraph = document.add_paragraph(f"page {i}")
        if i:
            run = paragraph.runs[0]._r
            run.insert(0, run.makeelement(docx.oxml.ns.qn("w:lastRenderedPageBreak"), {}))
    assert _pages(document, None) == (3, "rendered_breaks")
    assert _pages(document, 500) == (3, "rendered_breaks")


def test_docx_pages_from_hard_and_section_breaks() -> None:
    document = docx.Document()
    document.add_paragraph("first")
    document.add_page_break()
    document.add_paragraph("second")
    document.add_section(WD_SECTION.NEW_PAGE)
    document.add_paragraph("third")
    document.add_section(WD_SECTION.CONTINUOUS)
    document.add_paragraph("still third")
    assert _pages(document, None) == (3, "page_breaks")


def test_docx_pages_estimate_when_the_file_says_nothing() -> None:
    document = docx.Document()
    document.add_paragraph("word " * 600)
    assert _pages(document, None) == (3, "estimate")


# ------------------------------------------------------------------------------------ bad containers


def test_corrupt_docx_fails() -> None:
    data = docx_bytes(_handbook())
    with pytest.raises(ExtractionFailed, match="not a valid Word document"):
        extract(data[: len(data) // 2], name="broken.docx")


def test_docx_with_a_broken_member_fails_with_cause() -> None:
    good = zipfile.ZipFile(io.BytesIO(docx_bytes(_handbook())))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for item in good.infolist():
            data = good.read(item.filename)
            target.writestr(item.filename, b"<not xml" if item.filename == "word/document.xml" else data)
    with pytest.raises(ExtractionFailed, match="could not be read as a Word document") as info:
        extract(out.getvalue(), name="bad.docx")
    assert info.value.__cause__ is not None


def _no_member_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything decompresses a member: the verdict must come from the directory."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a zip member was opened")

    monkeypatch.setattr(zipfile.ZipFile, "open", refuse)


def test_zip_bomb_is_refused_before_parsing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "bomb.docx"
    write_zip_bomb(path, megabytes=300)
    assert path.stat().st_size < 2_000_000
    _no_member_reads(monkeypatch)
    with pytest.raises(ExtractionFailed, match="looks like a zip bomb") as info:
        extract(path)
    assert "word/document.xml" in str(info.value)


@pytest.mark.parametrize(
    ("member", "name"), [("xl/workbook.xml", "book.xlsx"), ("ppt/presentation.xml", "deck.pptx")]
)
def test_zip_bomb_other_containers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, member: str, name: str
) -> None:
    monkeypatch.setattr(zipguard, "RATIO_MIN_MEMBER_BYTES", 1 << 20)
    path = tmp_path / name
    write_zip_bomb(path, member=member, megabytes=8)
    _no_member_reads(monkeypatch)
    with pytest.raises(ExtractionFailed, match="looks like a zip bomb"):
        extract(path)


@pytest.mark.parametrize("name", ["book.xlsx", "deck.pptx"])
def test_truncated_containers_fail(name: str) -> None:
    if name.endswith("xlsx"):
        import openpyxl

        workbook = openpyxl.Workbook()
        workbook.active.append(["a", 1])
        buffer = io.BytesIO()
        workbook.save(buffer)
        data = buffer.getvalue()
    else:
        data = _deck()
    with pytest.raises(ExtractionFailed, match="corrupt zip container"):
        extract(data[: len(data) // 2], name=name)


def test_zip_total_size_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zipguard, "MAX_UNCOMPRESSED_BYTES", 1000)
    with pytest.raises(ExtractionFailed, match="zip bomb: its members expand to"):
        extract(docx_bytes(_handbook()), name="h.docx")


def test_plain_zip_is_not_an_office_file() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("readme.txt", "hello")
    with pytest.raises(ExtractionFailed, match="zip archive that is not a Word"):
        extract(out.getvalue(), name="archive.docx")


# --------------------------------------------------------------------------------------------- PPTX


def _deck() -> bytes:
    presentation = pptx.Presentation()
    title_only = presentation.slide_layouts[5]
    slide = presentation.slides.add_slide(presentation.slide_layouts[1])
    slide.shapes.title.text = "Quarterly review"
    slide.placeholders[1].text = "Revenue up 12%\nCosts flat"
    slide.notes_slide.notes_text_frame.text = "Mention the new office."
    slide = presentation.slides.add_slide(title_only)
    slide.shapes.title.text = "Numbers"
    table = slide.shapes.add_table(2, 2, Inches(1), Inches(2), Inches(4), Inches(1)).table
    for r, row in enumerate([["Region", "Sales"], ["North", "40"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    box = slide.shapes.add_textbox(Inches(1), Inches(4), Inches(3), Inches(1))
    box.text_frame.text = "Below the table"
    presentation.slides.add_slide(presentation.slide_layouts[6])  # blank slide, no text
    slide = presentation.slides.add_slide(presentation.slide_layouts[6])
    slide.shapes.add_textbox(Inches(1), Inches(1), Inches(3), Inches(1)).text_frame.text = "Untitled slide"
    buffer = io.BytesIO()
    presentation.save(buffer)
    return buffer.getvalue()


def test_pptx_one_atomic_unit_per_slide() -> None:
    result = extract(_deck(), name="deck.pptx")
    assert result.mime.endswith("presentationml.presentation")
    assert result.meta["pages"] == 4
    units = list(result.units)
    assert [(u.page, u.section, u.atomic) for u in units] == [
        (1, "Quarterly review", True), (2, "Numbers", True), (4, None, True),
    ]
    assert "Revenue up 12%\nCosts flat" in units[0].text
    assert units[0].text.endswith("Notes: Mention the new office.")
    numbers = units[1].text
    assert "| Region | Sales |" in numbers and "| North | 40 |" in numbers
    assert numbers.index("Sales") < numbers.index("Below the table")
    assert units[2].text == "Untitled slide"


def test_pptx_named_as_pdf_is_read_as_pptx() -> None:
    result = extract(_deck(), name="deck.pdf")
    assert result.mime.endswith("presentationml.presentation")

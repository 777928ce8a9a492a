"""Ruled tables in born-digital PDFs reach the chunker as Markdown tables (the [pdf] extra).

The PDFs are written here by hand: Helvetica text placed at coordinates, and a grid of stroked
lines around the table cells, which is how a word processor exports a table.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Sequence

import pytest

from context_engine import TRUSTED, ContextEngine
from context_engine.ingest.extractors import extract, pdf_tables
from tests.conftest import make_config

Text = tuple[float, float, str]  # x, y (from the bottom), the line
LEAVE_TABLE = [["Band", "Annual leave", "Carry over"], ["One", "20 days", "5 days"], ["Three", "25 days", "10 days"]]


def _escape(text: str) -> bytes:
    return text.encode("latin-1").replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def _grid(
    rows: Sequence[Sequence[str]], *, left: float, top: float, widths: Sequence[float]
) -> tuple[bytes, list[Text]]:
    """Stroked cell borders and the cell texts of a table whose top-left corner is (left, top)."""
    height = 20.0
    xs = [left]
    for width in widths:
        xs.append(xs[-1] + width)
    ys = [top - height * i for i in range(len(rows) + 1)]
    lines = [b"0.5 w"]
    lines += [b"%.1f %.1f m %.1f %.1f l S" % (xs[0], y, xs[-1], y) for y in ys]
    lines += [b"%.1f %.1f m %.1f %.1f l S" % (x, ys[0], x, ys[-1]) for x in xs]
    texts = [(xs[c] + 4, ys[r] - 14, cell) for r, row in enumerate(rows) for c, cell in enumerate(row)]
    return b"\n".join(lines), texts


def _page(texts: Sequence[Text], drawing: bytes = b"") -> bytes:
    shown = [b"BT /F1 11 Tf %.1f %.1f Td (%s) Tj ET" % (x, y, _escape(line)) for x, y, line in texts]
    return b"\n".join([drawing, *shown])


def _pdf(contents: Sequence[bytes]) -> bytes:
    """A PDF 1.4 with one page per content stream, Helvetica as /F1."""
    objects: list[bytes] = [b"", b"", b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    kids = []
    for content in contents:
        objects.append(b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream")
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
            b"/Contents %d 0 R >>" % len(objects)
        )
        kids.append(len(objects))
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R >>"
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % k for k in kids), len(kids))
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def policy_pdf() -> bytes:
    """Page 1: a paragraph, the leave table, a closing paragraph. Page 2: text only. Page 3: a small table."""
    grid, cells = _grid(LEAVE_TABLE, left=72, top=650, widths=[120, 140, 140])
    first = _page(
        [
            (72, 720, "Leave policy for every band."),
            (72, 706, "The table below is binding."),
            *cells,
            (72, 520, "Requests go to your manager."),
        ],
        grid,
    )
    second = _page([(72, 720, "Carrying leave over needs approval."), (72, 706, "Ask before December.")])
    small_grid, small_cells = _grid([["Office", "Closed"], ["Berlin", "24 Dec"]], left=72, top=700, widths=[150, 150])
    third = _page(small_cells, small_grid)
    return _pdf([first, second, third])


LEAVE_MARKDOWN = (
    "| Band | Annual leave | Carry over |\n"
    "| --- | --- | --- |\n"
    "| One | 20 days | 5 days |\n"
    "| Three | 25 days | 10 days |"
)


def test_a_ruled_table_becomes_a_markdown_table_in_reading_order() -> None:
    assert pdf_tables.available()
    result = extract(policy_pdf(), name="policy.pdf")
    units = list(result.units)
    assert [(u.page, u.kind) for u in units] == [(1, "text"), (1, "table"), (1, "text"), (2, "text"), (3, "table")]
    assert units[0].text == "Leave policy for every band.\nThe table below is binding."
    assert units[1].text == LEAVE_MARKDOWN
    assert units[2].text == "Requests go to your manager."
    assert units[3].text == "Carrying leave over needs approval.\nAsk before December."  # pypdf's text, as before
    assert units[4].text == "| Office | Closed |\n| --- | --- |\n| Berlin | 24 Dec |"
    assert result.meta["pages"] == 3 and result.meta["table_pages"] == [1, 3]


def test_without_the_extra_the_text_layer_stays_plain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pdfplumber", None)  # what an install without [pdf] looks like
    assert not pdf_tables.available()
    result = extract(policy_pdf(), name="policy.pdf")
    units = list(result.units)
    assert {u.kind for u in units} == {"text"}
    assert [u.page for u in units] == [1, 2, 3]
    assert "|" not in units[0].text
    for word in ("Band", "Annual leave", "25 days", "Requests go to your manager."):
        assert word in units[0].text
    assert "table_pages" not in result.meta


def test_a_framed_paragraph_is_not_a_table() -> None:
    """A single box around text (one cell) keeps the page's plain text."""
    box = b"0.5 w 60 600 m 500 600 l S 60 700 m 500 700 l S 60 600 m 60 700 l S 500 600 m 500 700 l S"
    result = extract(_pdf([_page([(72, 660, "Note: offices close at noon.")], box)]), name="note.pdf")
    assert [(u.kind, u.text) for u in result.units] == [("text", "Note: offices close at noon.")]
    assert "table_pages" not in result.meta


def test_a_callers_open_file_is_read_twice_and_left_open() -> None:
    stream = io.BytesIO(b"preamble" + policy_pdf())
    stream.seek(len(b"preamble"))
    result = extract(stream, name="policy.pdf")
    assert [u.kind for u in result.units].count("table") == 2
    assert not stream.closed


async def test_the_table_is_one_chunk_and_is_found(database_url: str) -> None:
    async with ContextEngine(make_config(database_url)) as engine:
        report = await engine.ingest(file=io.BytesIO(policy_pdf()), name="policy.pdf")
        assert report.documents[0].status == "completed"
        hits = (await engine.search("annual leave carry over by band", principals=TRUSTED, top_k=10)).hits
    tables = [hit for hit in hits if hit.chunk_text.startswith("| Band |")]
    assert len(tables) == 1
    assert tables[0].chunk_text == LEAVE_MARKDOWN and tables[0].page == 1

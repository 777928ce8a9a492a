"""Ruled tables in born-digital PDFs reach the chunker as Markdown tables (the [pdf] extra)."""

from __future__ import annotations

import io
import sys

import pytest

from context_engine import TRUSTED, ContextEngine
from context_engine.ingest.formats import extract, pdf_tables
from tests import tablepdf
from tests.conftest import make_config

LEAVE_TABLE = [["Band", "Annual leave", "Carry over"], ["One", "20 days", "5 days"], ["Three", "25 days", "10 days"]]


def policy_pdf() -> bytes:
    """Page 1: a paragraph, the leave table, a closing paragraph. Page 2: text only. Page 3: a small table."""
    leave_grid, cells = tablepdf.grid(LEAVE_TABLE, left=72, top=650, widths=[120, 140, 140])
    first = tablepdf.page(
        [
            (72, 720, "Leave policy for every band."),
            (72, 706, "The table below is binding."),
            *cells,
            (72, 520, "Requests go to your manager."),
        ],
        leave_grid,
    )
    second = tablepdf.page([(72, 720, "Carrying leave over needs approval."), (72, 706, "Ask before December.")])
    offices = [["Office", "Closed"], ["Berlin", "24 Dec"]]
    small_grid, small_cells = tablepdf.grid(offices, left=72, top=700, widths=[150, 150])
    third = tablepdf.page(small_cells, small_grid)
    return tablepdf.pdf([first, second, third])


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
    framed = tablepdf.pdf([tablepdf.page([(72, 660, "Note: offices close at noon.")], box)])
    result = extract(framed, name="note.pdf")
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

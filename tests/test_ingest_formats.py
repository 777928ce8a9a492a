"""Every supported format round-trips through the engine from files the tests generate."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import docx
import openpyxl
import pptx
from sqlalchemy import text

from context_engine import TRUSTED, ContextEngine
from tests.filegen import docx_bytes, make_eml, make_pdf, write_zip_bomb


async def _chunks(engine: ContextEngine, document_id: str) -> list[dict[str, Any]]:
    db = await engine.database()
    async with db.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT position, text, section, page, kind, meta FROM ce_chunks "
                "WHERE document_id = CAST(:d AS uuid) AND valid_to IS NULL ORDER BY position"
            ),
            {"d": document_id},
        )
        return [dict(r) for r in rows.mappings()]


async def _ingest(engine: ContextEngine, data: bytes, name: str) -> tuple[str, list[dict[str, Any]]]:
    report = (await engine.ingest(file=data, name=name)).documents[0]
    assert report.status == "completed", report
    return report.document_id or "", await _chunks(engine, report.document_id or "")


def _docx() -> bytes:
    document = docx.Document()
    document.add_heading("Termination", level=1)
    document.add_paragraph("Either party may end the contract with ninety days notice.")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Party", "Notice"
    table.cell(1, 0).text, table.cell(1, 1).text = "Supplier", "90 days"
    return docx_bytes(document)


def _pptx() -> bytes:
    deck = pptx.Presentation()
    for title, body in (("Roadmap", "Ship search in March."), ("Risks", "Hiring is slow.")):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    buffer = io.BytesIO()
    deck.save(buffer)
    return buffer.getvalue()


def _xlsx() -> bytes:
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Invoices"
    sheet.append(["client", "amount", "note"])
    sheet.append(["Acme, Inc.", 1200, 'said "urgent"'])
    sheet.append(["Globex", 80, "line one\nline two"])
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


async def test_formats_keep_their_structure(engine: ContextEngine) -> None:
    _, pdf = await _ingest(engine, make_pdf(["Page one talks about apples.", "Page two talks about pears."]), "f.pdf")
    assert [(c["page"], "pears" in c["text"]) for c in pdf] == [(1, False), (2, True)]

    _, doc = await _ingest(engine, _docx(), "contract.docx")
    assert any(c["section"] == "Termination" and "ninety days" in c["text"] for c in doc)
    assert any(c["kind"] == "table" and "Supplier" in c["text"] for c in doc)

    _, deck = await _ingest(engine, _pptx(), "deck.pptx")
    assert [(c["section"], c["page"]) for c in deck] == [("Roadmap", 1), ("Risks", 2)]

    _, sheet = await _ingest(engine, _xlsx(), "book.xlsx")
    assert sheet[0]["kind"] == "schema" and sheet[0]["section"] == "Invoices"
    rows = [r for c in sheet if c["kind"] == "rows" for r in csv.reader(io.StringIO(c["text"]))]
    assert ["Acme, Inc.", "1200", 'said "urgent"'] in rows and ["Globex", "80", "line one\nline two"] in rows

    csv_data = b'name,comment\nAda,"first, then\nsecond"\nBob,plain\n'
    _, table = await _ingest(engine, csv_data, "people.csv")
    parsed = [r for c in table if c["kind"] == "rows" for r in csv.reader(io.StringIO(c["text"]))]
    assert ["Ada", "first, then\nsecond"] in parsed
    _, tsv = await _ingest(engine, b"name\tscore\nAda\t3\n", "scores.tsv")
    assert tsv[0]["kind"] == "schema"

    html = b"<html><head><title>T</title></head><body><h1>Refunds</h1><p>Refunds take five days.</p></body></html>"
    _, page = await _ingest(engine, html, "refunds.html")
    assert page[0]["section"] == "Refunds"

    eml = make_eml(subject="Quarterly numbers", body="Revenue grew four percent.",
                   attachments=[("notes.txt", b"Attached: churn fell.", "text/plain")])
    _, mail = await _ingest(engine, eml, "mail.eml")
    joined = "\n".join(c["text"] for c in mail)
    assert "Quarterly numbers" in joined and "Revenue grew" in joined and "churn fell" in joined

    _, js = await _ingest(engine, json.dumps({"customer": {"name": "Acme", "tier": "gold"}}).encode(), "c.json")
    assert any(c["section"] and c["section"].startswith("customer") for c in js)

    _, md = await _ingest(engine, b"# Setup\n\nRun make serve.\n\n## Tests\n\nRun make test.", "readme.md")
    assert [c["section"] for c in md] == ["Setup", "Tests"]
    _, plain = await _ingest(engine, b"Just a line of plain text.", "note.txt")
    assert plain[0]["text"] == "Just a line of plain text."

    hits = (await engine.search("ninety days notice", principals=TRUSTED, top_k=3)).hits
    assert hits[0].document_name == "contract.docx" and hits[0].section == "Termination"


async def test_bad_files_fail_alone_and_leave_nothing_half_indexed(engine: ContextEngine, tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.docx"
    write_zip_bomb(bomb, megabytes=64)
    cases = {
        "truncated.pdf": make_pdf(["Some text."])[:200],
        "corrupt.docx": b"PK\x03\x04" + b"\x00garbage" * 50,
        "bomb.docx": bomb.read_bytes(),
        "empty.txt": b"",
        "lying.txt": b"\x89PNG\r\n\x1a\n" + b"\x00" * 64,
        "binary.bin": bytes(range(256)) * 8,
    }
    for name, data in cases.items():
        report = (await engine.ingest(file=data, name=name)).documents[0]
        assert report.status == "failed", (name, report)
        assert report.failure_reason == "extraction_failed", (name, report)
        assert report.failure_message
    good = (await engine.ingest(file=make_pdf(["A fine page."]), name="a-pdf-named.txt")).documents[0]
    assert good.status == "completed" and good.mime == "application/pdf"
    stats = await engine.stats(principals=TRUSTED)
    assert stats.by_status == {"failed": len(cases), "completed": 1}
    assert stats.chunks == 1  # failed documents stored no chunks

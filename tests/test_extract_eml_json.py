"""E-mail (with attachments extracted recursively), JSON key paths, and format detection."""

from __future__ import annotations

import csv
import io
import json
import zipfile

import docx
import pytest

from context_engine.ingest.extracted import ExtractionFailed
from context_engine.ingest.formats import Extracted, Unit, detect_format, extract, register
from tests.filegen import docx_bytes, make_eml, make_pdf

# --------------------------------------------------------------------------------------------- e-mail


def _report_docx() -> bytes:
    document = docx.Document()
    document.add_heading("Findings", level=1)
    document.add_paragraph("Attachment paragraph about budgets.")
    return docx_bytes(document)


def test_eml_headers_body_and_attachments() -> None:
    data = make_eml(
        subject="Budget 2024",
        body="Hi team,\n\nThe budget is attached.\n\nAna",
        attachments=[
            ("report.docx", _report_docx(),
             "application/vnd.openxmlformats-officedocument.wordprocessingml.document"),
            ("scan.pdf", make_pdf(["PDF attachment text"]), "application/pdf"),
            ("figures.csv", b"q,amount\nQ1,10\n", "text/csv"),
            ("broken.docx", b"PK\x03\x04 not really a zip", "application/octet-stream"),
        ],
    )
    result = extract(data, name="mail.eml")
    assert result.mime == "message/rfc822"
    units = list(result.units)
    header = units[0]
    assert header.text.splitlines() == [
        "From: Ana Ruiz <ana@example.com>",
        "To: team@example.com",
        "Cc: boss@example.com",
        "Subject: Budget 2024",
        "Date: Tue, 05 Mar 2024 10:00:00 +0000",
    ]
    body = [u.text for u in units if u.meta.get("part") == "body"]
    assert body == ["Hi team,", "The budget is attached.", "Ana"]
    by_section: dict[str | None, list[Unit]] = {}
    for unit in units:
        by_section.setdefault(unit.section, []).append(unit)
    [docx_unit] = by_section["attachment: report.docx"]
    assert docx_unit.text == "Attachment paragraph about budgets."
    assert docx_unit.meta["attachment_section"] == "Findings"
    [pdf_unit] = by_section["attachment: scan.pdf"]
    assert pdf_unit.text == "PDF attachment text" and pdf_unit.page == 1
    csv_units = by_section["attachment: figures.csv"]
    assert [u.kind for u in csv_units] == ["schema", "rows"]
    assert list(csv.reader(io.StringIO(csv_units[1].text))) == [["q", "amount"], ["Q1", "10"]]
    records = {a["filename"]: a for a in result.meta["attachments"]}
    assert records["report.docx"]["status"] == "extracted"
    assert records["broken.docx"]["status"] == "failed"
    assert "not a valid Word document" in records["broken.docx"]["error"]


def test_eml_html_only_body_is_converted() -> None:
    from email.message import EmailMessage

    message = EmailMessage()
    message["From"] = "a@example.com"
    message["To"] = "b@example.com"
    message["Subject"] = "News"
    message.set_content("<html><body><h1>Title</h1><p>Hello <b>there</b></p><script>x</script></body></html>",
                        subtype="html")
    result = extract(bytes(message), name="news.eml")
    body = [u.text for u in result.units if u.meta.get("part") == "body"]
    assert body == ["Hello there"]


def test_eml_detected_without_extension() -> None:
    data = make_eml(subject="S", body="body text")
    assert extract(data).mime == "message/rfc822"


# ----------------------------------------------------------------------------------------------- JSON

CUSTOMERS = {
    "customers": [
        {"name": "Ana", "vip": True, "tags": ["a", "b"], "address": {"city": "Lisbon", "zip": "1000"}},
        {"name": "Bo", "vip": False, "address": {"city": "Oslo"}},
    ],
    "updated": "2024-03-01",
    "odd key": {"x.y": 1},
    "counts": [1, 2, 3],
}


def test_json_units_by_key_path() -> None:
    result = extract(json.dumps(CUSTOMERS).encode(), name="crm.json")
    assert result.mime == "application/json"
    assert result.meta["keys"] == ["customers", "updated", "odd key", "counts"]
    sections = {u.section: u.text for u in result.units}
    assert sections[None] == 'updated: 2024-03-01\ncounts: [1, 2, 3]'
    assert sections["customers[0]"] == 'name: Ana\nvip: true\ntags: ["a", "b"]'
    assert sections["customers[0].address"] == "city: Lisbon\nzip: 1000"
    assert sections["customers[1].address"] == "city: Oslo"
    assert sections['["odd key"]'] == "x.y: 1"


def test_json_top_level_array_and_sniffing() -> None:
    data = json.dumps([{"id": 1, "title": "x"}, {"id": 2, "extra": [{"k": "v"}]}]).encode()
    result = extract(data, name="export.txt")
    assert result.mime == "application/json"
    assert result.meta["keys"] == ["id", "title", "extra"]
    sections = {u.section: u.text for u in result.units}
    assert sections["[1].extra[0]"] == "k: v"


def test_json_lines() -> None:
    data = b'{"id": 1, "msg": "start"}\n\n{"id": 2, "msg": "stop", "ctx": {"host": "a"}}\n'
    for name in ("events.jsonl", None):
        result = extract(data, name=name)
        assert result.mime == "application/x-ndjson"
        assert {u.section: u.text for u in result.units} == {
            "[0]": "id: 1\nmsg: start", "[1]": "id: 2\nmsg: stop", "[1].ctx": "host: a",
        }
        assert result.meta["keys"] == ["id", "msg", "ctx"] and result.meta["records"] == 2
    with pytest.raises(ExtractionFailed, match="line 2"):
        extract(b'{"a": 1}\n{"a": \n', name="bad.jsonl")


def test_invalid_json_fails() -> None:
    with pytest.raises(ExtractionFailed, match="not valid JSON") as info:
        extract(b'{"a": 1,', name="bad.json")
    assert isinstance(info.value.__cause__, ValueError)


def test_bracket_text_is_not_json() -> None:
    result = extract(b"[1] A footnote-style first line.\n\nMore text.", name="notes.txt")
    assert result.mime == "text/plain"


# ------------------------------------------------------------------------------------------ detection


@pytest.mark.parametrize(
    ("head", "name", "mime"),
    [
        (b"%PDF-1.7\n...", "x.txt", "application/pdf"),
        (b"\x89PNG\r\n\x1a\n....", None, "image/png"),
        (b"\xff\xd8\xff\xe0", "a.pdf", "image/jpeg"),
        (b"II*\x00....", None, "image/tiff"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "old.doc", "application/x-ole-storage"),
        (b"<!DOCTYPE html><html>", "x.md", "text/html"),
        (b"  <html lang=en>", None, "text/html"),
        (b'{"a": 1}', None, "application/json"),
        (b"From: a@b.c\nTo: d@e.f\nSubject: hi\n\nbody", None, "message/rfc822"),
        (b"# Title", "r.md", "text/markdown"),
        (b"a,b\n1,2", "d.csv", "text/csv"),
        (b"a\tb", "d.tsv", "text/tab-separated-values"),
        (b"plain words", "x.pdf", "text/plain"),
        (b"plain words", None, "text/plain"),
        (b"BMW makes cars", None, "text/plain"),
        (b"\x00\x01\x02\x03garbage", "x.txt", "application/octet-stream"),
    ],
)
def test_detect_format(head: bytes, name: str | None, mime: str) -> None:
    assert detect_format(head, name) == mime


def test_detect_office_containers_from_members() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("xl/workbook.xml", "<workbook/>")
    assert detect_format(out.getvalue(), "x.docx") == (
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
    )


def test_legacy_office_fails_clearly() -> None:
    with pytest.raises(ExtractionFailed, match="legacy binary Office"):
        extract(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(512), name="old.doc")


def test_register_a_new_format() -> None:
    from context_engine.ingest.formats import REGISTRY

    def shout(source):  # type: ignore[no-untyped-def]
        return Extracted(mime="text/plain", units=[Unit(text=source.read().decode().upper())])

    previous = REGISTRY["text/plain"]
    register("text/plain", shout)
    try:
        assert [u.text for u in extract(b"quiet", name="q.txt").units] == ["QUIET"]
    finally:
        register("text/plain", previous)


def test_mime_hint_only_picks_among_text_formats() -> None:
    # a lying Content-Type cannot make a PDF reader parse text, nor text parse a PDF
    assert extract(b"a,b\n1,2\n", mime="application/pdf").mime == "text/plain"
    assert extract(make_pdf(["x"]), mime="text/plain").mime == "application/pdf"
    assert extract(b"a,b\n1,2\n", mime="text/csv").mime == "text/csv"

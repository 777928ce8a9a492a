"""PDF pages, truncated PDFs, scanned pages and images (OCR guarded by the [ocr] extra)."""

from __future__ import annotations

import io
from typing import Any

import pytest
from PIL import Image

from context_engine.ingest.extracted import ExtractionFailed
from context_engine.ingest.formats import extract, pdf
from tests.filegen import SCANNED, make_pdf

INSTALL_HINT = 'pip install "pg-context-engine[ocr]"'


@pytest.fixture
def no_ocr(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the test independent of whether this machine happens to have Tesseract."""
    monkeypatch.setattr(pdf, "ocr_engine", lambda: None)


@pytest.fixture
def fake_ocr(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    seen: list[Any] = []

    def engine(image: Any) -> str:
        seen.append(image)
        return "Scanned invoice total 42\n\nsecond block"

    monkeypatch.setattr(pdf, "ocr_engine", lambda: engine)
    return seen


def test_pdf_text_per_page() -> None:
    data = make_pdf(["Leave policy (2024)\nEveryone gets 25 days.", "Carry over\nFive days.", "Last page"],
                    title="Policy")
    result = extract(data, name="policy.pdf")
    assert result.mime == "application/pdf"
    assert result.meta["pages"] == 3
    assert result.meta["title"] == "Policy"
    units = list(result.units)
    assert [u.page for u in units] == [1, 2, 3]
    assert "Leave policy (2024)" in units[0].text and "Everyone gets 25 days." in units[0].text
    assert "Five days." in units[1].text
    assert units[2].text == "Last page"


def test_blank_page_has_no_units_but_counts() -> None:
    result = extract(make_pdf(["one", " ", "three"]), name="b.pdf")
    assert [u.page for u in result.units] == [1, 3]
    assert result.meta["pages"] == 3


def test_truncated_pdf_fails() -> None:
    data = make_pdf(["page one", "page two"])
    with pytest.raises(ExtractionFailed, match="truncated or corrupt PDF"):
        extract(data[: len(data) * 2 // 3], name="cut.pdf")


def test_garbage_after_pdf_header_fails_with_cause() -> None:
    data = b"%PDF-1.4\n" + b"this is not a pdf body\n" * 20 + b"%%EOF\n"
    with pytest.raises(ExtractionFailed, match="corrupt PDF") as info:
        extract(data, name="junk.pdf")
    assert info.value.__cause__ is not None


def test_scanned_page_without_ocr_names_the_extra(no_ocr: None) -> None:
    with pytest.raises(ExtractionFailed) as info:
        extract(make_pdf(["typed page", SCANNED, SCANNED]), name="scan.pdf")
    message = str(info.value)
    assert INSTALL_HINT in message and "Tesseract" in message
    assert "pages 2, 3" in message
    assert info.value.reason == "extraction_failed"


def test_scanned_page_with_ocr(fake_ocr: list[Any]) -> None:
    result = extract(make_pdf(["typed page", SCANNED]), name="scan.pdf")
    units = list(result.units)
    assert [(u.page, u.text) for u in units] == [
        (1, "typed page"), (2, "Scanned invoice total 42"), (2, "second block"),
    ]
    assert units[1].meta["ocr"] is True
    assert result.meta["ocr_pages"] == [2]
    assert len(fake_ocr) == 1 and isinstance(fake_ocr[0], Image.Image)


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.new("L", (16, 16), color=200).save(buffer, format="PNG")
    return buffer.getvalue()


def test_image_without_ocr_names_the_extra(no_ocr: None) -> None:
    with pytest.raises(ExtractionFailed, match="is an image") as info:
        extract(_png(), name="photo.png")
    assert INSTALL_HINT in str(info.value) and "Tesseract" in str(info.value)


@pytest.mark.parametrize("fmt,mime", [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("TIFF", "image/tiff")])
def test_images_detected_by_magic_and_ocrd(fake_ocr: list[Any], fmt: str, mime: str) -> None:
    buffer = io.BytesIO()
    Image.new("L", (16, 16), color=200).save(buffer, format=fmt)
    result = extract(buffer.getvalue(), name="scan.bin")
    assert result.mime == mime
    first = next(iter(result.units))
    assert (first.page, first.text) == (1, "Scanned invoice total 42")


def test_pdf_named_txt_is_read_as_pdf() -> None:
    result = extract(make_pdf(["hidden pdf"]), name="notes.txt")
    assert result.mime == "application/pdf"
    assert [u.text for u in result.units] == ["hidden pdf"]


def test_text_named_pdf_is_read_as_text() -> None:
    result = extract(b"Just some notes.\n\nSecond paragraph.", name="report.pdf")
    assert result.mime == "text/plain"
    assert [u.text for u in result.units] == ["Just some notes.", "Second paragraph."]


def test_binary_named_pdf_fails_and_says_so() -> None:
    expected = r"cannot be decoded as text.*named \.pdf but its content is not a PDF"
    with pytest.raises(ExtractionFailed, match=expected):
        extract(b"\x1f\x8b\x08\x00" + bytes(200), name="report.pdf")

"""Generators for the test documents, so no binary fixture is ever committed.

PDFs are written by hand (a Helvetica text page per entry, or an image-only "scanned" page);
Office files through python-docx / python-pptx / openpyxl; e-mail with the stdlib.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Sequence
from email.message import EmailMessage
from pathlib import Path

#: A page that draws only a small grey image and has no text: what a scanner produces.
SCANNED = object()


def _pdf_escape(text: str) -> bytes:
    raw = text.encode("latin-1")
    return raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def make_pdf(pages: Sequence[str | object], *, title: str | None = None) -> bytes:
    """A valid PDF 1.4 with one page per entry: text lines in Helvetica, or :data:`SCANNED`."""
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog = add(b"")  # filled in once the page tree exists
    tree = add(b"")
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    side = 8
    pixels = bytes((x * 31 + y * 17) % 256 for y in range(side) for x in range(side))
    image = add(
        b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceGray "
        b"/BitsPerComponent 8 /Length %d >>\nstream\n" % (side, side, len(pixels)) + pixels + b"\nendstream"
    )
    kids: list[int] = []
    for page in pages:
        if page is SCANNED:
            content = b"q 400 0 0 400 100 300 cm /Im1 Do Q"
            resources = b"<< /XObject << /Im1 %d 0 R >> >>" % image
        else:
            assert isinstance(page, str)
            lines = [b"BT /F1 12 Tf 14 TL 72 760 Td"]
            for number, line in enumerate(page.split("\n")):
                lines.append((b"" if number == 0 else b"T* ") + b"(" + _pdf_escape(line) + b") Tj")
            lines.append(b"ET")
            content = b"\n".join(lines)
            resources = b"<< /Font << /F1 %d 0 R >> >>" % font
        stream = add(b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream")
        kids.append(add(
            b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Resources %s /Contents %d 0 R >>"
            % (tree, resources, stream)
        ))
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R >>" % tree
    objects[tree - 1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % kid for kid in kids), len(kids)
    )
    info = add(b"<< /Title (" + _pdf_escape(title) + b") >>") if title else None

    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    trailer = b"<< /Size %d /Root %d 0 R" % (len(objects) + 1, catalog)
    if info:
        trailer += b" /Info %d 0 R" % info
    out += b"trailer\n" + trailer + b" >>\nstartxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def set_app_pages(docx: bytes, pages: int | None) -> bytes:
    """Rewrite ``docProps/app.xml``'s ``<Pages>`` (``None`` removes the part's count)."""
    source = zipfile.ZipFile(io.BytesIO(docx))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "docProps/app.xml":
                replacement = b"" if pages is None else b"<Pages>%d</Pages>" % pages
                data = re.sub(rb"<Pages>\d+</Pages>", replacement, data)
            target.writestr(item, data)
    return out.getvalue()


def docx_bytes(document: object) -> bytes:
    buffer = io.BytesIO()
    document.save(buffer)  # type: ignore[attr-defined]
    return buffer.getvalue()


def write_zip_bomb(path: Path, *, member: str = "word/document.xml", megabytes: int = 300) -> None:
    """An Office-looking zip whose one member inflates to ``megabytes`` of zeros.

    Written through ``ZipFile.open(..., "w")`` one MiB at a time, so the test never holds it.
    """
    block = bytes(1 << 20)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open(member, "w", force_zip64=True) as handle:
            for _ in range(megabytes):
                handle.write(block)


def make_eml(
    *,
    subject: str,
    body: str,
    html: str | None = None,
    attachments: Sequence[tuple[str, bytes, str]] = (),
) -> bytes:
    """A MIME message; each attachment is ``(filename, data, "maintype/subtype")``."""
    message = EmailMessage()
    message["From"] = "Ana Ruiz <ana@example.com>"
    message["To"] = "team@example.com"
    message["Cc"] = "boss@example.com"
    message["Subject"] = subject
    message["Date"] = "Tue, 05 Mar 2024 10:00:00 +0000"
    message.set_content(body)
    if html is not None:
        message.add_alternative(html, subtype="html")
    for filename, data, mime in attachments:
        maintype, subtype = mime.split("/")
        message.add_attachment(data, maintype=maintype, subtype=subtype, filename=filename)
    return bytes(message)

"""Born-digital PDFs with ruled tables, written by hand for the PDF table tests and benchmark.

Text is Helvetica placed at coordinates; a table is a grid of stroked lines around its cell
texts, which is how a word processor exports one.
"""

from __future__ import annotations

from collections.abc import Sequence

Text = tuple[float, float, str]  # x, y (from the bottom), the line


def _escape(text: str) -> bytes:
    return text.encode("latin-1").replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def grid(
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


def page(texts: Sequence[Text], drawing: bytes = b"") -> bytes:
    shown = [b"BT /F1 11 Tf %.1f %.1f Td (%s) Tj ET" % (x, y, _escape(line)) for x, y, line in texts]
    return b"\n".join([drawing, *shown])


def pdf(contents: Sequence[bytes]) -> bytes:
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

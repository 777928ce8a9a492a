"""Format detection: the content decides first, the name's extension second.

Binary formats (PDF, Office containers, images) are recognised ONLY by their magic bytes, so an
extension can never make a reader parse something that is not its format: a PDF named ``.txt``
is read as a PDF, and a text file named ``.pdf`` is read as text. Text formats have no magic, so
HTML, e-mail and JSON are sniffed from the opening text and everything else (Markdown, CSV, TSV)
is routed by its extension; a text file with an unknown extension is plain text.
"""

from __future__ import annotations

import io
import json
import pathlib
import re
import zipfile
from typing import IO

from context_engine.ingest.formats._base import bom_encoding, looks_binary

PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
ZIP = "application/zip"
OLE = "application/x-ole-storage"
PNG = "image/png"
JPEG = "image/jpeg"
TIFF = "image/tiff"
GIF = "image/gif"
BMP = "image/bmp"
WEBP = "image/webp"
HTML = "text/html"
MARKDOWN = "text/markdown"
TEXT = "text/plain"
CSV = "text/csv"
TSV = "text/tab-separated-values"
JSON = "application/json"
JSONL = "application/x-ndjson"
EML = "message/rfc822"
BINARY = "application/octet-stream"

ZIP_CONTAINERS = frozenset({DOCX, PPTX, XLSX})
IMAGES = frozenset({PNG, JPEG, TIFF, GIF, BMP, WEBP})

#: The member whose presence identifies each Office Open XML container.
_ZIP_MARKERS: tuple[tuple[bytes, str], ...] = (
    (b"word/document.xml", DOCX),
    (b"ppt/presentation.xml", PPTX),
    (b"xl/workbook.xml", XLSX),
)

_IMAGE_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", PNG),
    (b"\xff\xd8\xff", JPEG),
    (b"II*\x00", TIFF),
    (b"MM\x00*", TIFF),
    (b"GIF87a", GIF),
    (b"GIF89a", GIF),
    (b"BM", BMP),
)

_OTHER_BINARY: tuple[bytes, ...] = (
    b"\x1f\x8b",  # gzip
    b"7z\xbc\xaf\x27\x1c",
    b"Rar!\x1a\x07",
    b"\x7fELF",
    b"MZ",  # Windows executables
)

#: Extensions that route a TEXT file; binary formats are never routed by extension.
_TEXT_EXTENSIONS: dict[str, str] = {
    ".md": MARKDOWN,
    ".markdown": MARKDOWN,
    ".mdown": MARKDOWN,
    ".mkd": MARKDOWN,
    ".html": HTML,
    ".htm": HTML,
    ".xhtml": HTML,
    ".csv": CSV,
    ".tsv": TSV,
    ".tab": TSV,
    ".json": JSON,
    ".jsonl": JSONL,
    ".ndjson": JSONL,
    ".eml": EML,
}

_OFFICE_EXTENSIONS: dict[str, str] = {".docx": DOCX, ".pptx": PPTX, ".xlsx": XLSX, ".xlsm": XLSX}

_HTML_START = re.compile(rb"^\s*(<!--.*?-->\s*)*<(!doctype\s+html|html[\s>]|head[\s>]|body[\s>])",
                         re.IGNORECASE | re.DOTALL)
_XML_HTML = re.compile(rb"^\s*<\?xml[^>]*>\s*(<!doctype\s+html|<html[\s>])", re.IGNORECASE)
_HEADER_LINE = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):[ \t]*(.*)$")
_CONTINUATION = re.compile(r"^[ \t]+\S")
_MAIL_HEADERS = frozenset(
    {"from", "to", "cc", "subject", "date", "message-id", "mime-version", "received", "return-path",
     "reply-to", "content-type", "x-mailer", "delivered-to", "sender"}
)
_JSON_OPEN = re.compile(r'^\s*(\{\s*("|\}|$)|\[\s*(\{|\[|\]|"|-?\d|true\b|false\b|null\b))')
_JSON_OBJECT = re.compile(r'^\s*\{\s*"')


def _zip_kind(head: bytes) -> tuple[str, bool]:
    """Which Office container a zip is, and whether that answer came from the central directory.

    With the whole file the member list is authoritative; with only a head, the local headers'
    member names are scanned instead and the answer is a guess.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(head)) as archive:
            names = set(archive.namelist())
    except (zipfile.BadZipFile, ValueError, OSError, EOFError):
        for marker, mime in _ZIP_MARKERS:
            if marker in head:
                return mime, False
        return ZIP, False
    for marker, mime in _ZIP_MARKERS:
        if marker.decode() in names:
            return mime, True
    return ZIP, True


def zip_kind_of_stream(stream: IO[bytes]) -> str | None:
    """The container kind from a whole zip's central directory (nothing is decompressed), or
    None when there is no readable central directory (a corrupt or truncated zip)."""
    try:
        with zipfile.ZipFile(stream) as archive:
            names = set(archive.namelist())
    except (zipfile.BadZipFile, ValueError, OSError, EOFError):
        return None
    for marker, mime in _ZIP_MARKERS:
        if marker.decode() in names:
            return mime
    return ZIP


def _is_json_lines(text: str) -> bool:
    """Two or more complete lines, each one JSON value (the head's last line may be cut off)."""
    lines = [line for line in text.splitlines()[:20] if line.strip()]
    if len(lines) < 2:
        return False
    try:
        json.loads(text)
        return False
    except ValueError:
        pass
    try:
        for line in lines[:-1]:
            json.loads(line)
    except ValueError:
        return False
    return True


def _sniff_text(text: str) -> str | None:
    """HTML, e-mail or JSON from the opening text, or None when the text has no tell."""
    stripped = text.lstrip()
    if _JSON_OPEN.match(stripped):
        return JSON
    if _looks_like_mail(stripped):
        return EML
    return None


def _looks_like_mail(text: str) -> bool:
    """An RFC 5322 header block: only header lines up to the first blank line, two of them known."""
    known = 0
    lines = text.splitlines()
    for line in lines[:200]:
        if not line.strip():
            break
        if _CONTINUATION.match(line):
            continue
        match = _HEADER_LINE.match(line)
        if match is None:
            return False
        if match.group(1).lower() in _MAIL_HEADERS:
            known += 1
    return known >= 2 and any(_HEADER_LINE.match(line) for line in lines[:1])


def detect_format(head: bytes, name: str | None) -> str:
    """The mime type of a file from its leading bytes, then its name.

    ``head`` should be the first few kilobytes (the whole file is fine); a zip container is
    recognised by the member names in it. Returns ``application/octet-stream`` for binary content
    no reader understands, and ``application/zip`` for a zip that is no Office document.
    """
    ext = pathlib.PurePath(name).suffix.lower() if name else ""
    stripped = head.lstrip(b"\t\n\r ")
    if b"%PDF-" in head[:1024]:
        return PDF
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        kind, certain = _zip_kind(head)
        if kind == ZIP and not certain and ext in _OFFICE_EXTENSIONS:
            # A head too short (or a zip too broken) to show the marker: the extension is only a
            # tiebreak here, and the reader it picks reports the corrupt container.
            return _OFFICE_EXTENSIONS[ext]
        return kind
    if head.startswith(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"):
        return OLE
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return WEBP
    for magic, mime in _IMAGE_MAGIC:
        # "BM" also opens plenty of text, so a bitmap must look binary as well.
        if head.startswith(magic) and (mime != BMP or looks_binary(head[:64])):
            return mime
    if head.startswith(_OTHER_BINARY):
        return BINARY
    if _HTML_START.match(stripped) or _XML_HTML.match(stripped):
        return HTML
    encoding = bom_encoding(head)
    if encoding is None and looks_binary(head):
        return BINARY
    try:
        text = head.decode(encoding or "utf-8", errors="replace")
    except LookupError:  # pragma: no cover - the codecs named above always exist
        text = ""
    text = text.lstrip("\ufeff")
    if encoding is not None and _HTML_START.match(text.encode("utf-8", "replace")):
        return HTML
    sniffed = _sniff_text(text)
    if sniffed == JSON and (ext in (".jsonl", ".ndjson") or _is_json_lines(text)):
        return JSONL
    if sniffed == JSON and ext != ".json":
        # A bracket is only a hint: a document that parses is JSON whatever its name says, and so
        # is an object opening (``{"``) under a name that routes no other text format. A ``[1]``
        # footnote in a .txt file stays text.
        try:
            json.loads(text)
        except ValueError:
            if not (_JSON_OBJECT.match(text) and ext not in _TEXT_EXTENSIONS):
                sniffed = None
    if sniffed is not None:
        return sniffed
    return _TEXT_EXTENSIONS.get(ext, TEXT)

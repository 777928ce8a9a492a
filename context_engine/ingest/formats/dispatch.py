"""Which reader a file goes to: its format detected, looked up in the registry, the failure contract applied.

Kept apart from the package's ``__init__`` (which imports every built-in format so that each
registers itself) so that a format reading a nested file, an e-mail's attachment, can call
:func:`extract_source` without importing its own package.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterable, Iterator
from typing import IO, TYPE_CHECKING

from context_engine.errors import IngestTooLarge
from context_engine.ingest.extracted import Extracted, ExtractionFailed, Unit
from context_engine.ingest.formats import detect
from context_engine.ingest.formats._base import REGISTRY, Source
from context_engine.ingest.formats.detect import detect_format

if TYPE_CHECKING:
    from context_engine.ingest.formats.page_transcriber import PageTranscriber

#: How deep attachments inside attachments are followed (an e-mail quoting an e-mail …).
MAX_DEPTH = 4

#: Formats that have no magic bytes: a caller's ``mime`` may choose among these, like an extension.
_TEXT_FAMILY = frozenset(
    {detect.TEXT, detect.MARKDOWN, detect.CSV, detect.TSV, detect.HTML, detect.JSON, detect.JSONL, detect.EML}
)

_ALIASES = {
    "text/x-markdown": detect.MARKDOWN,
    "text/md": detect.MARKDOWN,
    "application/xhtml+xml": detect.HTML,
    "text/x-csv": detect.CSV,
    "application/csv": detect.CSV,
    "text/tsv": detect.TSV,
    "text/json": detect.JSON,
    "application/jsonl": detect.JSONL,
    "application/x-jsonlines": detect.JSONL,
    "application/x-pdf": detect.PDF,
    "image/jpg": detect.JPEG,
}

_NAMES = {
    detect.PDF: "a PDF",
    detect.DOCX: "a Word document",
    detect.PPTX: "a PowerPoint presentation",
    detect.XLSX: "an Excel workbook",
}

_BINARY_EXTENSIONS = {".pdf": "a PDF", ".docx": "a Word document", ".pptx": "a PowerPoint presentation",
                      ".xlsx": "an Excel workbook", ".png": "a PNG image", ".jpg": "a JPEG image",
                      ".jpeg": "a JPEG image", ".tif": "a TIFF image", ".tiff": "a TIFF image"}


def registered_formats() -> list[str]:
    """The mime types :func:`extract` can read."""
    return sorted(REGISTRY)


def _normalise(mime: str | None) -> str | None:
    if not mime:
        return None
    base = mime.split(";", 1)[0].strip().lower()
    return _ALIASES.get(base, base)


def _resolve(src: Source, hint: str | None) -> str:
    """Content first, then the extension, then ``mime`` (which only chooses among text formats)."""
    head = src.head()
    kind = detect_format(head, src.name)
    if (kind == detect.ZIP or kind in detect.ZIP_CONTAINERS) and src.size > len(head):
        # The head only showed local headers; the central directory is the authority.
        with src.open() as stream:
            real = detect.zip_kind_of_stream(stream)
        if real is not None:
            kind = real
    if kind == detect.TEXT and hint in _TEXT_FAMILY and hint in REGISTRY:
        return hint
    return kind


def _unsupported(src: Source, mime: str) -> ExtractionFailed:
    if mime == detect.OLE:
        return ExtractionFailed(
            f"{src.label} is a legacy binary Office file (.doc/.xls/.ppt), which is not supported; "
            "save it as .docx, .xlsx or .pptx"
        )
    if mime == detect.ZIP:
        return ExtractionFailed(f"{src.label} is a zip archive that is not a Word, PowerPoint or Excel file")
    if mime == detect.BINARY:
        claimed = _BINARY_EXTENSIONS.get(src.ext)
        note = f"; it is named {src.ext} but its content is not {claimed}" if claimed else ""
        return ExtractionFailed(
            f"{src.label} cannot be decoded as text (binary data of no supported format{note})"
        )
    return ExtractionFailed(f"{src.label} has format {mime}, which no extractor reads")


def _guarded(units: Iterable[Unit], src: Source, mime: str) -> Iterator[Unit]:
    """Apply the failure contract to a streaming extractor's errors, raised mid-iteration."""
    try:
        yield from units
    except (ExtractionFailed, IngestTooLarge, ImportError):
        raise
    except Exception as exc:
        raise ExtractionFailed(f"{src.label} could not be read as {_NAMES.get(mime, mime)}: {exc}") from exc


def extract_source(src: Source, mime: str | None = None) -> Extracted:
    """:func:`extract` for an already wrapped :class:`Source` (attachments recurse through here)."""
    if src.depth > MAX_DEPTH:
        raise ExtractionFailed(f"{src.label} is nested more than {MAX_DEPTH} levels deep")
    if src.size == 0:
        raise ExtractionFailed("the file is empty")
    resolved = _resolve(src, _normalise(mime))
    fn = REGISTRY.get(resolved)
    if fn is None:
        raise _unsupported(src, resolved)
    try:
        result = fn(src)
    except (ExtractionFailed, IngestTooLarge, ImportError):
        raise
    except Exception as exc:
        raise ExtractionFailed(
            f"{src.label} could not be read as {_NAMES.get(resolved, resolved)}: {exc}"
        ) from exc
    if not isinstance(result.units, list | tuple):
        result.units = _guarded(result.units, src, resolved)
    return result


def extract(
    source: bytes | pathlib.Path | IO[bytes],
    *,
    name: str | None = None,
    mime: str | None = None,
    max_rows: int | None = None,
    vision: PageTranscriber | None = None,
) -> Extracted:
    """Extract ``source`` (bytes, a path, or a seekable binary file the caller keeps open).

    ``name`` supplies the extension for formats without magic bytes (a path's own name is used if
    omitted). ``mime`` is the weakest hint: it can only choose among the text formats (CSV vs
    Markdown …) for content that neither sniffing nor the extension placed. ``max_rows`` caps the
    data rows of ``.csv``, ``.tsv`` and ``.xlsx`` files (by the name's extension, header rows not
    counted, across all sheets of a workbook) and raises ``IngestTooLarge`` while streaming.
    ``vision`` (``vision_llm``'s transcriber for one ingest) reads scanned pages and images with the
    model instead of Tesseract; it must be called from a worker thread, off its event loop.
    """
    return extract_source(Source.of(source, name=name, max_rows=max_rows, vision=vision), mime)

"""Shared plumbing for the format readers: where the bytes come from, the registry, text decoding.

Kept apart from ``__init__`` so every format module can import it without a cycle.
"""

from __future__ import annotations

import codecs
import io
import pathlib
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING

from context_engine.ingest.extracted import Extracted, ExtractionFailed, Unit

if TYPE_CHECKING:
    from context_engine.ingest.formats.page_transcriber import PageTranscriber

#: How many leading bytes format sniffing and the text plausibility check look at.
HEAD_BYTES = 64 * 1024

#: Share of C0 control bytes (other than tab, newline, CR, form feed, ESC) above which the head is
#: taken for binary rather than text. Real text in any 8-bit encoding has almost none.
MAX_CONTROL_SHARE = 0.02

_ALLOWED_CONTROLS = frozenset(b"\t\n\r\x0c\x1b")
_CONTROL_BYTES = frozenset(range(0x20)) - _ALLOWED_CONTROLS | {0x7F}


@dataclass
class Source:
    """One input, readable more than once: ``bytes``, a path, or a seekable binary file object.

    A file object is read from its position at construction and never closed here: the caller
    owns it. A path is opened afresh for every pass so streaming readers never hold it all.
    """

    name: str | None = None
    max_rows: int | None = None
    data: bytes | None = None
    path: pathlib.Path | None = None
    file: IO[bytes] | None = None
    depth: int = 0
    #: ``vision_llm``'s transcriber for this ingest (scanned pages, images); None reads them as before
    vision: PageTranscriber | None = field(default=None, repr=False)
    _start: int = field(default=0, repr=False)

    @classmethod
    def of(
        cls,
        source: bytes | bytearray | memoryview | pathlib.Path | str | IO[bytes],
        *,
        name: str | None,
        max_rows: int | None,
        depth: int = 0,
        vision: PageTranscriber | None = None,
    ) -> Source:
        """Wrap whatever the caller handed over; a ``str`` is a path, never content."""
        if isinstance(source, bytes | bytearray | memoryview):
            return cls(name=name, max_rows=max_rows, data=bytes(source), depth=depth, vision=vision)
        if isinstance(source, str | pathlib.PurePath):
            path = pathlib.Path(source)
            return cls(name=name if name is not None else path.name, max_rows=max_rows, path=path,
                       depth=depth, vision=vision)
        if hasattr(source, "read"):
            file_name = getattr(source, "name", None)
            if name is None and isinstance(file_name, str):
                name = pathlib.Path(file_name).name
            seekable = getattr(source, "seekable", None)
            if seekable is None or not seekable():
                # One pass is all a pipe offers; sniffing needs two, so keep the bytes.
                return cls(name=name, max_rows=max_rows, data=source.read(), depth=depth, vision=vision)
            return cls(name=name, max_rows=max_rows, file=source, depth=depth, vision=vision, _start=source.tell())
        raise TypeError(f"cannot extract from {type(source).__name__}; pass bytes, a path or a binary file")

    @property
    def ext(self) -> str:
        """The lower-case extension of the name (``.csv``), or ``""``."""
        return pathlib.PurePath(self.name).suffix.lower() if self.name else ""

    @property
    def label(self) -> str:
        """How messages name this input."""
        return repr(self.name) if self.name else "the file"

    @property
    def size(self) -> int:
        if self.data is not None:
            return len(self.data)
        if self.path is not None:
            return self.path.stat().st_size
        assert self.file is not None
        end = self.file.seek(0, io.SEEK_END)
        self.file.seek(self._start)
        return end - self._start

    @contextmanager
    def open(self) -> Iterator[IO[bytes]]:
        """A binary stream positioned at the start of the content."""
        if self.data is not None:
            yield io.BytesIO(self.data)
        elif self.path is not None:
            with self.path.open("rb") as handle:
                yield handle
        else:
            assert self.file is not None
            self.file.seek(self._start)
            yield self.file

    def head(self, limit: int = HEAD_BYTES) -> bytes:
        if self.data is not None:
            return self.data[:limit]
        with self.open() as stream:
            return stream.read(limit)

    def read(self) -> bytes:
        if self.data is not None:
            return self.data
        with self.open() as stream:
            return stream.read()


Extractor = Callable[[Source], Extracted]

REGISTRY: dict[str, Extractor] = {}


def register(mime: str, extractor: Extractor) -> Extractor:
    """Route ``mime`` to ``extractor``; a later registration replaces an earlier one."""
    REGISTRY[mime.lower()] = extractor
    return extractor


def extractor(*mimes: str) -> Callable[[Extractor], Extractor]:
    """Decorator form of :func:`register` for the built-in formats."""

    def wrap(fn: Extractor) -> Extractor:
        for mime in mimes:
            register(mime, fn)
        return fn

    return wrap


# --------------------------------------------------------------------------------------------- text

_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def bom_encoding(head: bytes) -> str | None:
    """The encoding a byte-order mark announces, or None (UTF-32 is tested before UTF-16)."""
    for bom, encoding in _BOMS:
        if head.startswith(bom):
            return encoding
    return None


def looks_binary(head: bytes) -> bool:
    """True when the bytes cannot be text in any 8-bit encoding: a NUL, or too many controls."""
    if not head:
        return False
    if b"\x00" in head:
        return True
    controls = sum(1 for byte in head if byte in _CONTROL_BYTES)
    return controls / len(head) > MAX_CONTROL_SHARE


@dataclass
class DecodeStats:
    """What decoding did, for ``Extracted.meta``: the encoding and how many lines fell back."""

    encoding: str = "utf-8"
    fallback_lines: int = 0
    fallback_encodings: set[str] = field(default_factory=set)

    def as_meta(self) -> dict[str, object]:
        meta: dict[str, object] = {"encoding": self.encoding}
        if self.fallback_lines:
            meta["encoding"] = "mixed"
            meta["fallback_lines"] = self.fallback_lines
            meta["fallback_encodings"] = sorted(self.fallback_encodings)
        return meta


def _not_text(source: Source, why: str) -> ExtractionFailed:
    return ExtractionFailed(f"{source.label} cannot be decoded as text ({why})")


def _decode_line(raw: bytes, stats: DecodeStats) -> str:
    """UTF-8, else cp1252, else latin-1 (which cannot fail) — decided line by line."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    stats.fallback_lines += 1
    try:
        text = raw.decode("cp1252")
        stats.fallback_encodings.add("cp1252")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
        stats.fallback_encodings.add("latin-1")
    return text


def iter_text_lines(source: Source, stats: DecodeStats | None = None) -> Iterator[str]:
    """Decoded lines (line ends kept), streamed from ``source`` without reading it whole.

    The rule: a byte-order mark decides (UTF-8, UTF-16, UTF-32; a UTF-16/32 file that does not
    decode fails). Without one the head must look like text (no NUL, almost no control bytes),
    then EACH LINE is UTF-8 if it decodes as UTF-8, else cp1252, else latin-1 — so one pasted
    Windows-1252 line does not fail, or garble, a UTF-8 file. A NUL byte anywhere fails the file.
    """
    stats = stats if stats is not None else DecodeStats()
    head = source.head()
    if not head:
        raise ExtractionFailed("the file is empty")
    encoding = bom_encoding(head)
    with source.open() as stream:
        if encoding in ("utf-16", "utf-32"):
            stats.encoding = encoding
            reader = io.TextIOWrapper(stream, encoding=encoding, errors="strict", newline="")
            try:
                yield from reader
            except UnicodeDecodeError as exc:
                raise _not_text(source, f"invalid {encoding}") from exc
            finally:
                reader.detach()
            return
        if looks_binary(head):
            raise _not_text(source, "it contains binary data")
        stats.encoding = "utf-8"
        first = True
        for number, raw in enumerate(stream, start=1):
            if first:
                first = False
                if raw.startswith(codecs.BOM_UTF8):
                    raw = raw[len(codecs.BOM_UTF8):]
            if b"\x00" in raw:
                raise _not_text(source, f"a NUL byte on line {number}")
            yield _decode_line(raw, stats)


def decode_text(source: Source) -> tuple[str, DecodeStats]:
    """The whole text of a small text file, by the rule of :func:`iter_text_lines`."""
    stats = DecodeStats()
    text = "".join(iter_text_lines(source, stats))
    return text.replace("\r\n", "\n").replace("\r", "\n"), stats


def no_text(source: Source) -> ExtractionFailed:
    """A readable file that yielded nothing worth indexing is still a failure, said plainly."""
    return ExtractionFailed(f"{source.label} contains no extractable text")


# ------------------------------------------------------------------------------------------- tables

_WHITESPACE = re.compile(r"\s+")


def squash(text: str) -> str:
    """Collapse runs of whitespace (newlines included) to one space."""
    return _WHITESPACE.sub(" ", text).strip()


def pipe_table(rows: list[list[str]]) -> str:
    """A document table as Markdown pipe rows, the first row taken as the header.

    Pipe rows (not CSV) because a document table is read, not computed over: a model and a
    full-text index both see the cells as words. A ``|`` inside a cell is escaped as ``\\|`` and
    line breaks inside a cell become spaces, so one line is always one row. Short rows are padded.
    """
    cleaned = [[squash(cell).replace("|", "\\|") for cell in row] for row in rows]
    cleaned = [row for row in cleaned if any(row)]
    if not cleaned:
        return ""
    width = max(len(row) for row in cleaned)
    lines = []
    for number, row in enumerate(cleaned):
        padded = row + [""] * (width - len(row))
        lines.append("| " + " | ".join(padded) + " |")
        if number == 0:
            lines.append("|" + "|".join([" --- "] * width) + "|")
    return "\n".join(lines)


class SectionReader:
    """What a reader of a structured format keeps: the units so far and the headings above the text."""

    def __init__(self) -> None:
        self.units: list[Unit] = []
        self.headings: list[tuple[int, str]] = []

    @property
    def section(self) -> str | None:
        """The innermost heading the text is under."""
        return self.headings[-1][1] if self.headings else None

    def emit(self, text: str, kind: str = "text", **meta: object) -> None:
        """One unit under the current headings (nothing for blank text)."""
        if text.strip():
            path = [title for _, title in self.headings]
            self.units.append(Unit(text=text, section=self.section, kind=kind, meta={"headings": path, **meta}))

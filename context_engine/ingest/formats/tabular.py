"""CSV, TSV and XLSX: a schema unit per sheet, then the rows as real RFC 4180 CSV, streamed.

Nothing here materialises a sheet. ``Extracted.units`` is a generator; each sheet first buffers a
bounded prefix (:data:`SCHEMA_SAMPLE_ROWS` rows) to infer column types and decide which columns
exist, yields one atomic ``kind="schema"`` unit, then yields ``kind="rows"`` units of at most
about :data:`ROWS_UNIT_CHARS` characters, each starting with the header row so every unit parses
on its own with ``csv.reader``. Records end in CRLF as RFC 4180 says; a field's own newlines,
commas and quotes are kept and quoted.

Columns: an unnamed column (blank header cell, or cells past the header's width) that is empty
in the prefix is dropped; a named column is kept even when every cell is empty, because the name
is a fact. If a dropped column turns up a value later, it is brought back from that row on (a new
unit starts with the wider header) and listed in the sheet's ``late_columns`` — dropping data
would be worse than a header that grows. A kept unnamed column is called ``column_<n>`` (1-based).

``max_rows`` counts DATA rows (not the header, not blank rows), across all sheets of a workbook,
for ``.csv``/``.tsv``/``.xlsx`` names only, and raises ``IngestTooLarge`` at the row that passes.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import itertools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from context_engine.errors import IngestTooLarge
from context_engine.ingest.extracted import Extracted, ExtractionFailed, Unit
from context_engine.ingest.formats import detect
from context_engine.ingest.formats._base import DecodeStats, Source, extractor, iter_text_lines
from context_engine.ingest.formats.zipguard import check_zip

#: Rows buffered per sheet before the schema unit is written (types and columns come from these).
SCHEMA_SAMPLE_ROWS = 100
#: Target size of one rows unit, header included; a single longer row is a unit of its own.
ROWS_UNIT_CHARS = 2000
#: Distinct sample values shown per column in the schema unit.
SAMPLE_VALUES = 3
#: Only files with these extensions are counted against ``max_rows``.
COUNTED_EXTENSIONS = frozenset({".csv", ".tsv", ".xlsx"})

_INTEGER = re.compile(r"^[+-]?\d+$")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d+)?$")
_BOOLEANS = frozenset({"true", "false", "yes", "no"})
_DATE_FORMATS = ("%d/%m/%Y", "%m/%d/%Y", "%d.%m.%Y", "%Y/%m/%d", "%d-%b-%Y", "%b %d, %Y")


class RowCounter:
    """The authoritative ``max_rows`` count, shared by every sheet of one file."""

    def __init__(self, source: Source) -> None:
        self.limit = source.max_rows if source.ext in COUNTED_EXTENSIONS else None
        self.count = 0

    def tick(self) -> None:
        self.count += 1
        if self.limit is not None and self.count > self.limit:
            raise IngestTooLarge("ingest.max_rows", self.limit, self.count, unit="rows")


# ------------------------------------------------------------------------------------ type inference


def _is_date(text: str) -> bool:
    try:
        dt.datetime.fromisoformat(text)
        return True
    except ValueError:
        pass
    for fmt in _DATE_FORMATS:
        try:
            dt.datetime.strptime(text, fmt)
            return True
        except ValueError:
            continue
    return False


def value_type(value: Any) -> str | None:
    """The type name of one cell, or None for an empty one."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float | decimal.Decimal):
        return "number"
    if isinstance(value, dt.date | dt.datetime | dt.time):
        return "date"
    text = str(value).strip()
    if not text:
        return None
    if _INTEGER.match(text):
        return "integer"
    if _NUMBER.match(text) or _THOUSANDS.match(text):
        return "number"
    if text.lower() in _BOOLEANS:
        return "boolean"
    if len(text) <= 40 and any(ch.isdigit() for ch in text) and _is_date(text):
        return "date"
    return "text"


def infer_type(values: Iterable[Any]) -> str:
    """One type for a column: the common type of its non-empty cells, ``empty`` if there are none."""
    kinds = {kind for kind in map(value_type, values) if kind is not None}
    if not kinds:
        return "empty"
    if len(kinds) == 1:
        return kinds.pop()
    if kinds == {"integer", "number"}:
        return "number"
    return "text"


# --------------------------------------------------------------------------------------- rendering


def cell_text(value: Any) -> str:
    """A cell as CSV text: ISO dates, TRUE/FALSE, integers without a trailing ``.0``."""
    if value.__class__ is str:  # the common case, first: this runs once per cell
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, dt.datetime):
        if value.time() == dt.time(0, 0):
            return value.date().isoformat()
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


def _is_empty(value: Any) -> bool:
    if value.__class__ is str:
        return not value or value.isspace()
    return value is None


def to_csv(rows: Iterable[Sequence[str]]) -> str:
    """RFC 4180 text: minimal quoting, doubled quotes, CRLF between records (none after the last)."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\r\n").writerows(rows)
    text = buffer.getvalue()
    return text[:-2] if text.endswith("\r\n") else text


class _LineWriter:
    """One CSV record at a time, reusing a buffer (a sheet has hundreds of thousands of rows)."""

    def __init__(self) -> None:
        self._buffer = io.StringIO()
        self._writer = csv.writer(self._buffer, lineterminator="\r\n")

    def __call__(self, row: Sequence[str]) -> str:
        self._buffer.seek(0)
        self._buffer.truncate()
        self._writer.writerow(row)
        return self._buffer.getvalue()


# ------------------------------------------------------------------------------------------- sheets


def sheet_units(
    sheet: str,
    rows: Iterator[Sequence[Any]],
    counter: RowCounter,
    meta: dict[str, Any],
    *,
    all_text: bool = False,
) -> Iterator[Unit]:
    """Schema unit, then CSV row units, for one sheet's rows (the first non-empty row is the header).

    ``all_text`` says every cell is already a ``str`` (a CSV reader's rows), which lets a row with
    every column kept be written as it came.
    """
    non_empty = (row for row in rows if any(not _is_empty(value) for value in row))
    header_row = next(non_empty, None)
    if header_row is None:
        return
    header = [cell_text(value).strip() for value in header_row]

    prefix: list[Sequence[Any]] = []
    for row in non_empty:
        counter.tick()
        prefix.append(row)
        if len(prefix) >= SCHEMA_SAMPLE_ROWS:
            break

    width = max([len(header), *(len(row) for row in prefix)])
    header += [""] * (width - len(header))
    seen = [bool(header[i]) or any(i < len(row) and not _is_empty(row[i]) for row in prefix)
            for i in range(width)]
    active = [i for i in range(width) if seen[i]]
    dropped = [i for i in range(width) if not seen[i]]

    def name(i: int) -> str:
        return header[i] if i < len(header) and header[i] else f"column_{i + 1}"

    columns = [name(i) for i in active]
    meta.update({"columns": columns, "rows": len(prefix), "dropped_columns": len(dropped)})
    types = {i: infer_type(row[i] if i < len(row) else None for row in prefix) for i in active}
    yield _schema_unit(sheet, active, name, types, prefix)

    _csv_line = _LineWriter()
    late: list[str] = []
    chunk: list[str] = []
    chunk_chars = 0
    first_row = 1
    number = 0
    header_line = _csv_line(columns)

    def flush() -> Unit:
        text = header_line + "".join(chunk)
        return Unit(
            text=text[:-2] if text.endswith("\r\n") else text,
            section=sheet,
            kind="rows",
            meta={"chunk_kind": "rows", "sheet": sheet, "first_row": first_row, "last_row": number},
        )

    for index, row in enumerate(itertools.chain(prefix, non_empty)):
        if index >= len(prefix):
            counter.tick()
            meta["rows"] += 1
        fresh = (
            [i for i in range(len(row)) if (i >= width or i in dropped) and not _is_empty(row[i])]
            if dropped or len(row) > width
            else None
        )
        if fresh:
            if chunk:
                yield flush()
                chunk, chunk_chars, first_row = [], 0, number + 1
            for i in fresh:
                if i >= width:
                    header += [""] * (i + 1 - width)
                    dropped.extend(range(width, i + 1))
                    width = i + 1
                dropped.remove(i)
                active.append(i)
                late.append(name(i))
            active.sort()
            columns = [name(i) for i in active]
            header_line = _csv_line(columns)
            meta.update({"columns": columns, "late_columns": late})
        if all_text and not dropped and len(row) == width:
            line = _csv_line(row)
        else:
            line = _csv_line([cell_text(row[i]) if i < len(row) else "" for i in active])
        if chunk and len(header_line) + chunk_chars + len(line) > ROWS_UNIT_CHARS:
            yield flush()
            chunk, chunk_chars, first_row = [], 0, number + 1
        number += 1
        chunk.append(line)
        chunk_chars += len(line)
    if chunk:
        yield flush()


def _schema_unit(
    sheet: str,
    active: list[int],
    name: Callable[[int], str],
    types: dict[int, str],
    prefix: list[Sequence[Any]],
) -> Unit:
    """The leading chunk a model reads to know what the sheet holds and where arithmetic goes."""
    lines = [f"Sheet {sheet!r}: {len(active)} columns."]
    if len(prefix) >= SCHEMA_SAMPLE_ROWS:
        lines[0] += f" Types inferred from the first {SCHEMA_SAMPLE_ROWS} rows."
    lines.append("Columns:")
    described = []
    for i in active:
        samples: list[str] = []
        for row in prefix:
            value = cell_text(row[i]) if i < len(row) else ""
            if value.strip() and value not in samples:
                samples.append(value if len(value) <= 60 else value[:57] + "...")
            if len(samples) >= SAMPLE_VALUES:
                break
        quoted = (json.dumps(sample, ensure_ascii=False) for sample in samples)
        example = f", e.g. {', '.join(quoted)}" if samples else ""
        lines.append(f"- {name(i)} ({types[i]}){example}")
        described.append({"name": name(i), "type": types[i], "samples": samples})
    lines.append(
        "The rows follow as CSV with this header. For totals, averages, counts or any other "
        "arithmetic over the rows, use the compute action rather than adding up chunks."
    )
    return Unit(
        text="\n".join(lines),
        section=sheet,
        kind="schema",
        atomic=True,
        meta={"chunk_kind": "schema", "sheet": sheet, "columns": described},
    )


# ---------------------------------------------------------------------------------------- CSV / TSV


def _pick_delimiter(first_line: str, default: str) -> str:
    """``,`` unless the header line has none and another usual delimiter instead."""
    if default != "," or "," in first_line:
        return default
    counts = {d: first_line.count(d) for d in (";", "\t", "|")}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] else default


def _sheet_name(source: Source) -> str:
    if not source.name:
        return "data"
    stem = source.name.rsplit("/", 1)[-1]
    return stem.rsplit(".", 1)[0] if "." in stem else stem


def _delimited(source: Source, mime: str) -> Extracted:
    stats = DecodeStats()
    sheet = _sheet_name(source)
    sheet_meta: dict[str, Any] = {"name": sheet, "columns": [], "rows": 0}
    meta: dict[str, Any] = {"sheets": [sheet_meta]}

    def units() -> Iterator[Unit]:
        lines = iter_text_lines(source, stats)
        first = next(lines, None)
        if first is None:
            raise ExtractionFailed("the file is empty")
        delimiter = _pick_delimiter(first, "\t" if mime == detect.TSV else ",")
        meta["delimiter"] = delimiter
        reader = csv.reader(itertools.chain([first], lines), delimiter=delimiter)
        produced = False
        for unit in sheet_units(sheet, reader, RowCounter(source), sheet_meta, all_text=True):
            produced = True
            meta.update(stats.as_meta())
            yield unit
        if not produced:
            raise ExtractionFailed(f"{source.label} contains no rows")

    return Extracted(mime=mime, units=units(), meta=meta)


@extractor(detect.CSV)
def extract_csv(source: Source) -> Extracted:
    """Comma-separated (``;``, tab or ``|`` when the header line has no comma)."""
    return _delimited(source, detect.CSV)


@extractor(detect.TSV)
def extract_tsv(source: Source) -> Extracted:
    """Tab-separated."""
    return _delimited(source, detect.TSV)


# --------------------------------------------------------------------------------------------- XLSX


@extractor(detect.XLSX)
def extract_xlsx(source: Source) -> Extracted:
    """Every worksheet, streamed with openpyxl's read-only reader (cached formula values)."""
    try:
        import openpyxl
    except ImportError as exc:  # pragma: no cover - the office extra is installed in tests
        raise ImportError('reading .xlsx needs openpyxl: pip install "pg-context-engine[office]"') from exc
    check_zip(source, "an Excel workbook")
    meta: dict[str, Any] = {"sheets": []}

    def units() -> Iterator[Unit]:
        counter = RowCounter(source)
        produced = False
        with source.open() as stream:
            workbook = openpyxl.load_workbook(stream, read_only=True, data_only=True)
            try:
                for worksheet in workbook.worksheets:
                    if not hasattr(worksheet, "iter_rows"):
                        continue  # a chartsheet has no cells
                    # The declared dimension may lie (or be missing); the streamed rows decide.
                    worksheet.reset_dimensions()
                    sheet_meta: dict[str, Any] = {"name": worksheet.title, "columns": [], "rows": 0}
                    meta["sheets"].append(sheet_meta)
                    rows = worksheet.iter_rows(values_only=True)
                    for unit in sheet_units(worksheet.title, rows, counter, sheet_meta):
                        produced = True
                        yield unit
            finally:
                workbook.close()
        if not produced:
            raise ExtractionFailed(f"{source.label} has no cells with values")

    return Extracted(mime=detect.XLSX, units=units(), meta=meta)

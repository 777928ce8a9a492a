"""CSV, TSV and XLSX: schema units, RFC 4180 row units, column rules, max_rows, streaming."""

from __future__ import annotations

import csv
import datetime as dt
import io
import types
from pathlib import Path

import openpyxl
import pytest

from context_engine.errors import IngestTooLarge
from context_engine.ingest.extracted import Extracted, ExtractionFailed, Unit
from context_engine.ingest.formats import extract, tabular


def _parse(unit: Unit) -> list[list[str]]:
    return list(csv.reader(io.StringIO(unit.text, newline="")))


def _rows_of(units: list[Unit], sheet: str | None = None) -> list[list[str]]:
    """All data rows of the row units (each unit's repeated header checked and removed)."""
    rows: list[list[str]] = []
    header: list[str] | None = None
    for unit in units:
        if unit.kind != "rows" or (sheet is not None and unit.section != sheet):
            continue
        parsed = _parse(unit)
        header = header or parsed[0]
        assert parsed[0] == header
        rows.extend(parsed[1:])
    return rows


def _csv_bytes(rows: list[list[object]], delimiter: str = ",") -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer, delimiter=delimiter).writerows(rows)
    return buffer.getvalue().encode("utf-8")


def _xlsx(sheets: dict[str, list[list[object]]]) -> bytes:
    workbook = openpyxl.Workbook()
    workbook.remove(workbook.active)
    for title, rows in sheets.items():
        sheet = workbook.create_sheet(title)
        for row in rows:
            sheet.append(row)
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


TRICKY = [
    ["name", "comment", "amount", "when", "active"],
    ["Smith, John", 'said "hi"', "12", "2024-01-05", "true"],
    ["Ng", "two\nlines", "7", "2024-02-29", "false"],
    ["Ó Briain", "", "1000", "2023-12-31", "yes"],
]


def test_csv_schema_then_rfc4180_rows() -> None:
    result = extract(_csv_bytes(TRICKY), name="people.csv")
    assert result.mime == "text/csv"
    assert isinstance(result.units, types.GeneratorType)
    units = list(result.units)
    schema = units[0]
    assert schema.kind == "schema" and schema.atomic
    assert schema.meta["chunk_kind"] == "schema" and schema.meta["sheet"] == "people"
    assert schema.section == "people"
    assert [(c["name"], c["type"]) for c in schema.meta["columns"]] == [
        ("name", "text"), ("comment", "text"), ("amount", "integer"), ("when", "date"), ("active", "boolean"),
    ]
    assert '"Smith, John"' in schema.text and "compute" in schema.text
    assert all(unit.kind == "rows" and unit.section == "people" for unit in units[1:])
    assert _parse(units[1])[0] == TRICKY[0]
    assert _rows_of(units) == TRICKY[1:]
    assert '"Smith, John"' in units[1].text and '"said ""hi"""' in units[1].text
    assert "\r\n" in units[1].text
    assert result.meta["sheets"] == [
        {"name": "people", "columns": TRICKY[0], "rows": 3, "dropped_columns": 0}
    ]


def test_newline_in_quoted_field_is_one_row() -> None:
    data = b'id,text\r\n1,"first line\r\nsecond line"\r\n2,plain\r\n'
    units = list(extract(data, name="notes.csv").units)
    assert _rows_of(units) == [["1", "first line\r\nsecond line"], ["2", "plain"]]
    with pytest.raises(IngestTooLarge) as info:
        list(extract(data, name="notes.csv", max_rows=1).units)
    assert info.value.actual == 2


def test_empty_unnamed_column_dropped_named_empty_kept() -> None:
    rows = [["a", "", "notes", "b", ""], ["1", "", "", "2", ""], ["3", "", "", "4", ""]]
    units = list(extract(_csv_bytes(rows), name="t.csv").units)
    assert [c["name"] for c in units[0].meta["columns"]] == ["a", "notes", "b"]
    assert units[0].meta["columns"][1]["type"] == "empty"
    assert _parse(units[1]) == [["a", "notes", "b"], ["1", "", "2"], ["3", "", "4"]]


def test_unnamed_column_with_values_is_kept_and_named() -> None:
    rows = [["a", ""], ["1", "x"], ["2", ""]]
    units = list(extract(_csv_bytes(rows), name="t.csv").units)
    assert _parse(units[1]) == [["a", "column_2"], ["1", "x"], ["2", ""]]


def test_late_value_in_dropped_column_is_not_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tabular, "SCHEMA_SAMPLE_ROWS", 2)
    rows = [["a", ""], ["1", ""], ["2", ""], ["3", "late"], ["4", "", "extra"]]
    result = extract(_csv_bytes(rows), name="t.csv")
    units = list(result.units)
    assert [_parse(unit) for unit in units[1:]] == [
        [["a"], ["1"], ["2"]],
        [["a", "column_2"], ["3", "late"]],
        [["a", "column_2", "column_3"], ["4", "", "extra"]],
    ]
    assert result.meta["sheets"][0]["late_columns"] == ["column_2", "column_3"]


def test_rows_grouped_under_the_size_target_with_header_repeated() -> None:
    rows = [["id", "text"]] + [[str(i), "word " * 20] for i in range(300)]
    units = list(extract(_csv_bytes(rows), name="big.csv").units)
    row_units = units[1:]
    assert len(row_units) > 5
    assert all(len(unit.text) <= tabular.ROWS_UNIT_CHARS for unit in row_units)
    assert all(_parse(unit)[0] == ["id", "text"] for unit in row_units)
    assert _rows_of(units) == [[row[0], row[1]] for row in rows[1:]]
    assert row_units[0].meta["first_row"] == 1
    assert row_units[1].meta["first_row"] == row_units[0].meta["last_row"] + 1
    assert row_units[-1].meta["last_row"] == 300


def test_tsv_and_semicolon_csv() -> None:
    tsv = _csv_bytes([["k", "v"], ["a,b", "1"]], delimiter="\t")
    units = list(extract(tsv, name="x.tsv").units)
    assert _rows_of(units) == [["a,b", "1"]]
    semi = b"k;v\nx;2\n"
    result = extract(semi, name="eu.csv")
    units = list(result.units)
    assert _rows_of(units) == [["x", "2"]]
    assert result.meta["delimiter"] == ";"


def test_max_rows_refuses_at_the_row_that_passes() -> None:
    rows = [["n"]] + [[str(i)] for i in range(1, 51)]
    result = extract(_csv_bytes(rows), name="n.csv", max_rows=30)
    seen: list[Unit] = []
    with pytest.raises(IngestTooLarge) as info:
        for unit in result.units:
            seen.append(unit)
    assert (info.value.knob, info.value.limit, info.value.actual) == ("ingest.max_rows", 30, 31)
    assert info.value.code == "too_large"
    assert "ingest.max_rows" in str(info.value)
    # exactly at the limit is fine
    assert len(_rows_of(list(extract(_csv_bytes(rows[:31]), name="n.csv", max_rows=30).units))) == 30


def test_max_rows_counts_past_the_schema_prefix() -> None:
    rows = [["n"]] + [[str(i)] for i in range(1, 251)]
    with pytest.raises(IngestTooLarge) as info:
        list(extract(_csv_bytes(rows), name="n.tsv", max_rows=200).units)
    assert info.value.actual == 201


def test_max_rows_is_extension_scoped() -> None:
    rows = [["n"]] + [[str(i)] for i in range(1, 51)]
    # no extension or .txt: read as text, never counted
    assert list(extract(_csv_bytes(rows), name="n.txt", max_rows=5).units)
    assert list(extract(_csv_bytes(rows), max_rows=5).units)


def test_csv_mixed_encodings_per_line() -> None:
    data = "name,city\nA,Zürich\n".encode() + "B,Zürich\n".encode("cp1252")
    result = extract(data, name="m.csv")
    assert _rows_of(list(result.units)) == [["A", "Zürich"], ["B", "Zürich"]]
    assert result.meta["encoding"] == "mixed"


def test_bom_is_not_part_of_the_first_column_name() -> None:
    units = list(extract(b"\xef\xbb\xbfid,name\n1,x\n", name="bom.csv").units)
    assert _parse(units[1])[0] == ["id", "name"]


def test_utf16_tab_text_as_excel_exports_it() -> None:
    data = "\ufeffcity\tpopulation\r\nZürich\t421878\r\nMalmö\t357377\r\n".encode("utf-16-le")
    result = extract(data, name="export.tsv")
    units = list(result.units)
    assert units[0].meta["columns"][1]["type"] == "integer"
    assert _rows_of(units) == [["Zürich", "421878"], ["Malmö", "357377"]]
    assert result.meta["encoding"] == "utf-16"


def test_csv_binary_fails_up_front() -> None:
    with pytest.raises(ExtractionFailed, match="cannot be decoded as text"):
        extract(b"\x00\x01\x02binary" * 100, name="x.csv")


def test_csv_binary_tail_fails_while_streaming() -> None:
    result = extract(b"a,b\n" + b"1,2\n" * 50_000 + b"\x00\x01", name="x.csv")
    with pytest.raises(ExtractionFailed, match="NUL byte on line 50002"):
        list(result.units)


def test_xlsx_sheets_schema_and_rows() -> None:
    data = _xlsx({
        "Sales": [
            ["region", None, "amount", "date", "ok", "empty named"],
            ["North, upper", None, 10.5, dt.datetime(2024, 1, 5), True, None],
            ["South", None, 3, dt.datetime(2024, 1, 6, 12, 30), False, None],
        ],
        "Staff": [["name", "age"], ["Ana", 31], ['Bo "the" boss', 45]],
        "Blank": [],
    })
    result = extract(data, name="book.xlsx")
    assert result.mime == "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
    units = list(result.units)
    assert [(u.kind, u.section) for u in units] == [
        ("schema", "Sales"), ("rows", "Sales"), ("schema", "Staff"), ("rows", "Staff"),
    ]
    sales = units[0].meta["columns"]
    assert [(c["name"], c["type"]) for c in sales] == [
        ("region", "text"), ("amount", "number"), ("date", "date"), ("ok", "boolean"),
        ("empty named", "empty"),
    ]
    assert _parse(units[1]) == [
        ["region", "amount", "date", "ok", "empty named"],
        ["North, upper", "10.5", "2024-01-05", "TRUE", ""],
        ["South", "3", "2024-01-06 12:30:00", "FALSE", ""],
    ]
    assert _rows_of(units, "Staff") == [["Ana", "31"], ['Bo "the" boss', "45"]]
    sheets = [(s["name"], s["rows"]) for s in result.meta["sheets"]]
    assert sheets == [("Sales", 2), ("Staff", 2), ("Blank", 0)]


def test_xlsx_max_rows_counts_across_sheets() -> None:
    data = _xlsx({"A": [["x"], [1], [2], [3]], "B": [["y"], [4], [5]]})
    with pytest.raises(IngestTooLarge) as info:
        list(extract(data, name="two.xlsx", max_rows=4).units)
    assert info.value.actual == 5
    # the same bytes under another extension are not counted
    assert len(list(extract(data, name="two.bin", max_rows=4).units)) == 4


def test_xlsx_named_csv_is_still_a_workbook() -> None:
    data = _xlsx({"S": [["a"], [1]]})
    result = extract(data, name="lies.csv")
    assert result.mime.endswith("spreadsheetml.sheet")
    assert _rows_of(list(result.units)) == [["1"]]


def _write_big_csv(path: Path, rows: int) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "name", "amount", "note"])
        for i in range(rows):
            writer.writerow([i, f"customer {i}", i * 3 % 1000, "note, with comma" if i % 7 == 0 else ""])


def test_large_csv_streams_first_units_without_reading_the_file(tmp_path: Path) -> None:
    path = tmp_path / "big.csv"
    _write_big_csv(path, 200_000)
    size = path.stat().st_size
    with path.open("rb") as handle:
        result: Extracted = extract(handle, name="big.csv")
        units = iter(result.units)
        first = [next(units) for _ in range(3)]
        position = handle.tell()
    assert first[0].kind == "schema"
    assert first[1].kind == "rows" and _parse(first[1])[1][0] == "0"
    # a bounded prefix (the schema sample plus two units) has been read, not the file
    assert position < 64 * 1024 < size // 50
    assert result.meta["sheets"][0]["rows"] < 1000


def test_large_csv_from_a_path_yields_every_row(tmp_path: Path) -> None:
    path = tmp_path / "big.csv"
    _write_big_csv(path, 20_000)
    count = 0
    last: list[str] = []
    for unit in extract(path).units:
        if unit.kind == "rows":
            parsed = _parse(unit)
            count += len(parsed) - 1
            last = parsed[-1]
    assert count == 20_000
    assert last[0] == "19999"

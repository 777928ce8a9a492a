"""Frames for compute: the key rule, and sheets rebuilt exactly from what a real ingest stored,
under the caller's ACL."""

from __future__ import annotations

import csv
import io
from typing import Any

import openpyxl
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_engine import ContextEngine
from context_engine.compute import assign_keys, compute_suggestion, load_stored_frames
from context_engine.compute.frames import SheetRef, document_frames, mask_frames
from context_engine.ingest.pipeline import chunk_stream
from context_engine.redaction import RedactionPolicy, RedactionRule
from context_engine.redaction.apply import Redactor
from context_engine.storage.predicates import ReadScope
from tests.conftest import make_config


# ------------------------------------------------------------------------------------ the key rule
def keys(refs: list[SheetRef]) -> dict[tuple[str, str], str]:
    return {(r.document_id, r.sheet): r.key for r in assign_keys(refs)}


def test_one_document_is_keyed_by_sheet_name() -> None:
    refs = [SheetRef("b", "book.xlsx", "Q1"), SheetRef("b", "book.xlsx", "Q2")]
    assert keys(refs) == {("b", "Q1"): "Q1", ("b", "Q2"): "Q2"}


def test_several_documents_use_the_name_or_name_and_sheet() -> None:
    refs = [
        SheetRef("1", "revenue.xlsx", "Q1"),
        SheetRef("1", "revenue.xlsx", "Q2"),
        SheetRef("2", "costs.csv", "costs"),
    ]
    assert keys(refs) == {("1", "Q1"): "revenue.xlsx:Q1", ("1", "Q2"): "revenue.xlsx:Q2", ("2", "costs"): "costs.csv"}


def test_shared_names_fall_back_and_collisions_are_numbered_in_id_order() -> None:
    refs = [
        SheetRef("2", "a.csv", "a"),
        SheetRef("1", "a.csv", "a"),
        SheetRef("3", "a.csv:a", "x"),
    ]
    assert keys(refs) == {("1", "a"): "a.csv:a", ("2", "a"): "a.csv:a#2", ("3", "x"): "a.csv:a#3"}
    assert keys(list(reversed(refs))) == keys(refs)  # the set decides, never the order


# ------------------------------------------------------------------------------------ stored sheets
def csv_bytes(rows: list[list[Any]]) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue().encode()


def sales_rows(n: int) -> list[list[Any]]:
    notes = ["plain", 'says "hi", twice', "Acme Inc. Ltd: north; east", "multi\nline"]
    return [["id", "region", "amount", "paid", "note"]] + [
        [i, "north" if i % 3 else "south", f"{i * 1.25:.2f}", "yes" if i % 2 else "no", notes[i % 4]]
        for i in range(1, n + 1)
    ]


def xlsx_bytes() -> bytes:
    book = openpyxl.Workbook()
    q1 = book.active
    q1.title = "Q1"
    q1.append(["item", "qty"])
    for i in range(40):
        q1.append([f"item {i}", i])
    header_only = book.create_sheet("Empty")
    header_only.append(["a", "b"])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


async def stored(engine: ContextEngine, **scope: Any) -> Any:
    return await load_stored_frames(await engine.database(), ReadScope(**scope), max_documents=20)


async def test_a_long_sheet_comes_back_row_for_row(engine: ContextEngine) -> None:
    rows = sales_rows(600)
    report = await engine.ingest(file=csv_bytes(rows), name="sales.csv", source_id="fin")
    assert report.totals["completed"] == 1
    result = await stored(engine, principals=None)
    frame = result.frames["sales"]  # one document: the sheet name
    assert list(frame.columns) == rows[0] and len(frame) == 600
    assert frame["id"].tolist() == list(range(1, 601))
    assert frame["amount"].sum() == pytest.approx(sum(i * 1.25 for i in range(1, 601)))
    assert frame["paid"].tolist() == [bool(i % 2) for i in range(1, 601)]
    notes = frame["note"].tolist()
    # a line break inside a cell is the one thing the chunker's split does not keep (frames.py says so)
    assert notes[:3] == ['says "hi", twice', "Acme Inc. Ltd: north; east", "multi line"]
    assert notes == [sales_rows(600)[i][4].replace("\n", " ") for i in range(1, 601)]
    assert result.document_ids == [report.documents[0].document_id]


@pytest.mark.parametrize("chunk_tokens", [64, 4096])
async def test_split_and_packed_rows_units_both_come_back(database_url: str, chunk_tokens: int) -> None:
    # 64 tokens splits every rows unit into pieces; 4096 packs whole units together into one chunk
    rows = sales_rows(300)
    async with ContextEngine(make_config(database_url, ingest={"chunk_tokens": chunk_tokens})) as eng:
        await eng.ingest(file=csv_bytes(rows), name="sales.csv", source_id="fin")
        frame = (await stored(eng, principals=None)).frames["sales"]
    assert frame["id"].tolist() == list(range(1, 301))
    assert frame["note"].tolist() == [r[4].replace("\n", " ") for r in rows[1:]]


async def test_a_column_that_fills_in_late_is_kept_from_its_first_value(engine: ContextEngine) -> None:
    rows = [["id", "amount", ""]] + [[i, i, ""] for i in range(1, 151)] + [[151, 151, "late"], [152, 152, ""]]
    await engine.ingest(file=csv_bytes(rows), name="late.csv", source_id="fin")
    frame = (await stored(engine, principals=None)).frames["late"]
    assert list(frame.columns) == ["id", "amount", "column_3"] and len(frame) == 152
    assert frame["amount"].sum() == sum(range(1, 153))
    assert frame["column_3"].tolist()[149:] == [None, "late", None] and frame["column_3"].count() == 1


async def test_workbooks_and_csvs_get_reference_keys_and_header_only_sheets(engine: ContextEngine) -> None:
    await engine.ingest(file=xlsx_bytes(), name="book.xlsx", source_id="fin")
    await engine.ingest(file=csv_bytes(sales_rows(5)), name="costs.csv", source_id="fin")
    await engine.ingest(text="# Not a sheet\n\nprose", name="notes.md", source_id="fin")
    result = await stored(engine, principals=None)
    assert sorted(result.frames) == ["book.xlsx:Empty", "book.xlsx:Q1", "costs.csv"]
    q1 = result.frames["book.xlsx:Q1"]
    assert q1["qty"].sum() == sum(range(40)) and q1["item"].iloc[0] == "item 0"
    empty = result.frames["book.xlsx:Empty"]
    assert list(empty.columns) == ["a", "b"] and len(empty) == 0


async def test_frames_are_read_under_the_caller_acl_and_scope(engine: ContextEngine) -> None:
    await engine.ingest(file=csv_bytes(sales_rows(3)), name="secret.csv", source_id="fin", acl=["finance"])
    await engine.ingest(file=csv_bytes(sales_rows(4)), name="open.csv", source_id="hr")
    assert list((await stored(engine, principals=("staff",))).frames) == ["open"]
    assert sorted((await stored(engine, principals=("finance",))).frames) == ["open.csv", "secret.csv"]
    assert list((await stored(engine, principals=("finance",), source_ids=["fin"])).frames) == ["secret"]
    assert (await stored(engine, principals=("staff",), source_ids=["fin"])).frames == {}


async def test_the_compute_suggestion_names_the_newest_sheet_as_compute_keys_it(engine: ContextEngine) -> None:
    sql = await engine.database()
    assert await compute_suggestion(sql, ReadScope(None)) == {"frame_key": None, "measure": None, "group_by": None}
    await engine.ingest(file=xlsx_bytes(), name="book.xlsx", source_id="fin")
    await engine.ingest(file=csv_bytes(sales_rows(5)), name="costs.csv", source_id="fin", acl=["finance"])
    newest = await compute_suggestion(sql, ReadScope(("finance",)))
    assert newest == {"frame_key": "costs.csv", "measure": "id", "group_by": "region"}
    only_book = await compute_suggestion(sql, ReadScope(("staff",)))
    assert only_book == {"frame_key": "Q1", "measure": "qty", "group_by": "item"}


# cells as ingest keeps them: words with punctuation, quotes and commas, single spaces, no line breaks
WORD = st.text(alphabet="abcXYZ019.,;:!?\"'-", min_size=1, max_size=8)
CELL = st.lists(WORD, min_size=1, max_size=4).map(lambda words: "x" + " ".join(words))


def estimate_tokens(text: str) -> int:
    """A byte-based token estimate (no model): budgets of 24 and 256 split and pack rows units."""
    return max(1, len(text.encode("utf-8")) // 3 + 1)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cells=st.lists(st.lists(CELL, min_size=2, max_size=2), min_size=1, max_size=150),
    budget=st.sampled_from([24, 256]),
)
def test_any_sheet_survives_chunking_and_comes_back_cell_for_cell(cells: list[list[str]], budget: int) -> None:
    # an id column first, as most sheets have: it tells where a row ending in ". " was glued to the next
    rows = [[i, *pair] for i, pair in enumerate(cells, start=1)]
    data = csv_bytes([["id", "first", "second"], *rows])
    _mime, meta, chunks = chunk_stream(data, "t.csv", None, budget, estimate_tokens, None)
    stored = [{"section": c.section, "kind": c.kind, "meta": c.meta, "text": c.text} for c in chunks]
    frame = document_frames(meta, stored)["t"]
    assert frame.values.tolist() == rows


def test_a_row_split_by_words_keeps_its_row_end() -> None:
    """A row too long for one chunk is cut between words; the cut must not eat the row's line break
    (found by the property test above: the next row came back glued into this one's last cell)."""
    cells = [['x0 00000000 0000000" 0000000"', 'x0 00000000 0000000" 00000"""'], ["x0", "x0"]]
    rows = [[i, *pair] for i, pair in enumerate(cells, start=1)]
    _mime, meta, chunks = chunk_stream(
        csv_bytes([["id", "first", "second"], *rows]), "t.csv", None, 24, estimate_tokens, None
    )
    stored = [{"section": c.section, "kind": c.kind, "meta": c.meta, "text": c.text} for c in chunks]
    assert sum(c["kind"] == "rows" for c in stored) > 2  # the first row itself was cut
    assert document_frames(meta, stored)["t"].values.tolist() == rows


def test_a_glued_row_boundary_in_text_columns_is_cut_at_the_last_sentence_break() -> None:
    rows = [["name", "note"], ["Acme", "Paid. Thanks."], ["Globex", "Open: call back."], ["Initech", "x"]]
    _mime, meta, chunks = chunk_stream(csv_bytes(rows), "t.csv", None, 8, estimate_tokens, None)
    stored = [{"section": c.section, "kind": c.kind, "meta": c.meta, "text": c.text} for c in chunks]
    assert len(stored) > 2  # split into pieces: the row breaks after "Thanks." and "back." were dropped
    assert document_frames(meta, stored)["t"].values.tolist() == rows[1:]


def test_masking_covers_cells_headers_and_keys() -> None:
    policy = RedactionPolicy(rules=[RedactionRule(name="email", detector="email")])
    redactor = Redactor(policy, None, None)
    frames = {"ann@example.com": pd.DataFrame({"bob@example.com": ["x", "carl@example.com"], "n": [1, 2]})}
    masked = mask_frames(frames, redactor)
    (key,) = masked
    assert key == "[EMAIL]"
    assert list(masked[key].columns) == ["[EMAIL]", "n"] and masked[key].iloc[:, 0].tolist() == ["x", "[EMAIL]"]
    assert frames["ann@example.com"].iloc[1, 0] == "carl@example.com"  # the caller's frame is untouched

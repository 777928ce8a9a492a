"""Result shaping and error-text reduction: pure functions, no database."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from context_engine.tools import format_result, rows_to_tsv
from context_engine.tools.errortext import WITHHELD, masked_error_text, strip_error_text
from context_engine.tools.shaping import SHAPING_KEY, shape_result


def parse_tsv(text: str) -> list[dict[str, Any]]:
    """A reader written independently of the writer: split on raw tabs/newlines, then unescape."""

    def unescape(cell: str) -> str | None:
        if cell == "\\N":
            return None
        out, i = [], 0
        while i < len(cell):
            if cell[i] == "\\" and i + 1 < len(cell):
                out.append({"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}[cell[i + 1]])
                i += 2
            else:
                out.append(cell[i])
                i += 1
        return "".join(out)

    lines = text.split("\n")
    header = [unescape(c) for c in lines[0].split("\t")]
    return [dict(zip(header, (unescape(c) for c in line.split("\t")), strict=True)) for line in lines[1:]]


def test_rows_to_tsv_null_escapes_and_nested_cells() -> None:
    rows = [
        {"id": 1, "name": "a\tb", "note": None, "tags": ["x", "y"], "ok": True},
        {"id": 2, "name": "line1\nline2\\end\r", "extra": {"k": 1}},
    ]
    tsv = rows_to_tsv(rows)
    lines = tsv.split("\n")
    assert lines[0] == "id\tname\tnote\ttags\tok\textra"
    assert lines[1] == '1\ta\\tb\t\\N\t["x","y"]\ttrue\t\\N'
    assert lines[2] == '2\tline1\\nline2\\\\end\\r\t\\N\t\\N\t\\N\t{"k":1}'
    assert len(lines) == 3


@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["a", "b", "c"]),
            st.one_of(st.none(), st.text(alphabet=st.characters(codec="utf-8"), max_size=12)),
            min_size=1,
        ),
        min_size=1,
        max_size=8,
    )
)
def test_tsv_round_trips_any_strings(rows: list[dict[str, str | None]]) -> None:
    back = parse_tsv(rows_to_tsv(rows))
    assert len(back) == len(rows)
    for original, parsed in zip(rows, back, strict=True):
        for key, value in parsed.items():
            assert value == original.get(key)


def test_format_result_json_is_identity_and_tsv_converts_every_table() -> None:
    result = {"status_code": 200, "data": {"items": [{"a": 1}, {"a": 2}], "count": 2}, "tags": ["x"]}
    assert format_result(result) is result
    out = format_result(result, "tsv")
    assert out["data"]["items"] == "a\n1\n2"
    assert out["data"]["count"] == 2 and out["tags"] == ["x"] and out["status_code"] == 200
    assert format_result([{"a": None}], "tsv") == "a\n\\N"


def test_row_budget_cuts_each_table_and_reports_where() -> None:
    result = {"rows": [{"i": i} for i in range(10)], "other": {"items": [{"j": j} for j in range(3)]}}
    shaped = shape_result(result, max_rows=4, max_chars=None)
    assert shaped["rows"] == [{"i": i} for i in range(4)]
    assert shaped["other"]["items"] == [{"j": j} for j in range(3)]
    assert shaped[SHAPING_KEY] == {"rows": {"rows_returned": 4, "rows_omitted": 6}}


def test_char_budget_cuts_at_whole_rows_in_tsv() -> None:
    rows = [{"id": i, "text": "x" * 50} for i in range(100)]
    shaped = shape_result({"success": True, "rows": rows}, mode="tsv", max_chars=1000, max_rows=None)
    assert len(json.dumps(shaped)) <= 1000 + 200  # the shaping note itself is outside the budget
    tsv = shaped["rows"]
    lines = tsv.split("\n")
    kept = shaped[SHAPING_KEY]["rows"]["rows_returned"]
    assert len(lines) == kept + 1 and kept > 0
    assert all(line.endswith("x" * 50) for line in lines[1:])  # every kept row is whole
    assert kept + shaped[SHAPING_KEY]["rows"]["rows_omitted"] == 100


def test_a_result_that_is_a_table_is_wrapped_when_cut() -> None:
    shaped = shape_result([{"a": i} for i in range(5)], mode="tsv", max_rows=2)
    assert shaped == {"result": "a\n0\n1", SHAPING_KEY: {"result": {"rows_returned": 2, "rows_omitted": 3}}}
    assert shape_result([{"a": 1}], mode="tsv") == "a\n1"


def test_a_long_result_without_tables_is_cut_by_characters() -> None:
    shaped = shape_result({"text": "y" * 500}, max_chars=100)
    assert len(shaped["result"]) == 100
    assert shaped[SHAPING_KEY]["chars"]["chars_returned"] == 100


def test_strip_error_text_drops_row_data() -> None:
    raw = (
        '(psycopg.errors.UniqueViolation) duplicate key value violates unique constraint "ux_email"\n'
        "DETAIL:  Key (email)=(alice@example.com) already exists.\n"
        "HINT:  use another one\n"
        "LINE 1: INSERT INTO users VALUES ('alice@example.com')\n"
        "                                  ^\n"
        "[SQL: INSERT INTO users VALUES ('alice@example.com')]\n"
        "[parameters: {'email': 'alice@example.com'}]\n"
        "(Background on this error at: https://sqlalche.me/e/20/gkpj)"
    )
    out = strip_error_text(raw)
    assert "alice" not in out and "DETAIL" not in out and "HINT" not in out and "[SQL" not in out
    assert '"ux_email"' in out  # identifiers that say what broke stay
    assert strip_error_text("value 'secret-value' is bad") == "value '?' is bad"
    echoed = strip_error_text(
        "syntax error in SELECT secret_col FROM t WHERE x = 1", statements=["SELECT secret_col FROM t WHERE x = 1"]
    )
    assert "secret_col" not in echoed


def test_masking_failure_withholds_the_text() -> None:
    def broken(_text: str) -> str:
        raise RuntimeError("policy broke")

    assert masked_error_text("row 'x' failed", broken) == WITHHELD
    assert masked_error_text("token abcdef123 leaked", lambda t: t, secrets=["abcdef123"]) == "token [secret] leaked"

"""Spreadsheet vocabulary: the ``frame_key`` each sheet gets, and the aggregate-question test.

``frame_key`` is the name a sheet's dataframe goes by in ``compute``: compute's own rule
(:func:`context_engine.compute.frames.assign_keys`, then masked as compute masks it) applied to the
set compute would load for the same scope (the newest ``compute.max_documents`` spreadsheets), so
the name ``discover`` and the aggregate refusal hand the model is the name its code will find.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from context_engine.compute.frames import SheetRef, assign_keys, masked_keys
from context_engine.redaction.apply import Redactor

_NUMERIC = frozenset({"integer", "number"})
_AGGREGATE = re.compile(
    r"\b(total|totals|sum|sums|summed|average|averages|avg|mean|median|count|counts|how many|how much in total|"
    r"number of|ranking|rank|ranked|top \d+|highest|lowest|largest|smallest|maximum|minimum|max|min|"
    r"group(?:ed)? by|per (?:region|month|year|quarter|customer|product|category|country|team)|breakdown|"
    r"margin|more than|less than|greater than|compare|comparison)\b",
    re.IGNORECASE,
)


def is_aggregate(question: str) -> bool:
    """A total, an average, a count, a ranking, a group-by or a numeric comparison."""
    return _AGGREGATE.search(question) is not None


def frame_keys(
    spreadsheets: Sequence[dict[str, Any]], redactor: Redactor | None, *, max_documents: int
) -> dict[tuple[str, str], str]:
    """``(document_id, raw sheet name) -> frame_key`` for ``spreadsheets`` (rows of ``id``, ``name`` and
    ``sheets``, newest first, as compute orders them); sheets compute would not load get none."""
    refs = [
        SheetRef(str(row["id"]), str(row["name"]), sheet)
        for row in spreadsheets[:max_documents]
        for sheet in sheet_names(row.get("sheets"))
    ]
    ordered = assign_keys(refs)
    shown = masked_keys([ref.key for ref in ordered], redactor)
    return {(ref.document_id, ref.sheet): shown[ref.key] for ref in ordered}


def sheet_names(meta_sheets: Any) -> list[str]:
    return [str(s.get("name")) for s in meta_sheets or [] if isinstance(s, dict) and s.get("name") is not None]


def first_columns(columns: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    """``(measure, group_by)``: the first numeric and the first text column, either may be None."""
    measure = next((str(c["name"]) for c in columns if c.get("type") in _NUMERIC), None)
    group_by = next((str(c["name"]) for c in columns if c.get("type") == "text"), None)
    return measure, group_by

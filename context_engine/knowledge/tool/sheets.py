"""Spreadsheet vocabulary: the ``frame_key`` each sheet gets, and the aggregate-question test.

``frame_key`` is the name a sheet's dataframe goes by in ``compute``, over the documents one call
lists: the file name's stem (and the sheet's name when a workbook has several sheets), lower-cased,
with every run of other characters made one ``_``; a name already taken in that call gets ``_2``,
``_3``... in listing order. ``discover`` and the aggregate refusal both use this one rule.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

_NON_WORD = re.compile(r"[^a-z0-9]+")
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


def _slug(value: str) -> str:
    return _NON_WORD.sub("_", value.lower()).strip("_") or "sheet"


def _stem(name: str) -> str:
    base = name.rsplit("/", 1)[-1]
    return base.rsplit(".", 1)[0] if "." in base else base


def frame_keys(documents: Iterable[tuple[str, str, list[str]]]) -> dict[tuple[str, str], str]:
    """``(document_id, sheet) -> frame_key`` for ``(document_id, document_name, sheet_names)`` in order."""
    keys: dict[tuple[str, str], str] = {}
    taken: set[str] = set()
    for doc_id, name, sheets in documents:
        for sheet in sheets:
            base = _slug(_stem(name)) if len(sheets) == 1 else f"{_slug(_stem(name))}__{_slug(sheet)}"
            key, n = base, 1
            while key in taken:
                n += 1
                key = f"{base}_{n}"
            taken.add(key)
            keys[(doc_id, sheet)] = key
    return keys


def sheet_names(meta_sheets: Any) -> list[str]:
    return [str(s.get("name")) for s in meta_sheets or [] if isinstance(s, dict) and s.get("name") is not None]


def first_columns(columns: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    """``(measure, group_by)``: the first numeric and the first text column, either may be None."""
    measure = next((str(c["name"]) for c in columns if c.get("type") in _NUMERIC), None)
    group_by = next((str(c["name"]) for c in columns if c.get("type") == "text"), None)
    return measure, group_by

"""Result shaping: arrays of objects as TSV, and a budget that cuts at whole rows.

``format_result(result, "tsv")`` turns every array of objects anywhere in a result into one TSV
string under the same key; everything else stays JSON. ``shape_result`` applies the per-call
budget (rows per table, characters overall) and says in ``_result_shaping`` what it cut.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, Literal

ResponseMode = Literal["json", "tsv"]
SHAPING_KEY = "_result_shaping"
NULL = "\\N"
_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def is_rows(value: Any) -> bool:
    """A non-empty list whose every item is an object: a table."""
    return isinstance(value, list) and bool(value) and all(isinstance(item, dict) for item in value)


def _cell(value: Any) -> str:
    if value is None:
        return NULL
    if isinstance(value, str):
        text = value
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int):
        text = str(value)
    elif isinstance(value, float) and math.isfinite(value):
        text = repr(value)
    else:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        return text.translate(_ESCAPES)
    return text


def rows_to_tsv(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A header line and one line per row; ``\\N`` is NULL, nested values are compact JSON cells.

    Columns are ``columns`` or the union of the rows' keys in first-seen order; a row without a
    column gets ``\\N``. Tab, newline, CR and backslash inside a value are backslash-escaped.
    """
    if columns is None:
        seen: dict[str, None] = {}
        for row in rows:
            for key in row:
                seen.setdefault(str(key), None)
        columns = list(seen)
    lines = ["\t".join(str(c).translate(_ESCAPES) for c in columns)]
    lines.extend("\t".join(_cell(row.get(c)) for c in columns) for row in rows)
    return "\n".join(lines)


def format_result(result: Any, mode: ResponseMode = "json") -> Any:
    """``json`` returns ``result`` unchanged; ``tsv`` turns every array of objects into a TSV string."""
    if mode == "json":
        return result
    if mode != "tsv":
        raise ValueError("response_mode must be 'json' or 'tsv'")
    return _to_tsv(result)


def _to_tsv(value: Any) -> Any:
    if is_rows(value):
        return rows_to_tsv(value)
    if isinstance(value, dict):
        return {k: _to_tsv(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_tsv(v) for v in value]
    return value


def _tables(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], list[dict[str, Any]]]]:
    """Every array of objects in ``value`` with its path, outermost first."""
    if is_rows(value):
        return [(path, value)]
    found: list[tuple[tuple[Any, ...], list[dict[str, Any]]]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(_tables(item, (*path, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(_tables(item, (*path, index)))
    return found


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {k: (_replace(v, rest, new) if k == head else v) for k, v in value.items()}
    return [(_replace(v, rest, new) if i == head else v) for i, v in enumerate(value)]


def _label(path: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in path) or "result"


def _size(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str))


def shape_result(
    result: Any, *, mode: ResponseMode = "json", max_chars: int | None = 8000, max_rows: int | None = 100
) -> Any:
    """``result`` within the budget: each table cut to ``max_rows``, then whole rows dropped until
    the whole fits ``max_chars``; what was cut is reported under ``_result_shaping``.

    A result that is not an object and was cut comes back as ``{"result": ..., "_result_shaping": ...}``.
    A result with no table that is still too long is cut to ``max_chars`` characters of its JSON text.
    """
    shaping: dict[str, Any] = {}
    tables = {path: rows for path, rows in _tables(result)}
    kept = {path: len(rows) for path, rows in tables.items()}
    if max_rows is not None:
        kept = {path: min(n, max_rows) for path, n in kept.items()}

    def render(counts: dict[tuple[Any, ...], int]) -> Any:
        out = result
        for path, rows in tables.items():
            part = rows[: counts[path]]
            out = _replace(out, path, rows_to_tsv(part, _columns(rows)) if mode == "tsv" else part)
        return out

    shaped = render(kept)
    if max_chars is not None and _size(shaped) > max_chars and tables:
        # drop rows from the largest remaining table until the whole fits (or every table is empty)
        while _size(shaped) > max_chars and any(kept.values()):
            path = max(kept, key=lambda p: kept[p])
            kept[path] = _shrink(kept[path], lambda n, p=path: _size(render({**kept, p: n})) <= max_chars)
            shaped = render(kept)
    for path, rows in tables.items():
        if kept[path] < len(rows):
            shaping[_label(path)] = {"rows_returned": kept[path], "rows_omitted": len(rows) - kept[path]}
    if max_chars is not None and _size(shaped) > max_chars:
        text = shaped if isinstance(shaped, str) else json.dumps(shaped, ensure_ascii=False, default=str)
        shaping["chars"] = {"chars_returned": max_chars, "chars_omitted": len(text) - max_chars}
        shaped = text[:max_chars]
    if not shaping:
        return shaped
    if isinstance(shaped, dict):
        return {**shaped, SHAPING_KEY: shaping}
    return {"result": shaped, SHAPING_KEY: shaping}


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            seen.setdefault(str(key), None)
    return list(seen)


def _shrink(current: int, fits: Any) -> int:
    """The largest count below ``current`` for which ``fits(count)`` holds (0 if none), by bisection."""
    low, high = 0, current - 1
    if fits(high):
        return high
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low

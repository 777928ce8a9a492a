"""JSON: the keys are the structure, so each object or array becomes units addressed by key path.

Every object (and every array element that is an object or array) yields one unit whose
``section`` is its path — ``customers[0].address`` — and whose text lists its scalar members as
``key: value`` lines; a list of scalars is one line. Nested containers get their own units, so a
search hit names exactly where in the document it came from. ``meta["keys"]`` holds the top-level
keys (for a top-level array: the keys of its objects, in first-seen order).

JSON Lines (``.jsonl``/``.ndjson``) is read the same way with each line a record at ``[n]``
(0-based, blank lines skipped); a line that does not parse fails the file, naming the line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from context_engine.ingest.extracted import Extracted, ExtractionFailed, Unit
from context_engine.ingest.formats import detect
from context_engine.ingest.formats._base import Source, decode_text, extractor, no_text

#: Nesting beyond this is flattened into its parent's line as compact JSON.
MAX_DEPTH = 64
#: Top-level keys listed in ``meta["keys"]`` for an array of objects.
MAX_LISTED_KEYS = 200

_IDENTIFIER = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$-]*$")


def key_path(parent: str, key: str | int) -> str:
    """``a.b``, ``a[0]``, or ``a["odd key"]`` for keys that are not identifiers."""
    if isinstance(key, int):
        return f"{parent}[{key}]"
    if _IDENTIFIER.match(key):
        return f"{parent}.{key}" if parent else key
    return f"{parent}[{json.dumps(key, ensure_ascii=False)}]"


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _is_scalar_list(value: Any) -> bool:
    return isinstance(value, list) and all(not isinstance(item, dict | list) for item in value)


def _walk(value: Any, path: str, depth: int) -> Iterator[Unit]:
    section = path or None
    if isinstance(value, dict):
        lines: list[str] = []
        nested: list[tuple[str, Any]] = []
        for key, item in value.items():
            if isinstance(item, dict | list) and not _is_scalar_list(item) and depth < MAX_DEPTH:
                nested.append((key, item))
            elif isinstance(item, dict | list):
                lines.append(f"{key}: {json.dumps(item, ensure_ascii=False)}")
            else:
                lines.append(f"{key}: {_scalar(item)}")
        if lines:
            yield Unit(text="\n".join(lines), section=section, meta={"path": path})
        for key, item in nested:
            yield from _walk(item, key_path(path, key), depth + 1)
    elif isinstance(value, list):
        if _is_scalar_list(value) or depth >= MAX_DEPTH:
            if value:
                text = "\n".join(_scalar(item) for item in value) if _is_scalar_list(value) else \
                    json.dumps(value, ensure_ascii=False)
                yield Unit(text=text, section=section, meta={"path": path})
            return
        scalars = [f"[{index}]: {_scalar(item)}" for index, item in enumerate(value)
                   if not isinstance(item, dict | list)]
        if scalars:
            yield Unit(text="\n".join(scalars), section=section, meta={"path": path})
        for index, item in enumerate(value):
            if isinstance(item, dict | list):
                yield from _walk(item, key_path(path, index), depth + 1)
    else:
        text = _scalar(value)
        if text.strip():
            yield Unit(text=text, section=section, meta={"path": path})


def _top_keys(document: Any) -> list[str]:
    if isinstance(document, dict):
        return [str(key) for key in document]
    keys: dict[str, None] = {}
    if isinstance(document, list):
        for item in document:
            if isinstance(item, dict):
                keys.update(dict.fromkeys(str(key) for key in item))
            if len(keys) >= MAX_LISTED_KEYS:
                break
    return list(keys)[:MAX_LISTED_KEYS]


@extractor(detect.JSON)
def extract_json(source: Source) -> Extracted:
    """Units per object, addressed by key path; invalid JSON fails."""
    text, stats = decode_text(source)
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ExtractionFailed(f"{source.label} is not valid JSON: {exc}") from exc
    units = list(_walk(document, "", 0))
    if not units:
        raise no_text(source)
    return Extracted(mime=detect.JSON, units=units, meta={"keys": _top_keys(document), **stats.as_meta()})


@extractor(detect.JSONL)
def extract_json_lines(source: Source) -> Extracted:
    """One record per line, addressed ``[n]``; a bad line fails the file with its number."""
    text, stats = decode_text(source)
    units: list[Unit] = []
    keys: dict[str, None] = {}
    record = 0
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise ExtractionFailed(f"{source.label} is not valid JSON Lines: line {number}: {exc}") from exc
        if isinstance(value, dict) and len(keys) < MAX_LISTED_KEYS:
            keys.update(dict.fromkeys(str(key) for key in value))
        units.extend(_walk(value, f"[{record}]", 1))
        record += 1
    if not units:
        raise no_text(source)
    meta = {"keys": list(keys)[:MAX_LISTED_KEYS], "records": record, **stats.as_meta()}
    return Extracted(mime=detect.JSONL, units=units, meta=meta)

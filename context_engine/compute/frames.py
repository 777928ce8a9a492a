"""Dataframes for compute: their keys, rebuilt from what ingest stored, and masked for the model.

Keys (what the code calls ``dfs[...]``): over ONE document the sheet name; over several, a
single-sheet document is its document name and a multi-sheet one ``<name>:<sheet>``; two documents
sharing a name both use ``<name>:<sheet>``; a key that still collides gets ``#2``, ``#3``. Suffixes
are handed out in document-id order, so the keys depend on the set of documents and never on the
order they were read in.

Frames come from the stored chunks, so compute needs no second upload. Ingest writes a sheet as
a schema chunk (column names and types) and rows chunks of RFC 4180 CSV that each start with the
header. The chunker may split a long rows unit into pieces (their line breaks become single
spaces: ``\\r\\n`` is stored as ``\\r ``, or as a bare space after a row ending in ``.``, ``!``,
``?``, ``;`` or ``:``) or pack short units together (joined by a blank line). :func:`parse_sheet`
undoes both: pieces that do not start with the header continue the unit before them, ``\\r `` is a
record end again, a record too wide for the header is cut back into its rows (:func:`_unmerge`),
and a blank line starts a new unit whose first record is its header (which may be wider, when a
column first had values late in the sheet). What cannot be undone: a run of whitespace inside a
cell after that punctuation, or a line break inside a cell, comes back as one space; where a
glued field holds several punctuation-space boundaries the cut is a best guess (see _unmerge);
and a header whose last name ends in that punctuation is not recognised when split.
"""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import text as sql_text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.errors import ConfigError
from context_engine.redaction.apply import Redactor
from context_engine.storage.predicates import ReadScope, visibility

if TYPE_CHECKING:
    import pandas as pd

#: the mimes ingest stores as sheets (see ``ingest/formats/tabular.py``)
SPREADSHEET_MIMES = (
    "text/csv",
    "text/tab-separated-values",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
)
_GLUE = re.compile(r"(?<=[.!?;:]) ")
_KIND_PATTERNS = {
    "integer": re.compile(r"^[+-]?\d+$"),
    "number": re.compile(r"^[+-]?(\d[\d,]*(\.\d*)?|\.\d+)([eE][+-]?\d+)?$"),
    "boolean": re.compile(r"^(?i:true|false|yes|no)$"),
    "date": re.compile(r"^\d"),
}
_TRUE = frozenset({"true", "yes"})
_FALSE = frozenset({"false", "no"})


@dataclass
class SheetRef:
    """One sheet of one stored document, and what compute calls its frame."""

    document_id: str
    document_name: str
    sheet: str
    key: str = ""


@dataclass
class StoredFrames:
    """The frames of the spreadsheets in scope, keyed for the code, and the documents they came from."""

    frames: dict[str, pd.DataFrame]
    sheets: list[SheetRef]
    #: the ids read, as strings, captured before any code runs
    document_ids: list[str] = field(default_factory=list)


def require_pandas() -> None:
    """``ConfigError`` naming the extra when pandas is missing (compute cannot run without it)."""
    try:
        import pandas  # noqa: F401
    except ImportError:
        raise ConfigError('compute needs pandas: pip install "pg-context-engine[compute]"') from None


def assign_keys(sheets: Sequence[SheetRef]) -> list[SheetRef]:
    """Fill each sheet's ``key`` by the rule in the module docstring; returns the sheets in id order."""
    ordered = sorted(sheets, key=lambda s: s.document_id)
    docs: dict[str, list[SheetRef]] = {}
    for sheet in ordered:
        docs.setdefault(sheet.document_id, []).append(sheet)
    names = Counter(refs[0].document_name for refs in docs.values())
    used: set[str] = set()
    for refs in docs.values():
        for ref in refs:
            if len(docs) == 1:
                base = ref.sheet
            elif len(refs) == 1 and names[ref.document_name] == 1:
                base = ref.document_name
            else:
                base = f"{ref.document_name}:{ref.sheet}"
            key, n = base, 1
            while key in used:
                n += 1
                key = f"{base}#{n}"
            used.add(key)
            ref.key = key
    return ordered


async def _spreadsheets(conn: Any, scope: ReadScope, max_documents: int) -> list[dict[str, Any]]:
    """The newest ``max_documents`` spreadsheets the caller may see in ``scope`` (id, name, meta)."""
    params: dict[str, Any] = {"mimes": list(SPREADSHEET_MIMES), "n": max_documents}
    where = scope.document_predicate("d", params)
    query = (
        "SELECT d.id, d.name, d.meta FROM ce_documents d WHERE d.mime = ANY(CAST(:mimes AS text[])) "
        f"AND d.status = 'completed' AND {where} ORDER BY d.updated_at DESC, d.id LIMIT :n"
    )
    return [dict(r) for r in (await conn.execute(sql_text(query), params)).mappings()]


def _sheet_names(meta: dict[str, Any]) -> list[str]:
    return [s["name"] for s in meta.get("sheets", []) if isinstance(s, dict) and "name" in s]


async def load_stored_frames(sql: AsyncEngine, scope: ReadScope, *, max_documents: int) -> StoredFrames:
    """The newest ``max_documents`` spreadsheets the caller may see in ``scope``, as frames.

    Both reads run under the shared visibility predicate (on the documents and on their chunks),
    and the connection is returned to the pool before any frame is built.
    """
    async with sql.connect() as conn:
        docs = await _spreadsheets(conn, scope, max_documents)
        chunks: list[dict[str, Any]] = []
        if docs:
            cparams: dict[str, Any] = {"ids": [str(d["id"]) for d in docs]}
            cwhere = visibility("c", cparams, principals=scope.principals)
            chunk_sql = (
                "SELECT c.document_id, c.section, c.kind, c.meta, c.text FROM ce_chunks c "
                "WHERE c.document_id = ANY(CAST(:ids AS uuid[])) AND c.valid_to IS NULL "
                f"AND c.kind IN ('schema', 'rows') AND {cwhere} ORDER BY c.document_id, c.position"
            )
            chunks = [dict(r) for r in (await conn.execute(sql_text(chunk_sql), cparams)).mappings()]
    by_doc: dict[str, list[dict[str, Any]]] = {}
    for chunk in chunks:
        by_doc.setdefault(str(chunk["document_id"]), []).append(chunk)
    refs: list[SheetRef] = []
    built: dict[tuple[str, str], pd.DataFrame] = {}
    for doc in docs:
        doc_id = str(doc["id"])
        for sheet, frame in document_frames(doc.get("meta") or {}, by_doc.get(doc_id, [])).items():
            refs.append(SheetRef(doc_id, doc["name"], sheet))
            built[(doc_id, sheet)] = frame
    ordered = assign_keys(refs)
    frames = {ref.key: built[(ref.document_id, ref.sheet)] for ref in ordered}
    return StoredFrames(frames=frames, sheets=ordered, document_ids=[str(d["id"]) for d in docs])


async def compute_suggestion(
    sql: AsyncEngine, scope: ReadScope, *, max_documents: int = 20, redactor: Redactor | None = None
) -> dict[str, str | None]:
    """Vocabulary for a redirect to compute: the newest sheet's ``frame_key`` (as compute would key
    it over this scope), its first numeric column (``measure``) and first text column (``group_by``).

    Plain data, never code; any of the three is None when there is nothing to name. Reads document
    metadata and one schema chunk, not the rows. Names are masked by ``redactor`` as compute masks them.
    """
    async with sql.connect() as conn:
        docs = await _spreadsheets(conn, scope, max_documents)
        if not docs:
            return {"frame_key": None, "measure": None, "group_by": None}
        newest = docs[0]
        sheets = _sheet_names(newest.get("meta") or {})
        described: list[dict[str, Any]] = []
        if sheets:
            params: dict[str, Any] = {"id": str(newest["id"]), "sheet": sheets[0]}
            where = visibility("c", params, principals=scope.principals)
            meta = await conn.scalar(
                sql_text(
                    "SELECT c.meta FROM ce_chunks c WHERE c.document_id = CAST(:id AS uuid) AND c.kind = 'schema' "
                    f"AND c.section = :sheet AND c.valid_to IS NULL AND {where} ORDER BY c.position LIMIT 1"
                ),
                params,
            )
            described = [c for c in (meta or {}).get("columns", []) if isinstance(c, dict)]
    refs = [SheetRef(str(d["id"]), d["name"], sheet) for d in docs for sheet in _sheet_names(d.get("meta") or {})]
    keyed = {(r.document_id, r.sheet): r.key for r in assign_keys(refs)}
    key = keyed.get((str(newest["id"]), sheets[0])) if sheets else None
    measure = next((c["name"] for c in described if c.get("type") in ("integer", "number")), None)
    group_by = next((c["name"] for c in described if c.get("type") == "text"), None)
    out = {"frame_key": key, "measure": measure, "group_by": group_by}
    return {k: redactor.text(v) if redactor is not None else v for k, v in out.items()}


def document_frames(meta: dict[str, Any], chunks: Iterable[dict[str, Any]]) -> dict[str, pd.DataFrame]:
    """Every sheet of one stored document (header-only sheets included), in the workbook's order."""
    sheets = _sheet_names(meta)
    columns = {s["name"]: list(s.get("columns") or []) for s in meta.get("sheets", []) if isinstance(s, dict)}
    types: dict[str, dict[str, str]] = {}
    rows: dict[str, list[str]] = {}
    for chunk in chunks:
        sheet = chunk["section"]
        if sheet not in columns:
            sheets.append(sheet)
            columns[sheet] = []
        if chunk["kind"] == "schema":
            described = (chunk.get("meta") or {}).get("columns") or []
            types.setdefault(sheet, {c["name"]: c.get("type", "text") for c in described if isinstance(c, dict)})
        else:
            rows.setdefault(sheet, []).append(chunk["text"])
    return {sheet: parse_sheet(rows.get(sheet, []), columns[sheet], types.get(sheet, {})) for sheet in sheets}


def parse_sheet(texts: Sequence[str], columns: Sequence[str], types: dict[str, str]) -> pd.DataFrame:
    """One sheet's frame from its rows chunks in position order (see the module docstring)."""
    import pandas as pd

    records = csv.reader(io.StringIO(_rejoin(texts, set(columns)).replace("\r ", "\r\n")))
    data: dict[str, list[str | None]] = {name: [] for name in columns}
    header: list[str] | None = None
    count = 0
    for record in records:
        if not record:
            header = None  # a blank line: the next record is a unit's header
            continue
        if header is None:
            header = record
            for name in header:
                if name not in data:
                    data[name] = [None] * count
            continue
        for row in _unmerge(record, len(header), types.get(header[0], "text")):
            for values in data.values():
                values.append(None)
            for name, value in zip(header, row, strict=False):
                data[name][count] = value if value != "" else None
            count += 1
    return pd.DataFrame({name: _typed(values, types.get(name, "text")) for name, values in data.items()})


def _unmerge(record: list[str], width: int, first_kind: str) -> list[list[str]]:
    """``record`` as the rows it holds: one, or several whose line breaks the chunker dropped.

    The chunker splits after ``.``/``!``/``?``/``;``/``:`` followed by whitespace, and a row that ends
    in one of them loses its line break with that whitespace: the next row's first field is glued
    to its last one by a space. Such a record has ``n * (width - 1) + 1`` fields for ``n`` rows, and
    each glued field is cut at a punctuation-space boundary; where there are several, those
    leaving a first field of the first column's type win, then the last (a free-text last column
    is likelier to hold a sentence break than a first column).
    """
    if width < 2 or len(record) <= width or (len(record) - 1) % (width - 1):
        return [record]
    n = (len(record) - 1) // (width - 1)
    rows: list[list[str]] = []
    row = list(record[: width - 1])
    for k in range(1, n):
        glued = record[k * (width - 1)]
        cut = _boundary(glued, first_kind)
        if cut is None:
            return [record]
        row.append(glued[:cut])
        rows.append(row)
        row = [glued[cut + 1 :], *record[k * (width - 1) + 1 : (k + 1) * (width - 1)]]
    row.append(record[n * (width - 1)])
    rows.append(row)
    return rows


def _boundary(glued: str, first_kind: str) -> int | None:
    """Where the lost line break was in ``glued`` (the index of the joining space), or None."""
    cuts = [m.start() for m in _GLUE.finditer(glued)]
    typed = _KIND_PATTERNS.get(first_kind)
    if typed is not None:
        cuts = [c for c in cuts if typed.match(glued[c + 1 :])] or cuts
    return cuts[-1] if cuts else None


def _rejoin(texts: Sequence[str], columns: set[str]) -> str:
    """The sheet's units separated by blank lines, with each unit's pieces joined back by a space."""
    parts: list[str] = []
    header: list[str] | None = None
    for text in texts:
        first = next(csv.reader(io.StringIO(text.split("\r", 1)[0])), [])
        starts_unit = header is None or first == header or (
            bool(first) and set(header) <= set(first) and set(first) <= columns
        )
        if starts_unit:
            header = first
            parts.append(("\n\n" if parts else "") + text)
        else:
            parts.append(" " + text)
    return "".join(parts)


def _typed(values: list[str | None], kind: str) -> Any:
    """A column typed as ingest inferred it; left as text where a later value does not fit."""
    import pandas as pd

    if kind in ("integer", "number"):
        for candidate in (values, [v.replace(",", "") if v is not None else None for v in values]):
            try:
                return pd.to_numeric(pd.Series(candidate, dtype=object), errors="raise")
            except (ValueError, TypeError):
                continue
    if kind == "boolean":
        lowered = {v.lower() for v in values if v is not None}
        if lowered <= _TRUE | _FALSE:
            return pd.Series([None if v is None else v.lower() in _TRUE for v in values], dtype=object)
    return pd.Series(values, dtype=object)


def mask_frames(frames: dict[str, pd.DataFrame], redactor: Redactor | None) -> dict[str, pd.DataFrame]:
    """Copies of ``frames`` with every text cell, every column header and every key masked.

    A key is a document or sheet name, so it is masked like one; two keys that mask alike get
    ``#2``, ``#3`` so no frame is dropped.
    """
    out: dict[str, pd.DataFrame] = {}
    for key, frame in frames.items():
        copy = frame.copy()
        if redactor is None or redactor.noop:
            out[key] = copy
            continue
        copy.columns = [redactor.text(str(c)) for c in copy.columns]
        for position in range(copy.shape[1]):
            column = copy.iloc[:, position]
            if column.dtype == object or str(column.dtype) in ("str", "string"):
                copy.isetitem(position, column.map(_cached_mask(redactor)))
        out[_unique_mask(str(key), redactor, out)] = copy
    return out


def masked_keys(keys: Sequence[str], redactor: Redactor | None) -> dict[str, str]:
    """``key -> the name the code sees`` under ``redactor``, exactly as :func:`mask_frames` names frames."""
    if redactor is None or redactor.noop:
        return {key: key for key in keys}
    seen: dict[str, None] = {}
    names = {}
    for key in keys:
        names[key] = unique = _unique_mask(key, redactor, seen)
        seen[unique] = None
    return names


def _unique_mask(key: str, redactor: Redactor, taken: Any) -> str:
    masked, n = redactor.text(key) or key, 1
    unique = masked
    while unique in taken:
        n += 1
        unique = f"{masked}#{n}"
    return unique


def _cached_mask(redactor: Redactor) -> Any:
    cache: dict[str, Any] = {}

    def masked(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        if value not in cache:
            cache[value] = redactor.text(value)
        return cache[value]

    return masked

"""Revisions as one caller may hear and speak of them.

A trusted caller is told the store's revision numbers and passes them back. Any other caller is
told handles (:mod:`context_engine.revisions.handles`) and passes handles back, and the revision of
its view is the last revision that changed a document it may read (an opened or closed version, a
status change), never the store's counter, which moves on every tenant's writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.errors import InvalidRequest
from context_engine.revisions import as_of as store_as_of
from context_engine.revisions.as_of import check_type
from context_engine.revisions.errors import RevisionExpired
from context_engine.revisions.handles import Handles, chunks_for_db, for_db
from context_engine.storage.predicates import readable_now, visibility

#: the one refusal of a handle that names no revision the store has reached (no number in it)
UNKNOWN_HANDLE = "{what} is not a revision handle of this store (pass one a response gave you)"


@dataclass(frozen=True)
class CallerRevisions:
    """The translation for one caller: ``handles`` is ``None`` for a trusted caller (numbers pass
    through unchanged)."""

    handles: Handles | None
    #: the permutation of chunk ids (``None`` for a trusted caller)
    chunk_handles: Handles | None = None

    @property
    def trusted(self) -> bool:
        return self.handles is None

    def told(self, revision: int) -> int:
        """What the caller is told for the store's ``revision``."""
        return revision if self.handles is None else self.handles.encode(int(revision))

    def told_or_none(self, revision: int | None) -> int | None:
        return None if revision is None else self.told(revision)

    def told_chunk(self, chunk_id: int) -> int:
        """What the caller is told for a stored chunk's id (a stable, orderless handle)."""
        return chunk_id if self.chunk_handles is None else self.chunk_handles.encode(int(chunk_id))

    def heard(self, value: Any, what: str = "as_of") -> int | None:
        """The store revision a caller's ``as_of`` / ``min_revision`` stands for (type checked first,
        with the same messages for every caller)."""
        if what == "as_of":
            number = check_type(value)
        else:
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise InvalidRequest(f"{what} must be a non-negative integer revision")
            number = value
        if number is None or self.handles is None:
            return number
        revision = self.handles.decode(number)
        if revision is None:
            raise InvalidRequest(UNKNOWN_HANDLE.format(what=what))
        return revision


async def for_caller(db: AsyncEngine, caller: tuple[str, ...] | None) -> CallerRevisions:
    """The translation for ``caller`` (``None``: trusted)."""
    if caller is None:
        return CallerRevisions(None)
    return CallerRevisions(await for_db(db), await chunks_for_db(db))


async def view_revision(
    db: AsyncEngine,
    principals: tuple[str, ...],
    *,
    source_ids: Sequence[str] | None = None,
    document_ids: Sequence[str] | None = None,
    as_of: int | None = None,
) -> int:
    """The last revision (at or before ``as_of``) that changed what ``principals`` may read in this
    scope: a version it may read (under that version's ACL and the document's ACL of today) opening
    or closing, or a readable document's row changing in place. 0 when nothing it may read exists.

    It reads only rows the caller may read, so writes to documents it cannot read never move it; it
    costs a scan of the caller's own slice of history.
    """
    params: dict[str, Any] = {}
    versions = visibility("v", params, principals=principals, source_ids=source_ids, document_ids=document_ids)
    today = readable_now("v", params, principals)
    documents = visibility(
        "d", params, principals=principals, source_ids=source_ids, document_ids=document_ids, document_column="id"
    )
    bound_v = bound_d = ""
    if as_of is not None:
        params["view_as_of"] = int(as_of)
        bound_v, bound_d = " AND t.x <= :view_as_of", " AND d.updated_revision <= :view_as_of"
    sql = (
        "SELECT greatest((SELECT max(t.x) FROM ce_document_versions v CROSS JOIN LATERAL "
        f"(VALUES (v.valid_from), (v.valid_to)) AS t(x) WHERE t.x IS NOT NULL{bound_v} AND {versions} AND {today}), "
        f"(SELECT max(d.updated_revision) FROM ce_documents d WHERE {documents}{bound_d}))"
    )
    async with db.connect() as conn:
        return int(await conn.scalar(text(sql), params) or 0)


async def resolve(
    db: AsyncEngine,
    revision: int | None,
    revs: CallerRevisions,
    caller: tuple[str, ...] | None,
    *,
    source_ids: Sequence[str] | None = None,
    document_ids: Sequence[str] | None = None,
) -> int | None:
    """The revision a read runs at (``None``: the current one), for a store ``revision`` already
    translated from what the caller passed.

    A trusted caller: as :func:`context_engine.revisions.as_of.resolve`. Any other caller: a revision
    the store has not reached is refused with one fixed sentence (a handle it was given never is),
    an expired one names no number but handles, and the read takes the current (indexed) path
    whenever nothing it may read changed since that revision, so which path runs, and how long it
    takes, depends on its own rows and not on whether anyone else wrote since.
    """
    if revision is None:
        return None
    if caller is None:
        return await store_as_of.resolve(db, revision)
    current, horizon = await store_as_of.bounds(db)
    if revision > current:
        raise InvalidRequest(UNKNOWN_HANDLE.format(what="as_of"))
    if revision < horizon:
        raise RevisionExpired(
            "as_of is before the kept history: older revisions were vacuumed (details.oldest is the oldest readable)",
            details={"as_of": revs.told(revision), "oldest": revs.told(horizon)},
        )
    if await view_revision(db, caller, source_ids=source_ids, document_ids=document_ids) <= revision:
        return None
    return revision

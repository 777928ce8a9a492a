"""Which stored document a filing names: the admission step every ingest path calls.

Names are unique per visibility: a document is named by ``(source_id, name)`` among the documents
the caller may see, and the database keeps ``(source_id, name, acl)`` unique (migration 0017).
Documents the caller cannot see are never consulted, so filing under a hidden document's name
answers exactly as a free name does (a new document of the caller's own), and can never overwrite
the hidden one. Every collision the database can still raise is with a document the caller may
see: a filer holds every entry of the ACL it files under (or files a public document), so any
document with that same ACL is visible to it.

Of the visible documents under the name, the one with the ACL being filed is the one changed; else
the only one; with several and none of that ACL, the filing is ambiguous (409 ``conflict``, said
only about documents the caller can see). The chosen document must be writable by the caller
(:mod:`context_engine.write_access`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from context_engine.errors import ContextEngineError, NameTaken
from context_engine.storage import layout
from context_engine.write_access import WriteAccess, target_of

#: a filing that could name more than one visible document
AMBIGUOUS = "more than one document you may see has that name in this source; file it under the ACL of the one you mean"

#: ``(source_id, name, acl, content_hash)``; the hash is ``None`` for a filing with no content to
#: compare (a failed extraction, which would overwrite the document's record)
Filing = tuple[str, str, Sequence[str], str | None]


def unchanged(row: dict[str, Any], content_hash: str | None) -> bool:
    """The stored document already holds this content (a re-post that writes nothing)."""
    # a document whose batch is still pending is on its way: offering it again does not pay twice
    return content_hash is not None and row["content_hash"] == content_hash and row["status"] in (
        "completed",
        "batch_pending",
    )


def _visible(acl: Sequence[str], caller: tuple[str, ...] | None) -> bool:
    return caller is None or not acl or bool(set(acl) & set(caller))


def choose(
    rows: list[dict[str, Any]],
    acl: Sequence[str],
    caller: tuple[str, ...] | None,
    access: WriteAccess,
    content_hash: str | None = None,
) -> dict[str, Any] | None:
    """The document among ``rows`` (all filed under one name) that a filing under ``acl`` changes,
    or ``None`` for a new one. Raises ``NameTaken`` (ambiguous) or ``Forbidden`` (not writable; a
    re-post of the content already stored writes nothing and is answered "unchanged" to any reader)."""
    seen = [r for r in rows if _visible(list(r["acl"] or ()), caller)]
    if not seen:
        return None
    wanted = sorted(set(acl))
    exact = [r for r in seen if sorted(r["acl"] or ()) == wanted]
    if exact:
        chosen = exact[0]
    elif len(seen) == 1:
        chosen = seen[0]
    else:
        raise NameTaken(AMBIGUOUS)
    if not unchanged(chosen, content_hash):
        access.check(target_of(chosen), caller)
    return chosen


_COLUMNS = (
    "d.id, d.source_id, d.name, d.acl, d.content_hash, d.status, d.version, "
    "(d.lease_holder IS NOT NULL AND d.lease_until > clock_timestamp()) AS leased"
)


async def holder(
    conn: AsyncConnection,
    filing: Filing,
    caller: tuple[str, ...] | None,
    access: WriteAccess,
    *,
    for_update: bool = False,
) -> dict[str, Any] | None:
    """The stored document this filing changes (``None``: a new document); see :func:`choose`."""
    (answer,) = await holders(conn, [filing], caller, access, for_update=for_update)
    if isinstance(answer, ContextEngineError):
        raise answer
    return answer


async def holders(
    conn: AsyncConnection,
    filings: Sequence[Filing],
    caller: tuple[str, ...] | None,
    access: WriteAccess,
    *,
    for_update: bool = False,
) -> list[dict[str, Any] | ContextEngineError | None]:
    """:func:`holder` for many filings in one statement: per filing, its document, ``None``, or the
    refusal (input order). ``for_update`` row-locks every document found under the names."""
    if not filings:
        return []
    sql = (
        f"SELECT {_COLUMNS} FROM ce_documents d "
        "JOIN unnest(CAST(:s AS text[]), CAST(:n AS text[])) AS x(s, n) ON d.source_id = x.s AND d.name = x.n "
        "ORDER BY d.id"
    )
    params = {"s": [f[0] for f in filings], "n": [f[1] for f in filings]}
    if for_update and await layout.distributed(conn):
        # the rows may lie on several shards: lock them one by one, then read them as locked
        found = await conn.execute(text(sql), params)
        await layout.lock_documents(conn, [str(r[0]) for r in found])
        rows = await conn.execute(text(sql), params)
    else:
        rows = await conn.execute(text(sql + (" FOR UPDATE OF d" if for_update else "")), params)
    named: dict[tuple[str, str], list[dict[str, Any]]] = {}
    seen_ids: set[str] = set()
    for row in rows.mappings():
        if str(row["id"]) not in seen_ids:  # a name filed twice in one call joins its rows twice
            seen_ids.add(str(row["id"]))
            named.setdefault((row["source_id"], row["name"]), []).append(dict(row))
    answers: list[dict[str, Any] | ContextEngineError | None] = []
    for source_id, name, acl, content_hash in filings:
        try:
            answers.append(choose(named.get((source_id, name), []), acl, caller, access, content_hash))
        except ContextEngineError as exc:
            answers.append(exc)
    return answers

"""The one ACL + scope + time predicate that every search leg and every read shares.

It is SQL, never a Python post-filter: a row the caller may not see is never fetched, ranked
or counted. All values are bound parameters.

Time is part of it: a chunk or version row is visible in the revisions ``[valid_from, valid_to)``.
``as_of=None`` reads the current revision (``valid_to IS NULL``, the condition the partial indexes
are built on); an integer reads the store as it was right after that revision committed.

A past row is read under two ACLs: the one it carried then (who could see it at that revision) and
the document's ACL of today (:func:`readable_now`), so a revocation reaches every past revision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def visibility(
    alias: str,
    params: dict[str, Any],
    *,
    principals: tuple[str, ...] | None,
    source_ids: Sequence[str] | None = None,
    document_ids: Sequence[str] | None = None,
    document_column: str = "document_id",
) -> str:
    """Return a SQL condition on ``alias`` and add its parameters to ``params``.

    ``principals=None`` is a trusted caller (no ACL condition). An empty ACL is public.
    """
    parts: list[str] = []
    if principals is not None:
        params["vis_principals"] = list(principals)
        parts.append(f"({alias}.acl = '{{}}'::text[] OR {alias}.acl && CAST(:vis_principals AS text[]))")
    if source_ids is not None:
        params["vis_sources"] = list(source_ids)
        parts.append(f"{alias}.source_id = ANY(CAST(:vis_sources AS text[]))")
    if document_ids is not None:
        params["vis_documents"] = [str(d) for d in document_ids]
        parts.append(f"{alias}.{document_column} = ANY(CAST(:vis_documents AS uuid[]))")
    return " AND ".join(parts) if parts else "TRUE"


def readable_now(alias: str, params: dict[str, Any], principals: tuple[str, ...], column: str = "document_id") -> str:
    """True when the document of ``alias`` is readable by the caller today: under its current ACL,
    or, once deleted, under the last ACL it had (its newest version's). A history row is shown only
    when this holds as well as its own ACL of then: restricting a document restricts its past."""
    params["vis_principals"] = list(principals)
    ref = f"{alias}.{column}"
    readable = "{a}.acl = '{{}}'::text[] OR {a}.acl && CAST(:vis_principals AS text[])"
    # each lookup is a correlated subquery with a FROM of its own, on the document's key: the form a
    # distributed (Citus) schema accepts, with the lookups inside the document's shard
    return (
        f"coalesce((SELECT {readable.format(a='ce_now_d')} FROM ce_documents ce_now_d WHERE ce_now_d.id = {ref}), "
        f"(SELECT {readable.format(a='ce_now_v')} FROM ce_document_versions ce_now_v "
        f"WHERE ce_now_v.document_id = {ref} ORDER BY ce_now_v.version DESC LIMIT 1), false)"
    )


def live(alias: str, params: dict[str, Any], as_of: int | None) -> str:
    """The rows of ``alias`` visible at revision ``as_of`` (``None``: the current ones)."""
    if as_of is None:
        return f"{alias}.valid_to IS NULL"
    params["vis_as_of"] = int(as_of)
    return f"{alias}.valid_from <= :vis_as_of AND ({alias}.valid_to IS NULL OR {alias}.valid_to > :vis_as_of)"


@dataclass(frozen=True)
class ReadScope:
    """Who reads and which slice they narrowed to: the input of every read and search leg.

    ``principals=None`` is a trusted caller. ``agent_id`` narrows further to the documents and
    sources linked to that agent (``ce_agent_links``); links are configuration, so the caller's
    ACL still applies on top of them. ``as_of`` is the revision read (``None``: the current one).
    """

    principals: tuple[str, ...] | None
    source_ids: Sequence[str] | None = None
    document_ids: Sequence[str] | None = None
    agent_id: str | None = None
    as_of: int | None = None

    @property
    def historical(self) -> bool:
        """True when the read is of a past revision: the partial (current-only) indexes cannot serve it."""
        return self.as_of is not None

    @property
    def groups_decide(self) -> bool:
        """True when whether a current chunk is in the scope depends only on its (source, ACL)
        group: no pinned documents, no agent's links, no past revision (the BM25 postings' groups
        then apply the whole predicate)."""
        return self.document_ids is None and self.agent_id is None and self.as_of is None

    def live(self, alias: str, params: dict[str, Any]) -> str:
        """The time part alone, on chunk or version rows under ``alias``."""
        return live(alias, params, self.as_of)

    def predicate(self, alias: str, params: dict[str, Any]) -> str:
        """The SQL condition on chunk rows under ``alias`` (time included); its values are added to ``params``."""
        base = visibility(
            alias,
            params,
            principals=self.principals,
            source_ids=self.source_ids,
            document_ids=self.document_ids,
        )
        base = self.live(alias, params) if base == "TRUE" else f"{self.live(alias, params)} AND {base}"
        base += self.today(alias, params)
        if self.agent_id is None:
            return base
        params["agent_id"] = self.agent_id
        linked = (
            f"({alias}.document_id IN (SELECT CAST(l.ref AS uuid) FROM ce_agent_links l "
            "WHERE l.agent_id = :agent_id AND l.kind = 'document') "
            f"OR {alias}.source_id IN (SELECT l.ref FROM ce_agent_links l "
            "WHERE l.agent_id = :agent_id AND l.kind = 'source'))"
        )
        return f"{base} AND {linked}"

    def document_predicate(self, alias: str, params: dict[str, Any]) -> str:
        """The same condition on document rows (``ce_documents``), whose key column is ``id``."""
        return visibility(
            alias,
            params,
            principals=self.principals,
            source_ids=self.source_ids,
            document_ids=self.document_ids,
            document_column="id",
        )

    def version_predicate(self, alias: str, params: dict[str, Any]) -> str:
        """The same condition on version rows (``ce_document_versions``): each version carries the
        ACL, source and name the document had while it was current, so a past read applies the
        permissions of then."""
        base = visibility(
            alias,
            params,
            principals=self.principals,
            source_ids=self.source_ids,
            document_ids=self.document_ids,
        )
        return f"{self.live(alias, params)} AND {base}{self.today(alias, params)}"

    def today(self, alias: str, params: dict[str, Any], *, history: bool | None = None) -> str:
        """``" AND <readable now>"`` for a non-trusted read of history (``history``: a read of a
        past version even at the current revision), else ``""``: a current row's ACL is today's."""
        if self.principals is None or not (self.historical if history is None else history):
            return ""
        return " AND " + readable_now(alias, params, self.principals)

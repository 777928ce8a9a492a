"""The one ACL + scope predicate that every search leg and every read shares.

It is SQL, never a Python post-filter: a row the caller may not see is never fetched, ranked
or counted. All values are bound parameters.
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


@dataclass(frozen=True)
class ReadScope:
    """Who reads and which slice they narrowed to: the input of every read and search leg.

    ``principals=None`` is a trusted caller. ``agent_id`` narrows further to the documents and
    sources linked to that agent (``ce_agent_links``); links are configuration, so the caller's
    ACL still applies on top of them.
    """

    principals: tuple[str, ...] | None
    source_ids: Sequence[str] | None = None
    document_ids: Sequence[str] | None = None
    agent_id: str | None = None

    def predicate(self, alias: str, params: dict[str, Any]) -> str:
        """The SQL condition on chunk rows under ``alias``; its values are added to ``params``."""
        base = visibility(
            alias,
            params,
            principals=self.principals,
            source_ids=self.source_ids,
            document_ids=self.document_ids,
        )
        if self.agent_id is None:
            return base
        params["agent_id"] = self.agent_id
        linked = (
            f"({alias}.document_id IN (SELECT CAST(l.ref AS uuid) FROM ce_agent_links l "
            "WHERE l.agent_id = :agent_id AND l.kind = 'document') "
            f"OR {alias}.source_id IN (SELECT l.ref FROM ce_agent_links l "
            "WHERE l.agent_id = :agent_id AND l.kind = 'source'))"
        )
        return linked if base == "TRUE" else f"{base} AND {linked}"

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

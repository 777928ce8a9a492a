"""The one ACL + scope predicate that every search leg and every read shares.

It is SQL, never a Python post-filter: a row the caller may not see is never fetched, ranked
or counted. All values are bound parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
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

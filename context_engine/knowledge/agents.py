"""Agent -> source links: which documents and collections an agent retrieves from.

Stored in ``ce_agent_links`` (``migrations/0003_agents.sql``). A link names either a document (by
id) or a whole collection (our ``source_id``), so an agent can follow a client file as it grows.

Links are configuration, not permissions: a query through an agent is still filtered by the
caller's ACL, in the same SQL predicate, so linking a document never shows it to anyone who could
not already read it. The predicate is a sub-select on the links table inside every leg's WHERE
clause, so a passage outside the agent's links is never fetched, ranked or counted.

An agent exists while it has at least one link. An unknown agent id (never linked, or every link
removed) is answered with ``NotFound`` (404, code ``agent_not_found``) rather than an empty result,
so a mistyped id cannot pass for "the documents say nothing".
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.errors import InvalidRequest, NotFound
from context_engine.knowledge.models import AgentLinks

MAX_AGENT_ID_CHARS = 200


def check_agent_id(agent_id: Any) -> str:
    if not isinstance(agent_id, str) or not agent_id.strip() or len(agent_id) > MAX_AGENT_ID_CHARS:
        raise InvalidRequest(f"agent_id must be a non-empty string of at most {MAX_AGENT_ID_CHARS} characters")
    return agent_id.strip()


def _check_refs(document_ids: Sequence[str] | None, source_ids: Sequence[str] | None) -> list[tuple[str, str]]:
    refs: list[tuple[str, str]] = []
    for field, values, kind in (("document_ids", document_ids, "document"), ("source_ids", source_ids, "source")):
        if values is None:
            continue
        if isinstance(values, str) or not all(isinstance(v, str) and v.strip() for v in values):
            raise InvalidRequest(f"{field} must be a list of non-empty strings")
        for value in values:
            if kind == "document":
                try:
                    value = str(uuid.UUID(value))
                except ValueError:
                    raise NotFound(f"document {value} not found") from None
            refs.append((kind, value))
    return refs


async def link(
    db: AsyncEngine, agent_id: str, *, document_ids: Sequence[str] | None, source_ids: Sequence[str] | None
) -> AgentLinks:
    """Add links (idempotent). A document id must name a live document; a collection may be empty."""
    agent_id = check_agent_id(agent_id)
    refs = _check_refs(document_ids, source_ids)
    if not refs:
        raise InvalidRequest("pass document_ids and/or source_ids to link")
    async with db.begin() as conn:
        docs = [ref for kind, ref in refs if kind == "document"]
        if docs:
            found = set(
                (
                    await conn.execute(
                        text("SELECT CAST(id AS text) FROM ce_documents WHERE id = ANY(CAST(:ids AS uuid[]))"),
                        {"ids": docs},
                    )
                ).scalars()
            )
            missing = [d for d in docs if d not in found]
            if missing:
                raise NotFound(f"document {missing[0]} not found")
        await conn.execute(
            text(
                "INSERT INTO ce_agent_links (agent_id, kind, ref) "
                "SELECT :agent_id, k, r FROM unnest(CAST(:kinds AS text[]), CAST(:refs AS text[])) AS t(k, r) "
                "ON CONFLICT (agent_id, kind, ref) DO NOTHING"
            ),
            {"agent_id": agent_id, "kinds": [k for k, _ in refs], "refs": [r for _, r in refs]},
        )
    return await links(db, agent_id)


async def unlink(
    db: AsyncEngine,
    agent_id: str,
    *,
    document_ids: Sequence[str] | None = None,
    source_ids: Sequence[str] | None = None,
) -> AgentLinks:
    """Remove the given links, or every link of the agent when neither list is given."""
    agent_id = check_agent_id(agent_id)
    refs = _check_refs(document_ids, source_ids)
    async with db.begin() as conn:
        if document_ids is None and source_ids is None:
            await conn.execute(text("DELETE FROM ce_agent_links WHERE agent_id = :agent_id"), {"agent_id": agent_id})
        elif refs:
            await conn.execute(
                text(
                    "DELETE FROM ce_agent_links WHERE agent_id = :agent_id AND (kind, ref) IN "
                    "(SELECT k, r FROM unnest(CAST(:kinds AS text[]), CAST(:refs AS text[])) AS t(k, r))"
                ),
                {"agent_id": agent_id, "kinds": [k for k, _ in refs], "refs": [r for _, r in refs]},
            )
    return await links(db, agent_id)


async def links(db: AsyncEngine, agent_id: str) -> AgentLinks:
    """The agent's links (both lists empty for an unknown agent)."""
    agent_id = check_agent_id(agent_id)
    async with db.connect() as conn:
        rows = (
            await conn.execute(
                text("SELECT kind, ref FROM ce_agent_links WHERE agent_id = :agent_id ORDER BY kind, ref"),
                {"agent_id": agent_id},
            )
        ).all()
    return AgentLinks(
        agent_id=agent_id,
        document_ids=[r for k, r in rows if k == "document"],
        source_ids=[r for k, r in rows if k == "source"],
    )


async def require_agent(db: AsyncEngine, agent_id: str) -> str:
    """The checked id of an agent that has at least one link, else ``NotFound(agent_not_found)``."""
    agent_id = check_agent_id(agent_id)
    async with db.connect() as conn:
        known = await conn.scalar(
            text("SELECT EXISTS (SELECT 1 FROM ce_agent_links WHERE agent_id = :agent_id)"), {"agent_id": agent_id}
        )
    if not known:
        raise NotFound(f"agent {agent_id} has no linked sources", code="agent_not_found")
    return agent_id

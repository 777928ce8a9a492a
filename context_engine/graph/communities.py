"""Communities: Louvain (networkx) over one group's entities and relationships, each summarised once.

Why per group: a group is the chunks that share one ``source_id`` and one ACL, so everything in a
group has the same readers. Detecting and summarising within a group means a summary is built only
from facts its readers may all see; a caller sees a community only while every chunk it was built
from is visible to them (checked live in :mod:`context_engine.graph.navigate`), so a community is
shown whole or withheld, never blended with a hidden document's facts.

Why summaries are reused: a community whose facts are unchanged (same members, same relationships:
``facts_hash``) keeps its summary, so rebuilding a group after one document changed pays a model
call only for the communities that document touched.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.errors import ContextEngineError
from context_engine.graph.store import Group, lock
from context_engine.llm.base import LLMClient
from context_engine.llm.structured import structured_call

log = logging.getLogger("context_engine.graph")

#: Louvain's seed: the same facts always give the same communities
SEED = 7
MIN_MEMBERS = 2
#: communities summarised in one model call
SUMMARY_BATCH = 10
#: facts shown to the model per community (the most mentioned entities, then their relationships)
PROMPT_ENTITIES = 40
PROMPT_RELATIONSHIPS = 60

SUMMARY_SCHEMA_NAME = "community_summaries"
SUMMARY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "summaries": {
            "type": "array",
            "items": {"type": "object", "properties": {"index": {"type": "integer"}, "summary": {"type": "string"}}},
        }
    },
}
SUMMARY_SYSTEM = (
    "You summarise communities of a knowledge graph. Each numbered community lists its entities (with type "
    "and how many passages mention them) and the relationships between them with evidence. Write two or "
    "three sentences per community naming what connects it, using only the facts listed. Answer every "
    "community by its index."
)


def detect(nodes: Iterable[str], edges: Iterable[tuple[str, str, float]]) -> list[set[str]]:
    """Louvain communities of at least ``MIN_MEMBERS`` entities, largest first."""
    graph = nx.Graph()
    graph.add_nodes_from(nodes)
    for a, b, weight in edges:
        if graph.has_edge(a, b):
            graph[a][b]["weight"] += weight
        else:
            graph.add_edge(a, b, weight=weight)
    if graph.number_of_edges() == 0:
        return []
    found = nx.community.louvain_communities(graph, weight="weight", seed=SEED)
    kept = [set(c) for c in found if len(c) >= MIN_MEMBERS]
    return sorted(kept, key=lambda c: (-len(c), min(c)))


@dataclass
class _Entity:
    id: str
    name: str
    type: str
    frequency: int
    chunks: list[int]


@dataclass
class _Relation:
    source: str
    target: str
    category: str
    label: str
    evidence: str
    chunk_id: int


@dataclass
class Community:
    members: list[_Entity]
    relations: list[_Relation]
    facts_hash: str
    summary: str | None = None

    @property
    def chunks(self) -> list[int]:
        found = {c for e in self.members for c in e.chunks} | {r.chunk_id for r in self.relations}
        return sorted(found)


@dataclass
class RebuildReport:
    groups: int = 0
    communities: int = 0
    summarised: int = 0
    reused: int = 0
    llm_calls: int = 0
    tokens: int = 0
    unsummarised: list[str] = field(default_factory=list)


_GROUP = "c.valid_to IS NULL AND c.source_id = :s AND c.acl = CAST(:acl AS text[])"


async def _read_group(db: AsyncEngine, group: Group) -> tuple[dict[str, _Entity], list[_Relation]]:
    params = {"s": group[0], "acl": list(group[1])}
    async with db.connect() as conn:
        entity_rows = (
            await conn.execute(
                text(
                    "SELECT e.id, e.name, mode() WITHIN GROUP (ORDER BY m.entity_type), "
                    "array_agg(DISTINCT m.chunk_id) FROM ce_graph_mentions m "
                    "JOIN ce_chunks c ON c.id = m.chunk_id JOIN ce_graph_entities e ON e.id = m.entity_id "
                    f"WHERE {_GROUP} GROUP BY e.id, e.name"
                ),
                params,
            )
        ).all()
        relation_rows = (
            await conn.execute(
                text(
                    "SELECT r.source_entity, r.target_entity, r.category, r.label, r.evidence, r.chunk_id "
                    f"FROM ce_graph_relationships r JOIN ce_chunks c ON c.id = r.chunk_id WHERE {_GROUP} "
                    "ORDER BY r.id"
                ),
                params,
            )
        ).all()
    entities = {str(r[0]): _Entity(str(r[0]), r[1], r[2], len(r[3]), sorted(int(c) for c in r[3])) for r in entity_rows}
    relations = [_Relation(str(r[0]), str(r[1]), r[2], r[3], r[4], int(r[5])) for r in relation_rows]
    return entities, relations


def _communities(entities: dict[str, _Entity], relations: list[_Relation]) -> list[Community]:
    usable = [r for r in relations if r.source in entities and r.target in entities]
    groups = detect(entities, ((r.source, r.target, 1.0) for r in usable))
    out = []
    for members in groups:
        inside = [r for r in usable if r.source in members and r.target in members]
        listed = sorted((entities[m] for m in members), key=lambda e: (-e.frequency, e.name))
        digest = hashlib.sha256()
        for e in sorted(listed, key=lambda e: e.name):
            digest.update(f"e\x1f{e.name}\x1f{e.type}\x1e".encode())
        for r in sorted(inside, key=lambda r: (r.source, r.target, r.label, r.evidence)):
            names = (entities[r.source].name, entities[r.target].name)
            digest.update(f"r\x1f{names[0]}\x1f{names[1]}\x1f{r.category}\x1f{r.label}\x1f{r.evidence}\x1e".encode())
        out.append(Community(listed, inside, digest.hexdigest()))
    return out


def describe(community: Community, names: dict[str, str]) -> str:
    """The facts of one community as the summary prompt shows them."""
    lines = [f"- {e.name} ({e.type}, in {e.frequency} passages)" for e in community.members[:PROMPT_ENTITIES]]
    for r in community.relations[:PROMPT_RELATIONSHIPS]:
        lines.append(f"- {names[r.source]} -[{r.label}]-> {names[r.target]}: {r.evidence}")
    return "\n".join(lines)


async def _summarise(llm: LLMClient, batch: Sequence[Community], names: dict[str, str]) -> tuple[list[str | None], int]:
    user = "\n\n".join(f"[{i}]\n{describe(c, names)}" for i, c in enumerate(batch))
    result = await structured_call(
        llm,
        system=SUMMARY_SYSTEM,
        user=user,
        schema=SUMMARY_SCHEMA,
        schema_name=SUMMARY_SCHEMA_NAME,
    )
    out: list[str | None] = [None] * len(batch)
    for item in result.value["summaries"]:
        if 0 <= item["index"] < len(batch) and item["summary"].strip():
            out[item["index"]] = " ".join(item["summary"].split())
    return out, result.tokens


async def rebuild(db: AsyncEngine, llm: LLMClient | None, groups: Iterable[Group]) -> RebuildReport:
    """Detect each group's communities again, summarise the changed ones, replace the group's rows.

    No connection is held while the model is called. Without a model a new community is stored
    without a summary (``community_summary`` shows only summarised ones) and named in the report.
    """
    report = RebuildReport()
    for group in sorted(groups):
        report.groups += 1
        entities, relations = await _read_group(db, group)
        found = _communities(entities, relations)
        params = {"s": group[0], "acl": list(group[1])}
        async with db.connect() as conn:
            existing: dict[Any, Any] = dict(
                (
                    await conn.execute(
                        text(
                            "SELECT facts_hash, summary FROM ce_graph_communities WHERE source_id = :s "
                            "AND acl = CAST(:acl AS text[]) AND summary IS NOT NULL"
                        ),
                        params,
                    )
                ).all()
            )
        pending = []
        for community in found:
            community.summary = existing.get(community.facts_hash)
            if community.summary is not None:
                report.reused += 1
            else:
                pending.append(community)
        names = {e.id: e.name for e in entities.values()}
        if llm is not None:
            for start in range(0, len(pending), SUMMARY_BATCH):
                batch = pending[start : start + SUMMARY_BATCH]
                report.llm_calls += 1
                try:
                    summaries, tokens = await _summarise(llm, batch, names)
                except ContextEngineError as exc:  # stored unsummarised; the next rebuild asks again
                    log.warning("community summaries failed (%s); %d stored without one", exc.code, len(batch))
                    continue
                report.tokens += tokens
                for community, summary in zip(batch, summaries, strict=True):
                    community.summary = summary
        report.summarised += sum(1 for c in pending if c.summary is not None)
        report.unsummarised.extend(c.facts_hash for c in pending if c.summary is None)
        await _replace(db, group, found)
        report.communities += len(found)
    return report


async def _replace(db: AsyncEngine, group: Group, found: Sequence[Community]) -> None:
    params = {"s": group[0], "acl": list(group[1])}
    async with db.begin() as conn:
        await lock(conn)
        await conn.execute(
            text("DELETE FROM ce_graph_communities WHERE source_id = :s AND acl = CAST(:acl AS text[])"), params
        )
        # entities deleted since the group was read are skipped (their community rows would dangle)
        live = set(
            str(i)
            for i in (
                await conn.execute(
                    text("SELECT id FROM ce_graph_entities WHERE id = ANY(CAST(:ids AS uuid[]))"),
                    {"ids": sorted({e.id for c in found for e in c.members})},
                )
            ).scalars()
        )
        for community in found:
            members = [e.id for e in community.members if e.id in live]
            if len(members) < MIN_MEMBERS:
                continue
            cid = str(uuid.uuid4())
            await conn.execute(
                text(
                    "INSERT INTO ce_graph_communities (id, source_id, acl, level, facts_hash, summary, entity_count, "
                    "relationship_count) VALUES (CAST(:id AS uuid), :s, CAST(:acl AS text[]), 0, :h, :sum, :ec, :rc)"
                ),
                {
                    **params,
                    "id": cid,
                    "h": community.facts_hash,
                    "sum": community.summary,
                    "ec": len(members),
                    "rc": len(community.relations),
                },
            )
            await conn.execute(
                text(
                    "INSERT INTO ce_graph_community_entities (community_id, entity_id) "
                    "SELECT CAST(:id AS uuid), e FROM unnest(CAST(:e AS uuid[])) AS t(e)"
                ),
                {"id": cid, "e": members},
            )
            await conn.execute(
                text(
                    "INSERT INTO ce_graph_community_chunks (community_id, chunk_id) "
                    "SELECT CAST(:id AS uuid), c FROM unnest(CAST(:c AS bigint[])) AS t(c)"
                ),
                {"id": cid, "c": community.chunks},
            )

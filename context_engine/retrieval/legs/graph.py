"""The graph leg: chunks connected to the entities the query itself names.

The query decides, not a global switch: the leg asks the database only when the query spells the
key of an entity the graph knows (a pure-Python lookup in :mod:`context_engine.graph.names`), so a
query naming none costs no SQL. It then keeps the named entities the caller may see and scores
the visible chunks that carry a graph signal: 1.0 per named entity a chunk mentions, 0.5 per
relationship of a named entity read from it, 0.25 per one-hop neighbour it mentions (at most
``graph.max_query_entities`` neighbours). A chunk with no graph signal is never returned: the other legs
already rank it. Every run reports ``usage["graph"] = {"applied", "reason", "entities", "entity_ids"}``
for the search's first query, with ``reason`` one of :data:`GRAPH_REASONS`. A named entity the
caller may not see reads exactly like an unknown one (``no_entities_in_query``).

The search's ``mode`` decides whether the query may: left out (``auto``) the leg runs when the query
names an entity; ``"hybrid"`` never runs it; ``"graph"`` runs it and turns what would quietly fall
back in ``auto`` (graph switched off, no graph tables, the lookup failing) into the error itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from context_engine.graph import names
from context_engine.graph.errors import GraphDisabled, GraphNotEnabled

if TYPE_CHECKING:
    from context_engine.config import ContextEngineConfig
    from context_engine.retrieval.retriever import Search

#: why the leg did or did not shape a search. It ran: ``auto`` (the query named an entity),
#: ``requested`` (``mode="graph"``). It did not: ``not_requested`` (``mode="hybrid"``),
#: ``graph_disabled`` (``graph.enabled`` off, or no graph tables), ``graph_weight_zero`` (its fusion
#: weight is 0), ``no_graph_documents`` (the graph has no entity yet; trusted callers only, since it
#: describes every tenant's documents), ``no_entities_in_query`` (the query names none this caller
#: may see, which is also what a non-trusted caller hears of an empty graph),
#: ``no_visible_graph_chunks`` (it does, but no chunk the caller may read carries a signal),
#: ``graph_detection_failed`` (the lookup failed; ``auto`` only)
GRAPH_REASONS = (
    "not_requested",
    "graph_disabled",
    "graph_weight_zero",
    "no_graph_documents",
    "no_entities_in_query",
    "graph_detection_failed",
    "no_visible_graph_chunks",
    "auto",
    "requested",
)
#: the search modes: ``auto`` is what leaving ``mode`` out means
MODES = ("auto", "hybrid", "graph")


async def graph_leg(search: Search, index: int) -> tuple[list[tuple[int, float]], dict[str, Any]]:
    """Candidates for ``search.queries[index]`` and the usage report for them."""
    asked = search.mode == "graph"
    if search.mode == "hybrid":
        return [], _report("not_requested")
    if not search.services.config.graph.enabled:
        if asked:
            raise GraphDisabled()
        return [], _report("graph_disabled")
    try:
        known = await names.known(search.db)
    except DBAPIError:
        if asked:
            raise
        return [], _report("graph_detection_failed")
    if not known.enabled:
        if asked:
            raise GraphNotEnabled()
        return [], _report("graph_disabled")
    if not known.names:
        # the store-wide state of the graph is told to a trusted caller only: anyone else hears what
        # it would hear of a graph whose entities are all hidden from it, so another tenant's graph
        # documents change nothing in its report
        return [], _report("no_graph_documents" if search.scope.principals is None else "no_entities_in_query")
    spelled = known.match(search.queries[index])
    if not spelled:
        return [], _report("no_entities_in_query")
    params: dict[str, Any] = {"names": spelled}
    async with search.db.connect() as conn:
        named = (
            await conn.execute(
                text(
                    "SELECT DISTINCT e.id, e.name FROM ce_graph_entities e JOIN ce_graph_mentions m "
                    "ON m.entity_id = e.id JOIN ce_chunks c ON c.id = m.chunk_id WHERE e.name = ANY(CAST(:names "
                    f"AS text[])) AND c.valid_to IS NULL AND {search.scope.predicate('c', params)} ORDER BY e.name"
                ),
                params,
            )
        ).all()
        if not named:
            return [], _report("no_entities_in_query")
        hops = search.services.config.graph.max_query_entities
        params = {"ids": [str(r[0]) for r in named], "hops": hops, "limit": search.limit}
        rel_scope = search.scope.predicate("rc", params)
        chunk_scope = search.scope.predicate("c", params)
        rows = (
            await conn.execute(
                text(
                    "WITH named AS (SELECT CAST(unnest(CAST(:ids AS text[])) AS uuid) AS id), "
                    "rels AS (SELECT r.chunk_id, r.source_entity, r.target_entity FROM ce_graph_relationships r "
                    "JOIN ce_chunks rc ON rc.id = r.chunk_id WHERE (r.source_entity IN (SELECT id FROM named) "
                    f"OR r.target_entity IN (SELECT id FROM named)) AND rc.valid_to IS NULL AND {rel_scope}), "
                    "hop AS (SELECT DISTINCT x.id FROM rels, LATERAL (VALUES (rels.source_entity), "
                    "(rels.target_entity)) AS x(id) WHERE x.id NOT IN (SELECT id FROM named) "
                    "ORDER BY x.id LIMIT :hops), "
                    "signal AS (SELECT m.chunk_id, 1.0 AS s FROM ce_graph_mentions m WHERE m.entity_id IN "
                    "(SELECT id FROM named) UNION ALL SELECT chunk_id, 0.5 FROM rels UNION ALL SELECT m.chunk_id, 0.25 "
                    "FROM ce_graph_mentions m WHERE m.entity_id IN (SELECT id FROM hop)) "
                    "SELECT c.id, sum(signal.s) AS score FROM signal JOIN ce_chunks c ON c.id = signal.chunk_id "
                    f"WHERE c.valid_to IS NULL AND {chunk_scope} GROUP BY c.id ORDER BY score DESC, c.id LIMIT :limit"
                ),
                params,
            )
        ).all()
    entities, ids = [r[1] for r in named], [str(r[0]) for r in named]
    if not rows:
        return [], _report("no_visible_graph_chunks", entities, ids)
    report = _report("requested" if asked else "auto", entities, ids)
    return [(int(r[0]), float(r[1])) for r in rows], report


def _report(reason: str, entities: list[str] | None = None, ids: list[str] | None = None) -> dict[str, Any]:
    applied = reason in ("auto", "requested")
    return {"applied": applied, "reason": reason, "entities": entities or [], "entity_ids": ids or []}


def settle_mode(usage: dict[str, Any], mode: str) -> None:
    """``usage["mode"]`` (what was asked), ``usage["mode_used"]`` (what ran) and, when the leg did not
    run at all (its weight is 0), its report."""
    usage.setdefault("graph", _report("not_requested" if mode == "hybrid" else "graph_weight_zero"))
    usage["mode"] = mode
    usage["mode_used"] = "graph" if usage["graph"]["applied"] else "hybrid"


class GraphLeg:
    """``graph``: weight 1.0, the vector leg's neutral weight.

    The rule: until a graph relevance benchmark exists the leg counts as one ordinary leg, below the
    measured full-text weight (1.4). It returns only chunks tied to an entity the query names, so on
    a query naming none it adds nothing to fusion whatever its weight.
    """

    name = "graph"
    default_weight = 1.0

    def applies(self, query: str, config: ContextEngineConfig) -> bool:
        return True  # the gate is the query's entities, checked in run() without SQL, so the reason is reported

    async def run(self, search: Search, index: int) -> list[tuple[int, float]]:
        pairs, report = await graph_leg(search, index)
        if index == 0:
            search.usage["graph"] = report
        return pairs

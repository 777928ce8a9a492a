"""Graph mode on Postgres alone: entities, relationships and communities beside the chunks.

* :mod:`~context_engine.graph.entities`: facts read from chunks by the model, one call per batch.
* :mod:`~context_engine.graph.store`: the Postgres mirror and its repair (:mod:`~context_engine.graph.schema`:
  whether its tables exist).
* :mod:`~context_engine.graph.communities`: Louvain communities per (source, ACL) group, summarised.
* :mod:`~context_engine.graph.document`: what ingest and delete call for one document.
* :mod:`~context_engine.graph.navigate`: ``get_neighbors``, ``traverse``, ``find_related``,
  ``community_summary`` under the caller's read scope.
* :mod:`context_engine.retrieval.legs.graph`: the search leg chosen by the query's entities.

The tables come from ``context-engine migrate --graph``; networkx from the ``graph`` extra.
Nothing is imported here: the search leg loads only the name index, the normaliser and the schema check.
"""

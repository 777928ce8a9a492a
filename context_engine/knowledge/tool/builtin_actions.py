"""The knowledge tool's built-in actions: one record each, in the order the definition lists them,
and one registration line (see :mod:`context_engine.knowledge.tool.actions`)."""

from __future__ import annotations

from context_engine.knowledge.tool import discover, documents, runners, search
from context_engine.knowledge.tool.actions import Action, register
from context_engine.knowledge.tool.capabilities import compute_on, graph_on, has_llm, map_reduce_on

NO_GRAPH = "this deployment has no knowledge graph"

DISCOVER = Action(
    name="discover",
    purpose="what documents are in scope and what is inside each one; call it first",
    handler=discover.discover,
    optional=("source_ids", "document_ids", "limit", "cursor"),
    reads_graph=True,  # it reports which actions can run, the graph ones among them
)
SEARCH = Action(
    name="search",
    purpose="passages by meaning or keywords; for an id or code send the bare identifier",
    handler=search.search,
    required=("query",),
    optional=("source_ids", "document_ids", "top_k", "mode"),
    properties={
        "top_k": {"type": "integer", "minimum": 1, "maximum": 50, "description": "search: how many hits (default 10)."},
        "mode": {
            "type": "string",
            "enum": ["hybrid", "graph"],
            "description": "search: force a retrieval mode; omit it to let the documents in scope decide.",
        },
    },
)
GET_DOC = Action(
    name="get_doc",
    purpose="one whole document by its system id",
    handler=documents.get_doc,
    required=("document_id",),
    instead_of_document_ids="send one document_id, or use get_docs for several documents",
)
GET_DOCS = Action(
    name="get_docs",
    purpose="several whole documents by id, within a size budget",
    handler=documents.get_docs,
    required=("document_ids",),
)
GET_CHUNKS = Action(
    name="get_chunks",
    purpose="one document in order, a range of chunks at a time, from start",
    handler=documents.get_chunks,
    required=("document_id",),
    optional=("start",),
    properties={
        "start": {
            "type": "integer",
            "minimum": 0,
            "description": "get_chunks: the chunk position to start at (a search hit's chunk_idx, or next_start).",
        },
    },
    instead_of_document_ids="send one document_id",
)
LIST = Action(
    name="list",
    purpose="browse documents page by page without searching",
    handler=documents.list_documents,
    optional=("source_ids", "document_ids", "limit", "cursor"),
)
QUERY_META = Action(
    name="query_meta",
    purpose="the structured fields a question names and each document's value for them",
    handler=runners.query_meta,
    required=("query",),
    optional=("source_ids",),
    available=has_llm,
    off_sentence=(
        "query_meta is off: no model is configured on this deployment to read structured fields. "
        "Use search for the passages, or discover for the fields documents carry."
    ),
)
COMPUTE = Action(
    name="compute",
    purpose="a figure derived from spreadsheets (total, average, count, ranking) over every row",
    handler=runners.compute,
    required=("query",),
    optional=("source_ids", "document_ids"),
    available=compute_on,
    off_sentence=(
        "compute is off: code execution is not enabled on this deployment (or no model is configured). "
        "Quote the rows search finds instead of adding them up yourself."
    ),
)
MAP_REDUCE = Action(
    name="map_reduce",
    purpose="the same question asked of every document in scope, one answer per document",
    handler=runners.map_reduce,
    required=("query",),
    optional=("source_ids", "document_ids", "limit"),
    available=map_reduce_on,
    off_sentence=(
        "map_reduce is off: no per-document model is available on this deployment. "
        "Use search, or read the documents with get_docs."
    ),
)
GET_NEIGHBORS = Action(
    name="get_neighbors",
    purpose="what is one step from a named entity in the knowledge graph",
    handler=runners.graph,
    required=("entity",),
    optional=("source_ids",),
    available=graph_on,
    off_sentence=f"get_neighbors is off: {NO_GRAPH}. Use search for passages naming it.",
    reads_graph=True,
)
TRAVERSE = Action(
    name="traverse",
    purpose="everything within a few steps of a named entity",
    handler=runners.graph,
    required=("entity",),
    optional=("source_ids", "depth", "category"),
    properties={
        "depth": {
            "type": "integer",
            "minimum": 1,
            "maximum": 3,
            "description": "traverse: how many steps (default 2).",
        },
    },
    available=graph_on,
    off_sentence=f"traverse is off: {NO_GRAPH}. Use search for passages naming it.",
    reads_graph=True,
)
FIND_RELATED = Action(
    name="find_related",
    purpose="connections of one kind across the corpus, with no starting entity",
    handler=runners.graph,
    optional=("source_ids", "category", "entity_type"),
    properties={"entity_type": {"type": "string", "description": "find_related: the type of entity to connect to."}},
    available=graph_on,
    off_sentence=f"find_related is off: {NO_GRAPH}. Use search instead.",
    reads_graph=True,
)
COMMUNITY_SUMMARY = Action(
    name="community_summary",
    purpose="the themes the corpus groups into, ranked against a question",
    handler=runners.graph,
    optional=("source_ids", "query"),
    available=graph_on,
    off_sentence=f"community_summary is off: {NO_GRAPH}. Use discover instead.",
    reads_graph=True,
)

for _action in (
    DISCOVER, SEARCH, GET_DOC, GET_DOCS, GET_CHUNKS, LIST, QUERY_META, COMPUTE, MAP_REDUCE,
    GET_NEIGHBORS, TRAVERSE, FIND_RELATED, COMMUNITY_SUMMARY,
):  # fmt: skip
    register(_action)

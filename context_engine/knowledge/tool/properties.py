"""The one table of what a model may send: every argument, its JSON Schema, and which actions use it.

The exported definition, the MCP tool and the argument checks are all built from this table, so
they cannot disagree. ``action`` is the only argument the schema requires; each action checks its
own required arguments (see :data:`ACTION_ARGS`).
"""

from __future__ import annotations

from typing import Any

#: every action, in the order the definition lists them
KNOWLEDGE_ACTIONS: tuple[str, ...] = (
    "discover",
    "search",
    "get_doc",
    "get_docs",
    "get_chunks",
    "list",
    "query_meta",
    "compute",
    "map_reduce",
    "get_neighbors",
    "traverse",
    "find_related",
    "community_summary",
)

#: one line per action: what it is for (the description and ``discover`` both quote it)
ACTION_PURPOSES: dict[str, str] = {
    "discover": "what documents are in scope and what is inside each one; call it first",
    "search": "passages by meaning or keywords; for an id or code send the bare identifier",
    "get_doc": "one whole document by its system id",
    "get_docs": "several whole documents by id, within a size budget",
    "get_chunks": "one document in order, a range of chunks at a time, from start",
    "list": "browse documents page by page without searching",
    "query_meta": "the structured fields a question names and each document's value for them",
    "compute": "a figure derived from spreadsheets (total, average, count, ranking) over every row",
    "map_reduce": "the same question asked of every document in scope, one answer per document",
    "get_neighbors": "what is one step from a named entity in the knowledge graph",
    "traverse": "everything within a few steps of a named entity",
    "find_related": "connections of one kind across the corpus, with no starting entity",
    "community_summary": "the themes the corpus groups into, ranked against a question",
}

_IDS = {"type": "array", "items": {"type": "string"}}

#: argument name -> (JSON Schema fragment with its description)
PROPERTIES: dict[str, dict[str, Any]] = {
    "action": {
        "type": "string",
        "enum": list(KNOWLEDGE_ACTIONS),
        "description": "What to do. Start with discover when you do not know what is in scope.",
    },
    "query": {
        "type": "string",
        "description": "The question or keywords (search, query_meta, compute, map_reduce, community_summary).",
    },
    "document_id": {
        "type": "string",
        "description": (
            "A document's system id, as discover, list or a search hit gave it (get_doc, get_chunks). "
            "Never an invoice number or other identifier written inside a document: search for those."
        ),
    },
    "document_ids": {
        **_IDS,
        "description": (
            "System ids of documents to narrow to (search, get_docs, discover, list, compute, map_reduce). "
            "Other actions refuse it."
        ),
    },
    "source_ids": {**_IDS, "description": "Source ids to narrow to, within what this tool may reach."},
    "start": {
        "type": "integer",
        "minimum": 0,
        "description": "get_chunks: the chunk position to start at (a search hit's chunk_idx, or next_start).",
    },
    "limit": {
        "type": "integer",
        "minimum": 1,
        "maximum": 100,
        "description": "How many documents per page (discover, list) or targets (map_reduce).",
    },
    "top_k": {"type": "integer", "minimum": 1, "maximum": 50, "description": "search: how many hits (default 10)."},
    "cursor": {"type": "string", "description": "discover, list: the next_cursor of the previous page."},
    "mode": {
        "type": "string",
        "enum": ["hybrid", "graph"],
        "description": "search: force a retrieval mode; omit it to let the documents in scope decide.",
    },
    "entity": {"type": "string", "description": "get_neighbors, traverse: an entity's name or id."},
    "depth": {"type": "integer", "minimum": 1, "maximum": 3, "description": "traverse: how many steps (default 2)."},
    "category": {"type": "string", "description": "traverse, find_related: a relationship category."},
    "entity_type": {"type": "string", "description": "find_related: the type of entity to connect to."},
}

#: per action: (required arguments, optional arguments); anything else sent is refused by name
ACTION_ARGS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "discover": ((), ("source_ids", "document_ids", "limit", "cursor")),
    "search": (("query",), ("source_ids", "document_ids", "top_k", "mode")),
    "get_doc": (("document_id",), ()),
    "get_docs": (("document_ids",), ()),
    "get_chunks": (("document_id",), ("start",)),
    "list": ((), ("source_ids", "document_ids", "limit", "cursor")),
    "query_meta": (("query",), ("source_ids",)),
    "compute": (("query",), ("source_ids", "document_ids")),
    "map_reduce": (("query",), ("source_ids", "document_ids", "limit")),
    "get_neighbors": (("entity",), ("source_ids",)),
    "traverse": (("entity",), ("source_ids", "depth", "category")),
    "find_related": ((), ("source_ids", "category", "entity_type")),
    "community_summary": ((), ("source_ids", "query")),
}

#: the six actions that honour document_ids; every other action refuses it
HONOURS_DOCUMENT_IDS = frozenset(a for a, (req, opt) in ACTION_ARGS.items() if "document_ids" in req + opt)


def input_schema() -> dict[str, Any]:
    """The JSON Schema of the tool's arguments (a fresh copy each call)."""
    import copy

    return {
        "type": "object",
        "properties": copy.deepcopy(PROPERTIES),
        "required": ["action"],
        "additionalProperties": False,
    }

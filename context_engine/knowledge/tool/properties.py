"""The arguments several knowledge-tool actions share, each with its JSON Schema and description.

An argument only one action takes is declared on that action's record instead
(:mod:`context_engine.knowledge.tool.builtin_actions`); the input schema is both, merged by
:func:`context_engine.knowledge.tool.actions.input_schema`.
"""

from __future__ import annotations

from typing import Any

_IDS = {"type": "array", "items": {"type": "string"}}

#: argument name -> JSON Schema fragment with its description
SHARED_PROPERTIES: dict[str, dict[str, Any]] = {
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
    "limit": {
        "type": "integer",
        "minimum": 1,
        "maximum": 100,
        "description": "How many documents per page (discover, list) or targets (map_reduce).",
    },
    "cursor": {"type": "string", "description": "discover, list: the next_cursor of the previous page."},
    "entity": {"type": "string", "description": "get_neighbors, traverse: an entity's name or id."},
    "category": {"type": "string", "description": "traverse, find_related: a relationship category."},
}

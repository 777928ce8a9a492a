"""``knowledge_tool_definition()``: the tool as data, for a host's own agent loop and for MCP.

The description carries the decision rules once; the input schema comes from the property table.
"""

from __future__ import annotations

from typing import Any

from context_engine.knowledge.tool.off import OFF_SENTENCES
from context_engine.knowledge.tool.properties import ACTION_PURPOSES, KNOWLEDGE_ACTIONS, input_schema

TOOL_NAME = "search_knowledge_base"

_RULES = """\
Read the documents this conversation may use. Pick what to do with `action`.

Rules:
- Call discover first when you do not know what is in scope; use the real document ids, sheet, column \
and section names it returns.
- document_id is a system id from discover, list or a search hit. An invoice number, SKU or other code \
written inside a document goes in a search query, sent alone (for example "2525").
- For a figure from spreadsheets (a total, an average, a count, a ranking) use compute, never a sum of \
search hits: hits are excerpts.
- To read around a search hit, call get_chunks with start set to the hit's chunk_idx.
- When an answer carries next_page or next_action, that is the next call, already filled in: make it \
rather than guessing.
- When an answer has "success": false, its "error" says what to change; follow it.

Actions:
"""

#: the sentence the MCP door adds: what it serves is filtered by the caller's permissions
MCP_SCOPE_SENTENCE = "Results are limited to the documents the calling user is permitted to read."


def description() -> str:
    lines = []
    for action in KNOWLEDGE_ACTIONS:
        off = OFF_SENTENCES.get(action)
        suffix = f" (OFF: {off})" if off else ""
        lines.append(f"- {action}: {ACTION_PURPOSES[action]}{suffix}")
    return _RULES + "\n".join(lines)


def knowledge_tool_definition() -> dict[str, Any]:
    """``{"name", "description", "input_schema", "annotations"}``.

    ``readOnlyHint`` is false on purpose: most actions only read, but ``compute`` runs generated code.
    """
    return {
        "name": TOOL_NAME,
        "description": description(),
        "input_schema": input_schema(),
        "annotations": {"readOnlyHint": False, "openWorldHint": False},
    }

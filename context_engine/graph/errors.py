"""The graph's refusals, each with a stable code and the HTTP status the routes answer with."""

from __future__ import annotations

from context_engine.errors import ContextEngineError, FixedMessageError, NotFound


class GraphNotEnabled(FixedMessageError):
    """The graph tables were never created on this database."""

    code = "graph_not_enabled"
    status = 409
    fixed_message = (
        "graph mode is off on this database: create its tables with `context-engine migrate --graph` "
        "(or migrate(..., graph=True)) first"
    )


class GraphNeedsLLM(FixedMessageError):
    """Extraction and community summaries are model calls; with no ``llm`` section nothing is called."""

    code = "graph_llm_missing"
    status = 409
    fixed_message = (
        "graph extraction needs a language model: configure `graph.extraction_llm` (or the `llm` section) "
        "to ingest in graph mode"
    )


class GraphDisabled(FixedMessageError):
    """``graph.enabled`` is off: graph mode is refused by name, never quietly answered in hybrid."""

    code = "graph_disabled"
    status = 409
    fixed_message = "graph mode is switched off on this deployment (graph.enabled=false)"


class GraphExtractionFailed(ContextEngineError):
    """A batch's extraction failed (provider error or a reply invalid against the schema); nothing was written."""

    code = "graph_extraction_failed"
    status = 502


class EntityNotFound(NotFound):
    """Unknown, or known only through chunks the caller may not see: the two read the same."""

    code = "entity_not_found"

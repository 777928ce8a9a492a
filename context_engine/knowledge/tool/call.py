"""One knowledge-tool call: who asks, the host's ceiling, the model's checked arguments, the redactor.

Actions read everything they need from a :class:`ToolCall`, so no action can reach past the ceiling
or skip the caller's redaction by forgetting an argument. A :class:`Refusal` raised anywhere becomes
the model-facing ``{"success": false, "error": ...}`` answer.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from context_engine.knowledge.tool.engine_protocol import KnowledgeEngine
from context_engine.principals import TRUSTED
from context_engine.redaction import RedactionPolicy
from context_engine.redaction.apply import Redactor
from context_engine.storage.scope import Scope, narrow_to_ceiling

#: a host's compute runner: ``(instruction, *, source_ids, document_ids, principals) -> dict``
ComputeRunner = Callable[..., Awaitable[dict[str, Any]]]
#: a host's map_reduce runner: the same, plus ``limit``
MapReduceRunner = Callable[..., Awaitable[dict[str, Any]]]


class Refusal(Exception):
    """A model-facing refusal: a sentence that says what to do next, and optionally the call to make."""

    def __init__(self, message: str, *, next_action: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        self.next_action = next_action

    def answer(self) -> dict[str, Any]:
        body: dict[str, Any] = {"success": False, "error": self.message}
        if self.next_action is not None:
            body["next_action"] = self.next_action
        return body


@dataclass(frozen=True)
class Narrowed:
    """The scope one call reads: the ceiling narrowed by the model's own source and document ids."""

    source_ids: list[str] | None
    document_ids: list[str] | None
    #: the model named its documents (caps in discover's structure are then lifted)
    named_documents: bool


@dataclass(frozen=True)
class ToolCall:
    """Everything one action may use; the host-set fields are resolved before any action runs."""

    engine: KnowledgeEngine
    action: str
    args: dict[str, Any]
    principals: tuple[str, ...] | None
    ceiling: Scope
    redactor: Redactor
    redaction: RedactionPolicy | None
    secret_key: str | bytes | None
    compute: ComputeRunner | None
    map_reduce: MapReduceRunner | None
    #: whether this database has the graph tables (looked up for ``discover`` and the graph actions)
    graph_enabled: bool = False

    @property
    def caller(self) -> Any:
        """The principals as the engine's public methods take them (``TRUSTED`` for a trusted caller)."""
        return TRUSTED if self.principals is None else list(self.principals)

    def narrowed(self) -> Narrowed:
        """The ceiling narrowed by ``source_ids`` / ``document_ids``; refuses a scope of nothing."""
        sources = narrow_to_ceiling(self.args.get("source_ids"), self.ceiling.source_ids)
        requested = self.args.get("document_ids")
        if requested is not None:
            requested = [document_id(value, "document_ids") for value in requested]
        documents = narrow_to_ceiling(requested, self.ceiling.document_ids)
        if sources == [] or documents == []:
            if self.args.get("source_ids") is None and requested is None:
                raise Refusal("nothing is in scope: the host has given this tool no sources or documents to read.")
            raise Refusal(
                "nothing is in scope: none of the source_ids or document_ids you sent is one this tool may read. "
                "Call discover without them to see what is in scope.",
                next_action={"action": "discover"},
            )
        return Narrowed(sources, documents, requested is not None)

    def paging_args(self) -> dict[str, Any]:
        """The model's narrowing arguments, repeated in a ``next_page`` so the next page is the same query."""
        return {k: self.args[k] for k in ("source_ids", "document_ids", "limit") if k in self.args}

    def within_ceiling(self, document: str) -> bool:
        """Whether a document id passes the document-id ceiling (the source ceiling is checked in SQL)."""
        return self.ceiling.document_ids is None or document in self.ceiling.document_ids


def document_id(value: Any, field: str = "document_id") -> str:
    """A system id, or a refusal that sends a content identifier to ``search`` where it belongs."""
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        shown = str(value)[:80]
        raise Refusal(
            f"{shown!r} is not a document id: {field} takes the system id that discover, list or a search hit "
            f"returned. To find a document by a number or code written inside it, search for that identifier.",
            next_action={"action": "search", "query": shown},
        ) from None

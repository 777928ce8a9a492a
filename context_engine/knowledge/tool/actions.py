"""The knowledge tool's actions: one record each, registered once by name, in listing order.

A record says everything about its action: its name, the one line that describes it (the tool's
description and ``discover`` quote it), the arguments it requires and accepts (and the schema of any
only it takes), the handler that answers it, and whether this call can run it (with the sentence
an OFF action answers). The exported definition, the MCP tool, ``discover``'s
``available_actions``, ``off_actions``, the argument checks and the dispatch are all read from the
records, so none can disagree with another.

The built-in actions register themselves in :mod:`context_engine.knowledge.tool.builtin_actions`,
imported on the first lookup. A host or a test adds an action with :func:`register`; its handler
reads everything through the :class:`~context_engine.knowledge.tool.call.ToolCall` it is given, so
it reads under the caller's principals and the host's ceiling like every other action.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

from context_engine.knowledge.tool.properties import SHARED_PROPERTIES
from context_engine.named_registry import NamedRegistry

if TYPE_CHECKING:
    from context_engine.knowledge.tool.call import ToolCall
    from context_engine.knowledge.tool.capabilities import Capabilities

#: answers one checked call of an action
Handler = Callable[["ToolCall"], Awaitable[dict[str, Any]]]
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_KINDS = {"string", "integer", "array"}


@dataclass(frozen=True)
class Action:
    """One action of the knowledge tool (see the module docstring)."""

    name: str
    #: what it is for, in one line a model reads
    purpose: str
    handler: Handler
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    #: the schema of each argument only this action takes (the shared ones are in ``properties.py``)
    properties: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    #: whether this call (or deployment) can run it; None: always
    available: Callable[[Capabilities], bool] | None = None
    #: what an OFF call answers, and what the description says of it: why, and what to use instead
    off_sentence: str = ""
    #: its availability depends on the graph tables, so a call looks them up first
    reads_graph: bool = False
    #: what a model sending ``document_ids`` (which this action does not honour) should send instead
    instead_of_document_ids: str = "leave it out"

    @property
    def arguments(self) -> tuple[str, ...]:
        return self.required + self.optional


_ACTIONS = NamedRegistry[Action]("context_engine.knowledge.tool.builtin_actions")


def register(action: Action) -> Action:
    """Add an action. Its name must be new; each argument it names must be shared or declared on
    it, and an argument it declares may not differ from a shared or another action's one."""
    if not isinstance(action.name, str) or not _NAME.match(action.name) or action.name == "action":
        raise ValueError("an action needs a name of lower-case letters, digits and '_' (at most 40)")
    _ACTIONS.check_free(action.name, action, "a knowledge-tool action")
    if not action.purpose.strip() or not callable(action.handler):
        raise ValueError(f"action {action.name!r} needs a purpose and a handler")
    if action.available is not None and not action.off_sentence.strip():
        raise ValueError(f"action {action.name!r} can be off, so it needs the off_sentence it then answers")
    if len(set(action.arguments)) != len(action.arguments):
        raise ValueError(f"action {action.name!r} names an argument twice")
    declared = _declared(exclude=action.name)
    for name, schema in action.properties.items():
        if not isinstance(schema, dict) or schema.get("type") not in _KINDS or not schema.get("description"):
            raise ValueError(f"argument {name!r} of {action.name!r} needs a type ({', '.join(sorted(_KINDS))}) "
                             "and a description")
        if name in declared and declared[name] != schema:
            raise ValueError(f"argument {name!r} of {action.name!r} differs from the one already declared")
    for name in action.arguments:
        if name not in declared and name not in action.properties:
            raise ValueError(f"action {action.name!r} takes {name!r}, which no table declares")
    return _ACTIONS.add(action.name, action)


def unregister(name: str) -> None:
    _ACTIONS.remove(name)


def _declared(exclude: str | None = None) -> dict[str, dict[str, Any]]:
    found = dict(SHARED_PROPERTIES)
    for action in _ACTIONS.entries.values():
        if action.name != exclude:
            found.update(action.properties)
    return found


def actions() -> list[Action]:
    """Every action in listing order: the built-ins, then in registration order."""
    return list(_ACTIONS.loaded().values())


def get(name: str) -> Action | None:
    return _ACTIONS.loaded().get(name)


class _ActionNames(Sequence[str]):
    """The registered action names, as a live sequence (a registered action is in it at once)."""

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return list(_ACTIONS.loaded())[index]

    def __len__(self) -> int:
        return len(_ACTIONS.loaded())

    def __iter__(self) -> Iterator[str]:
        return iter(list(_ACTIONS.loaded()))

    def __contains__(self, value: object) -> bool:
        return value in _ACTIONS.loaded()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(tuple(self))


#: every action's name, in the order the definition lists them
KNOWLEDGE_ACTIONS: Sequence[str] = _ActionNames()


def properties() -> dict[str, dict[str, Any]]:
    """Every argument a model may send (``action`` first) with its schema: a fresh copy."""
    table: dict[str, dict[str, Any]] = {
        "action": {
            "type": "string",
            "enum": list(KNOWLEDGE_ACTIONS),
            "description": "What to do. Start with discover when you do not know what is in scope.",
        },
        **SHARED_PROPERTIES,
    }
    for action in actions():
        table.update(action.properties)
    return copy.deepcopy(table)


def input_schema() -> dict[str, Any]:
    """The JSON Schema of the tool's arguments (a fresh copy each call)."""
    return {"type": "object", "properties": properties(), "required": ["action"], "additionalProperties": False}


def honours_document_ids() -> frozenset[str]:
    """The actions that take ``document_ids``; every other action refuses it."""
    return frozenset(a.name for a in actions() if "document_ids" in a.arguments)


def off_reason(name: str, capabilities: Capabilities) -> str | None:
    """The OFF sentence for action ``name`` on this call (or deployment), or None when it can run."""
    action = get(name)
    if action is None or action.available is None or action.available(capabilities):
        return None
    return action.off_sentence


def off_actions(capabilities: Capabilities) -> dict[str, str]:
    """Every action that cannot run here, with the sentence it answers."""
    return {a.name: sentence for a in actions() if (sentence := off_reason(a.name, capabilities)) is not None}

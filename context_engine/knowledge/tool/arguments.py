"""Checking what a model sent against the property table, with a refusal that names the fix."""

from __future__ import annotations

import json
from typing import Any

from context_engine.knowledge.tool.call import Refusal
from context_engine.knowledge.tool.properties import ACTION_ARGS, HONOURS_DOCUMENT_IDS, KNOWLEDGE_ACTIONS, PROPERTIES

_MAX_STRING = 4000
_MAX_IDS = 500

#: what a model should send instead of document_ids, for each action that does not honour it
_INSTEAD_OF_DOCUMENT_IDS = {
    "get_doc": "send one document_id, or use get_docs for several documents",
    "get_chunks": "send one document_id",
}


def _example(action: str) -> str:
    required = ACTION_ARGS[action][0]
    sample = {"action": action, **{name: f"<{name}>" for name in required}}
    return json.dumps(sample)


def check(action: Any, model_args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(action, arguments)`` with None values dropped, or a :class:`Refusal`."""
    names = ", ".join(KNOWLEDGE_ACTIONS)
    if action is None:
        raise Refusal(f"action is required: one of {names}. Start with discover to see what is in scope.",
                      next_action={"action": "discover"})
    if not isinstance(action, str) or action not in KNOWLEDGE_ACTIONS:
        raise Refusal(f"unknown action {str(action)[:60]!r}: use one of {names}.", next_action={"action": "discover"})
    args = {k: v for k, v in model_args.items() if v is not None}
    required, optional = ACTION_ARGS[action]
    for name in args:
        if name not in PROPERTIES:
            raise Refusal(f"unknown argument {name[:60]!r}: {action} takes {', '.join(required + optional) or 'none'}.")
    if "document_ids" in args and action not in HONOURS_DOCUMENT_IDS:
        instead = _INSTEAD_OF_DOCUMENT_IDS.get(action, "leave it out")
        raise Refusal(
            f"document_ids is not honored by {action}, so it would answer over the whole scope as if it were; "
            f"{instead}. Only {', '.join(sorted(HONOURS_DOCUMENT_IDS))} take document_ids."
        )
    for name in args:
        if name not in required + optional:
            raise Refusal(f"{name} is not used by {action}; {action} takes {', '.join(required + optional) or 'none'}.")
    for name in required:
        if name not in args:
            raise Refusal(f"{action} needs {name}: for example {_example(action)}.")
    for name, value in args.items():
        args[name] = _value(name, value)
    return action, args


def _value(name: str, value: Any) -> Any:
    spec = PROPERTIES[name]
    kind = spec["type"]
    if kind == "string":
        if not isinstance(value, str) or not value.strip():
            raise Refusal(f"{name} must be a non-empty string.")
        if len(value) > _MAX_STRING:
            raise Refusal(f"{name} is longer than {_MAX_STRING} characters; send a shorter one.")
        if "enum" in spec and value not in spec["enum"]:
            raise Refusal(f"{name} must be one of {', '.join(spec['enum'])}.")
        return value.strip()
    if kind == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            raise Refusal(f"{name} must be an integer.")
        low, high = spec.get("minimum"), spec.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = f"at least {low}" if high is None else f"between {low} and {high}"
            raise Refusal(f"{name} must be {bounds}.")
        return value
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise Refusal(f"{name} must be a list of id strings.")
    if len(value) > _MAX_IDS:
        raise Refusal(f"{name} holds more than {_MAX_IDS} ids; send fewer.")
    return [v.strip() for v in value]

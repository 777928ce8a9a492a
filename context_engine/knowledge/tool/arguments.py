"""Checking what a model sent against the action records, with a refusal that names the fix."""

from __future__ import annotations

import json
from typing import Any

from context_engine.knowledge.tool import actions
from context_engine.knowledge.tool.actions import KNOWLEDGE_ACTIONS, Action
from context_engine.knowledge.tool.call import Refusal

_MAX_STRING = 4000
_MAX_IDS = 500


def _example(action: Action) -> str:
    sample = {"action": action.name, **{name: f"<{name}>" for name in action.required}}
    return json.dumps(sample)


def check(action: Any, model_args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(action, arguments)`` with None values dropped, or a :class:`Refusal`."""
    names = ", ".join(KNOWLEDGE_ACTIONS)
    if action is None:
        raise Refusal(f"action is required: one of {names}. Start with discover to see what is in scope.",
                      next_action={"action": "discover"})
    record = actions.get(action) if isinstance(action, str) else None
    if record is None:
        raise Refusal(f"unknown action {str(action)[:60]!r}: use one of {names}.", next_action={"action": "discover"})
    args = {k: v for k, v in model_args.items() if v is not None}
    table = actions.properties()
    takes = ", ".join(record.arguments) or "none"
    for name in args:
        if name not in table:
            raise Refusal(f"unknown argument {name[:60]!r}: {record.name} takes {takes}.")
    honouring = actions.honours_document_ids()
    if "document_ids" in args and record.name not in honouring:
        raise Refusal(
            f"document_ids is not honored by {record.name}, so it would answer over the whole scope as if it were; "
            f"{record.instead_of_document_ids}. Only {', '.join(sorted(honouring))} take document_ids."
        )
    for name in args:
        if name not in record.arguments:
            raise Refusal(f"{name} is not used by {record.name}; {record.name} takes {takes}.")
    for name in record.required:
        if name not in args:
            raise Refusal(f"{record.name} needs {name}: for example {_example(record)}.")
    for name, value in args.items():
        args[name] = _value(name, table[name], value)
    return record.name, args


def _value(name: str, spec: dict[str, Any], value: Any) -> Any:
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

"""``structured_call``: ask a model for JSON matching a schema, validate it here, re-ask at most once.

Why validate locally even when the provider says it enforced the schema: a ``custom`` endpoint may
accept ``response_format`` and answer around it, and nothing downstream should ever act on a reply
that was not checked against the exact schema that was sent. Why exactly one re-ask: a model that
misread the format usually fixes it when shown its own answer and the validation error; a second
failure means the model cannot do this reliably, and guessing at its intent would make the caller
trust a value nobody checked. So the second failure is :class:`StructuredCallError`, never a guess.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from context_engine.errors import ContextEngineError
from context_engine.llm.base import LLMClient, Mode
from context_engine.llm.schema import strict_portable, validate

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


@dataclass
class StructuredResult:
    value: Any
    mode: Mode
    #: 2 means the one re-ask was needed
    attempts: int
    #: summed over every attempt (a failed attempt is billed like a good one)
    tokens: int


class StructuredCallError(ContextEngineError):
    """The model's reply failed validation twice (or could not be had at all).

    ``raw`` is the final reply, for a caller that wants its own tolerant reader; it is deliberately
    not part of the message, so logging the exception never logs model output.
    """

    code = "llm_invalid_reply"
    status = 502

    def __init__(self, message: str, *, mode: Mode, attempts: int, tokens: int, raw: str):
        super().__init__(message, details={"mode": mode, "attempts": attempts, "tokens": tokens})
        self.mode, self.attempts, self.tokens, self.raw = mode, attempts, tokens, raw

    def __repr__(self) -> str:
        return f"StructuredCallError(mode={self.mode!r}, attempts={self.attempts}, tokens={self.tokens})"


def parse_json(text: str) -> Any:
    """The reply as JSON; a single surrounding code fence is tolerated (prompt mode often adds one)."""
    fenced = _FENCE.match(text)
    return json.loads(fenced.group(1) if fenced else text)


async def structured_call(
    llm: LLMClient,
    *,
    system: str,
    user: str,
    schema: dict[str, Any],
    schema_name: str = "reply",
    max_reasks: int = 1,
) -> StructuredResult:
    """One validated JSON value, or ``StructuredCallError`` after ``1 + max_reasks`` invalid replies.

    Provider failures (``ProviderError``: unreachable, rejected, retries exhausted) propagate as
    they are; they are not re-asked here because the provider already retried them.
    """
    portable = strict_portable(schema)
    messages: list[dict[str, str]] = [{"role": "user", "content": user}]
    tokens = 0
    attempts = 1 + max(0, max_reasks)
    for attempt in range(1, attempts + 1):
        reply = await llm.complete(system=system, messages=messages, schema=portable, schema_name=schema_name)
        tokens += reply.tokens
        try:
            value = parse_json(reply.text)
            errors = validate(value, portable)
        except ValueError as exc:
            errors = [f"the reply is not valid JSON ({exc.msg if hasattr(exc, 'msg') else exc})"]
        if not errors:
            return StructuredResult(value, reply.mode, attempt, tokens)
        if attempt == attempts:
            raise StructuredCallError(
                f"the model's reply did not match the {schema_name!r} schema after {attempt} attempt(s): "
                + "; ".join(errors),
                mode=reply.mode,
                attempts=attempt,
                tokens=tokens,
                raw=reply.text,
            )
        messages = [
            *messages,
            {"role": "assistant", "content": reply.text or "(empty reply)"},
            {
                "role": "user",
                "content": "That reply was not valid: "
                + "; ".join(errors)
                + ". Reply again with only the JSON object, valid against the schema.",
            },
        ]
    raise AssertionError("unreachable")  # pragma: no cover

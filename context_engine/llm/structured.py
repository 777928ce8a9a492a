"""``structured_call``: ask a model for JSON matching a schema, validate it here, re-ask at most once.

Why validate locally even when the provider says it enforced the schema: a ``custom`` endpoint may
accept ``response_format`` and answer around it, and nothing downstream should ever act on a reply
that was not checked against the exact schema that was sent.

Every failed attempt is reported to ``hooks.on_error`` (stage ``structured_call_attempt``), the
call's final failure once more (``structured_call``), and an enforced reply that was not plain
JSON (``structured_call_repair``), each with ``mode`` and ``attempt`` in its context.

Why the re-ask is only for ``mode="prompt"``: there the shape was only asked for in words, and a
model that misread it usually fixes it when shown its own answer and the validation error. In
``native`` and ``tool`` mode the provider enforced the schema, so a reply that still breaks it is a
provider bug that asking again pays for twice without fixing. A failure that is not re-asked is
:class:`StructuredCallError`, never a guess.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from context_engine.config import LLMConfig
from context_engine.errors import ContextEngineError, ProviderError
from context_engine.hooks import ErrorEvent, Hooks
from context_engine.llm.base import HttpClientFactory, LLMClient, Mode
from context_engine.llm.factory import build_llm
from context_engine.llm.schema import lint_unenforced, strict_portable, validate

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)
#: how the providers word a refusal the model made in the field reserved for it
_REFUSED = "the model refused the request"

_repairs = {"count": 0}


@dataclass
class StructuredResult:
    value: Any
    mode: Mode
    #: 2 means the prompt path needed its one re-ask
    attempts: int
    #: summed over every attempt (a failed attempt is billed like a good one)
    tokens: int
    #: ``tokens`` split into sent and written, where the provider reports both (summed likewise)
    input_tokens: int = 0
    output_tokens: int = 0


class StructuredCallError(ContextEngineError):
    """No valid reply: it broke the schema (twice on the prompt path) or could not be had at all.

    ``raw`` is the final reply, for a caller that wants its own tolerant reader; it is deliberately
    not part of the message, so logging the exception never logs model output.
    """

    code = "llm_invalid_reply"
    status = 502

    def __init__(
        self,
        message: str,
        *,
        mode: Mode,
        attempts: int,
        tokens: int,
        raw: str,
        input_tokens: int = 0,
        output_tokens: int = 0,
    ):
        details = {"mode": mode, "attempts": attempts, "tokens": tokens, "input_tokens": input_tokens,
                   "output_tokens": output_tokens}  # fmt: skip
        super().__init__(message, details=details)
        self.mode, self.attempts, self.tokens, self.raw = mode, attempts, tokens, raw

    def __repr__(self) -> str:
        return f"{type(self).__name__}(mode={self.mode!r}, attempts={self.attempts}, tokens={self.tokens})"


class LLMNotConfigured(ContextEngineError):
    """An action that needs a model was called on a deployment with no ``llm`` configured."""

    code = "llm_not_configured"
    status = 501


class StructuredRefusal(StructuredCallError):
    """The model declined, in the field its provider reserves for saying so (not a malformed reply)."""

    code = "llm_refused"


def structured_repair_count() -> int:
    """Enforced-mode replies this process had to unwrap from a code fence; should stay at zero."""
    return _repairs["count"]


def parse_json(text: str) -> Any:
    """The reply as JSON; a single surrounding code fence is tolerated (prompt mode often adds one)."""
    fenced = _FENCE.match(text)
    return json.loads(fenced.group(1) if fenced else text)


def prompt_instructions(schema: dict[str, Any]) -> str:
    """How an unenforced schema is asked for in words."""
    return (
        "\n\nReply with a single JSON value and nothing else (no prose, no code fence). "
        "It must validate against this JSON Schema:\n" + json.dumps(schema, separators=(",", ":"))
    )


async def structured_call(
    llm: LLMConfig | LLMClient,
    *,
    system: str,
    user: str,
    schema: dict[str, Any],
    schema_name: str = "reply",
    enforce: bool = True,
    http_client_factory: HttpClientFactory | None = None,
    hooks: Hooks | None = None,
    max_reasks: int = 1,
) -> StructuredResult:
    """One validated JSON value, or ``StructuredCallError`` (``StructuredRefusal`` when the model refused).

    ``llm`` is a config (a client is built for this call and closed after it) or a client the caller
    keeps. ``enforce=True`` sends the schema normalised to the portable subset (``SchemaError``
    before any request when it falls outside); ``enforce=False`` sends no schema, asks for JSON in
    words and validates against the schema exactly as written (``mode="prompt"``). Provider
    failures (unreachable, rejected, retries exhausted) propagate as ``ProviderError``: the provider
    already retried them. ``max_reasks`` (0 to 3) is how many re-asks the prompt path may spend.
    """
    if isinstance(max_reasks, bool) or not isinstance(max_reasks, int) or not 0 <= max_reasks <= 3:
        raise ValueError("max_reasks must be an integer from 0 to 3")
    checked = strict_portable(schema) if enforce else lint_unenforced(schema)
    call = _Call(schema_name, enforce, hooks or Hooks(), max_reasks)
    if isinstance(llm, LLMConfig):
        client = build_llm(llm, http_client_factory)
        try:
            return await call.run(client, system, user, checked)
        finally:
            await client.aclose()
    return await call.run(llm, system, user, checked)


@dataclass
class _Call:
    name: str
    enforce: bool
    hooks: Hooks
    max_reasks: int

    async def report(self, stage: str, reason: str, text: str, *, mode: Mode, attempt: int) -> None:
        context = {"stage": stage, "mode": mode, "attempt": attempt, "schema_name": self.name}
        event = ErrorEvent(stage, self.name, None, reason, text, attempt=attempt, context=context)
        await self.hooks.emit("on_error", event)

    async def failed(self, exc: ContextEngineError, *, mode: Mode, attempt: int) -> None:
        """The attempt's event and the call's terminal one (this attempt was the last)."""
        await self.report("structured_call_attempt", exc.code, exc.message, mode=mode, attempt=attempt)
        await self.report("structured_call", exc.code, exc.message, mode=mode, attempt=attempt)

    async def run(self, llm: LLMClient, system: str, user: str, schema: dict[str, Any]) -> StructuredResult:
        messages: list[dict[str, str]] = [{"role": "user", "content": user}]
        sent_system = system if self.enforce else system + prompt_instructions(schema)
        tokens = sent = wrote = 0
        attempt = 0
        mode: Mode = "prompt"
        name = self.name
        while True:
            attempt += 1
            try:
                reply = await llm.complete(
                    system=sent_system, messages=messages, schema=schema if self.enforce else None, schema_name=name
                )
            except ProviderError as exc:
                failure: ContextEngineError = exc
                if _REFUSED in exc.message:
                    failure = StructuredRefusal(
                        f"the model refused to answer the {name!r} request",
                        mode=mode,
                        attempts=attempt,
                        tokens=tokens,
                        raw="",
                        input_tokens=sent,
                        output_tokens=wrote,
                    )
                await self.failed(failure, mode=mode, attempt=attempt)
                if failure is exc:
                    raise
                raise failure from None
            tokens += reply.tokens
            sent += reply.input_tokens
            wrote += reply.output_tokens
            mode = reply.mode if self.enforce else "prompt"
            enforced = mode in ("native", "tool")
            value, errors, repaired = _read(reply.text, schema, enforced=enforced)
            if repaired:
                await self.report(
                    "structured_call_repair",
                    "llm_reply_not_json",
                    f"the provider enforced the {name!r} schema but its reply was not plain JSON",
                    mode=mode,
                    attempt=attempt,
                )
            if not errors:
                return StructuredResult(value, mode, attempt, tokens, sent, wrote)
            error = StructuredCallError(
                f"the model's reply did not match the {name!r} schema after {attempt} attempt(s) "
                f"(mode {mode}): " + "; ".join(errors),
                mode=mode,
                attempts=attempt,
                tokens=tokens,
                raw=reply.text,
                input_tokens=sent,
                output_tokens=wrote,
            )
            if mode != "prompt" or attempt > self.max_reasks:
                await self.failed(error, mode=mode, attempt=attempt)
                raise error
            await self.report("structured_call_attempt", error.code, error.message, mode=mode, attempt=attempt)
            messages = [
                *messages,
                {"role": "assistant", "content": reply.text or "(empty reply)"},
                {
                    "role": "user",
                    "content": "That reply was not valid: "
                    + "; ".join(errors)
                    + ". Reply again with only the JSON, valid against the schema.",
                },
            ]


def _read(text: str, schema: dict[str, Any], *, enforced: bool) -> tuple[Any, list[str], bool]:
    """The value, its validation errors, and whether an enforced reply was not plain JSON."""
    try:
        value = json.loads(text)
    except ValueError:
        try:
            value = parse_json(text)
        except ValueError as exc:
            return None, [f"the reply is not valid JSON ({getattr(exc, 'msg', exc)})"], enforced
        if enforced:
            _repairs["count"] += 1
        return value, validate(value, schema), enforced
    return value, validate(value, schema), False

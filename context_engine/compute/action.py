"""The compute action: the model writes code over the frames, the checker vets it, a worker runs it.

One rewrite, and only for two causes: code the static check refused, and a frame key that does not
exist. Any other runtime error is reported, not retried: a program that ran and failed on the data
is an answer the caller should see. ``attempts`` counts code-generation calls (1 or 2) and
``provider_tokens`` sums both.

Redaction: the frames are masked (every text cell, every header, every key) before the model sees
a single value, and the returned dict (code included) is swept again on the way out. A host
``runner`` replaces the whole action; it is never handed the policy, and what it returns is swept.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.compute import codegen
from context_engine.compute.checker import check_code
from context_engine.compute.errors import ComputeDisabled, NoFrames, UnsafeCode
from context_engine.compute.frames import load_stored_frames, mask_frames, require_pandas
from context_engine.compute.worker import WorkerOutcome, run_in_worker
from context_engine.config import ComputeConfig, ContextEngineConfig
from context_engine.errors import ContextEngineError
from context_engine.hooks import ErrorEvent, Hooks, UsageEvent
from context_engine.llm.base import HttpClientFactory
from context_engine.llm.structured import LLMNotConfigured, structured_call
from context_engine.redaction.apply import Redactor
from context_engine.storage.predicates import ReadScope
from context_engine.validation import check_question

if TYPE_CHECKING:
    import pandas as pd

#: ``code_runner(code, {"dfs": frames}, timeout)`` -> ``{"result", "stdout", "error"}``, sync or async:
#: the host's own isolation (a container, a remote sandbox) in place of the built-in worker
CodeRunner = Callable[[str, dict[str, Any], float], Awaitable[dict[str, Any]] | dict[str, Any]]
#: ``await runner(instruction, source_ids=, document_ids=, principals=)`` -> dict: replaces the action
ComputeRunner = Callable[..., Awaitable[dict[str, Any]]]

OFF_MESSAGE = (
    "compute is off: code execution is not enabled on this deployment "
    "(set compute.enable_code_execution=True, or pass a code_runner)"
)
MAX_QUESTION_CHARS = 4000


async def compute_over_frames(
    frames: dict[str, pd.DataFrame],
    question: str,
    *,
    config: ContextEngineConfig,
    settings: ComputeConfig | None = None,
    code_runner: CodeRunner | None = None,
    redactor: Redactor | None = None,
    documents_used: Sequence[str] = (),
    hooks: Hooks | None = None,
    http_client_factory: HttpClientFactory | None = None,
) -> dict[str, Any]:
    """Answer ``question`` by code the model writes over ``frames`` (``{key: DataFrame}``).

    Off (``ComputeDisabled``) unless ``settings.enable_code_execution`` or a ``code_runner`` is
    given; ``LLMNotConfigured`` without ``config.llm``; ``NoFrames`` for an empty dict. Returns
    ``success``, ``result``, ``code``, ``stdout``, ``error`` (+ ``error_code``), ``execution_time``,
    ``documents_used``, ``frames`` (the keys the code saw), ``provider_tokens`` and ``attempts``.
    ``hooks.on_error`` fires once per failed attempt (stage ``compute_codegen`` for the model or the
    checker, ``compute_run`` for the code; the event's ``attempt`` is N and its text starts with
    ``attempt N:``), the model call's own ``structured_call*`` events besides, and
    ``hooks.on_usage`` once with the tokens of every attempt.
    """
    settings = settings or config.compute
    question = check_question(question, "question", MAX_QUESTION_CHARS)
    if not settings.enable_code_execution and code_runner is None:
        raise ComputeDisabled(OFF_MESSAGE)
    if config.llm is None:
        raise LLMNotConfigured("compute needs an LLM to write its code: configure the llm section")
    if not frames:
        raise NoFrames("there are no dataframes to compute over")
    require_pandas()
    visible = mask_frames(frames, redactor)
    used = [str(d) for d in documents_used]
    tokens = sent = wrote = 0
    attempts = 0
    code = ""
    outcome: WorkerOutcome | None = None
    error: tuple[str, str] | None = None
    prompt = codegen.first_prompt(question, visible)
    failures: list[ErrorEvent] = []

    def failed(stage: str, error_code: str, message: str) -> tuple[str, str]:
        text = redactor.text(message) if redactor is not None else message
        context = {"stage": stage, "attempt": attempts}
        event = ErrorEvent(stage, "compute", None, error_code, f"attempt {attempts}: {text}", attempts, context)
        failures.append(event)
        return error_code, message

    while attempts < 2:
        attempts += 1
        try:
            reply = await structured_call(
                config.llm,
                system=codegen.SYSTEM,
                user=prompt,
                schema=codegen.CODE_SCHEMA,
                schema_name="compute_code",
                http_client_factory=http_client_factory,
                hooks=hooks,
            )
        except ContextEngineError as exc:
            tokens += int(exc.details.get("tokens", 0) or 0)
            sent += int(exc.details.get("input_tokens", 0) or 0)
            wrote += int(exc.details.get("output_tokens", 0) or 0)
            error = failed("compute_codegen", exc.code, f"the model did not produce code: {exc.message}")
            break
        tokens += reply.tokens
        sent += reply.input_tokens
        wrote += reply.output_tokens
        code = str(reply.value["code"])
        try:
            check_code(code)
        except UnsafeCode as refused:
            error = failed("compute_codegen", refused.code, refused.message)
            prompt = codegen.rewrite_prompt(question, visible, code, refused.message)
            continue
        outcome = await _run(code, visible, settings, code_runner)
        error = (
            None
            if outcome.ok
            else failed("compute_run", outcome.error_kind or "runtime", outcome.error or "the code failed")
        )
        if outcome.error_kind == "frame_key":
            prompt = codegen.rewrite_prompt(question, visible, code, outcome.error or "")
            continue
        break
    out = {
        "success": error is None,
        "result": outcome.result if outcome is not None and error is None else None,
        "code": code,
        "stdout": outcome.stdout if outcome is not None else "",
        "error": error[1] if error else None,
        "error_code": error[0] if error else None,
        "execution_time": round(outcome.wall_time, 4) if outcome is not None else None,
        "cpu_time": outcome.cpu_time if outcome is not None else None,
        "documents_used": used,
        "frames": list(visible),
        "provider_tokens": {"llm_input": sent, "llm_output": wrote},
        "attempts": attempts,
    }
    if hooks is not None:
        for event in failures:
            await hooks.emit("on_error", event)
        detail = {"action": "compute", "attempts": attempts}
        await hooks.emit("on_usage", UsageEvent("llm_tokens", tokens, None, detail))
    return redactor.obj(out) if redactor is not None else out


async def compute(
    sql: AsyncEngine,
    question: str,
    *,
    scope: ReadScope,
    config: ContextEngineConfig,
    settings: ComputeConfig | None = None,
    code_runner: CodeRunner | None = None,
    runner: ComputeRunner | None = None,
    redactor: Redactor | None = None,
    hooks: Hooks | None = None,
    http_client_factory: HttpClientFactory | None = None,
) -> dict[str, Any]:
    """``compute_over_frames`` over the spreadsheets in ``scope`` the caller may see, read from storage.

    A host ``runner`` replaces all of it and makes the action available whatever ``settings`` say:
    it gets the instruction and the scope (never the redaction policy), and its reply is swept.
    """
    question = check_question(question, "question", MAX_QUESTION_CHARS)
    if runner is not None:
        reply = await runner(
            question,
            source_ids=list(scope.source_ids) if scope.source_ids is not None else None,
            document_ids=list(scope.document_ids) if scope.document_ids is not None else None,
            principals=list(scope.principals) if scope.principals is not None else None,
        )
        plain = json.loads(json.dumps(reply, default=str))
        return redactor.obj(plain) if redactor is not None else plain
    settings = settings or ComputeConfig()
    if not settings.enable_code_execution and code_runner is None:
        raise ComputeDisabled(OFF_MESSAGE)
    if config.llm is None:
        raise LLMNotConfigured("compute needs an LLM to write its code: configure the llm section")
    require_pandas()
    stored = await load_stored_frames(sql, scope, max_documents=settings.max_documents)
    if not stored.frames:
        raise NoFrames("there is no spreadsheet in scope that you may read")
    return await compute_over_frames(
        stored.frames,
        question,
        config=config,
        settings=settings,
        code_runner=code_runner,
        redactor=redactor,
        documents_used=stored.document_ids,
        hooks=hooks,
        http_client_factory=http_client_factory,
    )


async def _run(
    code: str, frames: dict[str, pd.DataFrame], settings: ComputeConfig, code_runner: CodeRunner | None
) -> WorkerOutcome:
    if code_runner is None:
        return await run_in_worker(code, frames, settings)
    started = time.perf_counter()
    context = {"dfs": {k: f.copy() for k, f in frames.items()}}
    if inspect.iscoroutinefunction(code_runner) or inspect.iscoroutinefunction(type(code_runner).__call__):
        reply = await cast(Awaitable[dict[str, Any]], code_runner(code, context, settings.wall_seconds))
    else:  # a plain function: off the event loop, so a runner that blocks for seconds stalls no other call
        returned: Any = await asyncio.to_thread(code_runner, code, context, settings.wall_seconds)
        reply = await returned if inspect.isawaitable(returned) else returned
    plain = json.loads(json.dumps(reply if isinstance(reply, dict) else {"result": reply}, default=str))
    failed = plain.get("error")
    return WorkerOutcome(
        ok=not failed,
        result=plain.get("result"),
        stdout=str(plain.get("stdout") or ""),
        error=str(failed) if failed else None,
        error_kind=("frame_key" if failed and "no frame named" in str(failed) else "runtime") if failed else None,
        wall_time=time.perf_counter() - started,
    )

"""Host hooks: progress, usage metering, errors and tool calls. The engine never bills or alerts itself.

Every hook may be sync or async. A hook that raises is logged and ignored: an observer must
never be able to fail an ingest.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

log = logging.getLogger("context_engine.hooks")

#: ingest usage events of this context held back until the caller knows their mode (a graph ingest)
_held_ingest_usage: ContextVar[list[Any] | None] = ContextVar("context_engine_held_ingest_usage", default=None)


@contextmanager
def holding_ingest_usage() -> Iterator[list[Any]]:
    """Collect, instead of sending, the ``on_usage`` ingest events made inside the block.

    A graph ingest learns its mode (and why it fell back) only after the pipeline has stored the
    document, so its usage event waits for that answer and is then sent once, complete.
    """
    held: list[Any] = []
    token = _held_ingest_usage.set(held)
    try:
        yield held
    finally:
        _held_ingest_usage.reset(token)


@dataclass
class ProgressEvent:
    stage: Literal["extract", "chunk", "embed"]
    state: Literal["started", "progress", "done"]
    name: str
    document_id: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class UsageEvent:
    kind: str
    units: int
    document_id: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class ErrorEvent:
    stage: str
    name: str
    document_id: str | None
    failure_reason: str
    #: the raw text, for the operator's own logs (hooks are host-side)
    error: str
    #: which try of a retried step failed (1 or 2 for compute and structured calls), else None
    attempt: int | None = None
    #: what the stage knows beside the text, e.g. ``{"stage", "attempt", "mode"}`` of a model call
    context: dict[str, Any] = field(default_factory=dict)


@dataclass
class ToolCallEvent:
    """One ``execute_tool`` call, as audited: arguments, result and error text already redacted."""

    call_id: str
    call_name: str
    tool_id: str | None
    kind: str | None
    principals: list[str] | None
    outcome: str
    duration_ms: float
    approval_scope: str | None = None
    approval_id: str | None = None
    arguments: Any = None
    result: Any = None
    error_code: str | None = None
    error_message: str | None = None


@dataclass
class Hooks:
    on_progress: Callable[[ProgressEvent], Any] | None = None
    on_usage: Callable[[UsageEvent], Any] | None = None
    on_error: Callable[[ErrorEvent], Any] | None = None
    on_tool_call: Callable[[ToolCallEvent], Any] | None = None
    #: ``False`` (``ingest.progress_batches``) keeps ``on_progress`` to ``started``/``done``: a consumer
    #: that cannot ignore an unknown state never sees the per-batch ``"progress"`` events
    batch_progress: bool = True

    async def emit(self, hook: str, event: Any) -> None:
        fn = getattr(self, hook)
        if fn is None:
            return
        if not self.batch_progress and isinstance(event, ProgressEvent) and event.state == "progress":
            return
        held = _held_ingest_usage.get()
        if held is not None and isinstance(event, UsageEvent) and event.kind == "ingest":
            held.append(event)
            return
        try:
            result = fn(event)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("%s hook raised; ignored", hook)

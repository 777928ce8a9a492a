"""The actions a configured model runs over stored documents: a figure over spreadsheets
(``compute``), the same question per document (``map_reduce``), extracted fields (``query_meta``,
``extract_fields``). Each reads under the caller's ACL and is redacted by the output policy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from context_engine import compute as compute_action
from context_engine import document_fields, mapreduce
from context_engine.operations.context import EngineContext
from context_engine.principals import Principals, resolve
from context_engine.redaction import RedactionPolicy
from context_engine.storage.predicates import ReadScope
from context_engine.validation import check_document_id, check_document_ids, check_id_list


async def compute(
    ctx: EngineContext,
    question: str,
    *,
    principals: Principals = None,
    source_ids: Sequence[str] | None = None,
    document_ids: Sequence[str] | None = None,
    settings: Any = None,
    code_runner: Any = None,
    runner: Any = None,
    redaction: RedactionPolicy | None = None,
    redaction_secret_key: str | bytes | None = None,
) -> dict[str, Any]:
    """A figure over every row of the spreadsheets in scope: see :mod:`context_engine.compute`."""
    caller = resolve(principals)
    return await compute_action.compute(
        await ctx.db(),
        question,
        scope=_scope(caller, source_ids, document_ids),
        config=ctx.config,
        settings=settings if settings is not None else ctx.config.compute,
        code_runner=code_runner if code_runner is not None else ctx.code_runner,
        runner=runner,
        redactor=ctx.redactor(caller, redaction, redaction_secret_key),
        hooks=ctx.hooks,
        http_client_factory=ctx.services.http_client_factory,
    )


async def compute_over_frames(
    ctx: EngineContext,
    frames: dict[str, Any],
    question: str,
    *,
    settings: Any = None,
    code_runner: Any = None,
    redaction: RedactionPolicy | None = None,
    redaction_secret_key: str | bytes | None = None,
) -> dict[str, Any]:
    """``compute`` over dataframes the host already holds (no document involved)."""
    return await compute_action.compute_over_frames(
        frames,
        question,
        config=ctx.config,
        settings=settings if settings is not None else ctx.config.compute,
        code_runner=code_runner if code_runner is not None else ctx.code_runner,
        redactor=ctx.redactor(None, redaction, redaction_secret_key),
        hooks=ctx.hooks,
        http_client_factory=ctx.services.http_client_factory,
    )


async def map_reduce(
    ctx: EngineContext,
    instruction: str,
    *,
    principals: Principals = None,
    source_ids: Sequence[str] | None = None,
    document_ids: Sequence[str] | None = None,
    limit: int | None = None,
    runner: Any = None,
    redaction: RedactionPolicy | None = None,
    redaction_secret_key: str | bytes | None = None,
) -> dict[str, Any]:
    """The same question asked of each document in scope: see :mod:`context_engine.mapreduce`."""
    caller = resolve(principals)
    return await mapreduce.map_reduce(
        await ctx.db(),
        instruction,
        scope=_scope(caller, source_ids, document_ids),
        llm=ctx.config.llm,
        limit=limit,
        runner=runner,
        redactor=ctx.redactor(caller, redaction, redaction_secret_key),
        hooks=ctx.hooks,
        http_client_factory=ctx.services.http_client_factory,
    )


async def query_meta(
    ctx: EngineContext,
    question: str,
    *,
    principals: Principals = None,
    source_ids: Sequence[str] | None = None,
    document_ids: Sequence[str] | None = None,
    limit: int = 50,
    redaction: RedactionPolicy | None = None,
    redaction_secret_key: str | bytes | None = None,
) -> dict[str, Any]:
    """The extracted fields a question names, per document: see :mod:`context_engine.document_fields`."""
    caller = resolve(principals)
    return await document_fields.query_meta(
        await ctx.db(),
        question,
        scope=_scope(caller, source_ids, document_ids),
        llm=ctx.config.llm,
        limit=limit,
        redactor=ctx.redactor(caller, redaction, redaction_secret_key),
        http_client_factory=ctx.services.http_client_factory,
    )


async def extract_fields(
    ctx: EngineContext, document_id: str, *, field_hints: dict[str, str] | None = None
) -> dict[str, Any]:
    """Structured extraction for one stored document (the step ingest runs when it is enabled):
    the envelope of :func:`~context_engine.document_fields.extract_structured_data` with ``stored``."""
    return await document_fields.extract_stored_document(
        await ctx.db(),
        check_document_id(document_id),
        llm=ctx.config.llm,
        field_hints=field_hints,
        redactor=ctx.redactor(None, None, None),
        http_client_factory=ctx.services.http_client_factory,
        hooks=ctx.services.hooks,
    )


def _scope(
    caller: tuple[str, ...] | None, source_ids: Sequence[str] | None, document_ids: Sequence[str] | None
) -> ReadScope:
    """What the caller reads: its ACL, narrowed by the source and document ids it named."""
    return ReadScope(caller, check_id_list(source_ids, "source_ids"), check_document_ids(document_ids))

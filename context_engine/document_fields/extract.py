"""Structured extraction: a model reads a stored document and returns its type and its fields.

Opt-in, and run AFTER a document is stored (the engine's ingest calls
:func:`extract_document_fields` with the id, version and chunk texts it just wrote), so a model
failure never fails an ingest: the document is searchable either way, and the fields can be
extracted again later with :func:`extract_stored_document`.

With ``field_hints`` (``{"invoice_date": "date", "total": "number"}``) the schema is built from
the hints and enforced by the provider, so the reply holds EXACTLY those keys, each the hinted
scalar type or null. Without hints the model chooses the keys; that shape cannot be described in
the portable subset, so it is sent unenforced and validated here (flat scalars only).

Every answer is an envelope, so a caller can tell a failed extraction from an empty one: the model
rates how legible the text was (``readability``: ``high``, ``medium`` or ``low``, part of the schema,
so a missing or unknown rating is a reply that failed validation, never a default), and ``quality``
is that rating, or ``"failed"`` with ``failure_reason`` and ``error`` when there was no usable reply
(invalid past ``max_reasks``, the model unreachable) or no readable text to send. A failed
extraction fires exactly one ``structured_extraction`` event on ``hooks.on_error`` (``document_id``,
``mode`` and ``attempts`` in its context), beside the model call's own per-attempt
``structured_call*`` events: attempt telemetry and outcome are different questions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.config import LLMConfig
from context_engine.document_fields.store import save_fields, stored_chunks
from context_engine.errors import ContextEngineError, InvalidRequest, NotFound
from context_engine.hooks import ErrorEvent, Hooks
from context_engine.llm.base import HttpClientFactory
from context_engine.llm.structured import LLMNotConfigured, structured_call
from context_engine.redaction.apply import Redactor

#: hint type -> the JSON type the model must answer with
HINT_TYPES = {"string": "string", "text": "string", "date": "string", "number": "number", "integer": "integer",
              "boolean": "boolean"}  # fmt: skip
_FIELD_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_ ]{0,63}$")
MAX_FIELDS = 50
#: longer keys a model invents are dropped rather than stored as field names
MAX_NAME_CHARS = 64
MAX_CHARS = 12_000
_SCALAR = ["string", "number", "integer", "boolean", "null"]
#: how legible the model found the text; a reply without one of these is invalid
READABILITY = ["high", "medium", "low"]
#: ``quality`` of an extraction that produced no usable reply
FAILED = "failed"

SYSTEM = (
    "You read one document and extract its structured facts. Reply with JSON: document_type is a short "
    "lower-case label for what the document is (invoice, contract, report...), readability rates how "
    "legible the text is (high, medium, or low for garbled or fragmentary text), and fields holds the "
    "facts as flat key/value pairs with scalar values. Dates are ISO-8601 (YYYY-MM-DD); amounts are "
    "numbers without currency symbols. Use null for a field the document does not state."
)


def hinted_schema(field_hints: dict[str, str]) -> dict[str, Any]:
    """The enforced schema for ``field_hints``: exactly those keys, each its scalar type or null."""
    properties: dict[str, Any] = {}
    for name, kind in field_hints.items():
        entry: dict[str, Any] = {"type": [HINT_TYPES[kind], "null"]}
        if kind == "date":
            entry["description"] = "ISO-8601 date, YYYY-MM-DD"
        properties[name] = entry
    return {
        "type": "object",
        "properties": {
            "document_type": {"type": ["string", "null"]},
            "readability": {"type": "string", "enum": READABILITY},
            "fields": {"type": "object", "properties": properties},
        },
    }


#: no hints: the model names the keys, so the schema is validated here rather than enforced
OPEN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "document_type": {"type": ["string", "null"]},
        "readability": {"type": "string", "enum": READABILITY},
        "fields": {"type": "object", "additionalProperties": {"type": _SCALAR}},
    },
    "required": ["document_type", "readability", "fields"],
    "additionalProperties": False,
}


def check_hints(field_hints: Any) -> dict[str, str] | None:
    """``field_hints`` as given, or ``InvalidRequest`` naming the bad entry."""
    if field_hints is None:
        return None
    if not isinstance(field_hints, dict) or not field_hints or len(field_hints) > MAX_FIELDS:
        raise InvalidRequest(f"field_hints must be an object of 1 to {MAX_FIELDS} field names to types")
    for name, kind in field_hints.items():
        if not isinstance(name, str) or not _FIELD_NAME.match(name):
            raise InvalidRequest(f"field name {name!r} must start with a letter and hold letters, digits, _ or spaces")
        if kind not in HINT_TYPES:
            raise InvalidRequest(f"field {name!r}: type must be one of {sorted(HINT_TYPES)}, got {kind!r}")
    return dict(field_hints)


async def extract_document_fields(
    sql: AsyncEngine,
    document_id: str,
    version: int,
    chunk_texts: Sequence[str],
    *,
    llm: LLMConfig | None,
    field_hints: dict[str, str] | None = None,
    redactor: Redactor | None = None,
    http_client_factory: HttpClientFactory | None = None,
    hooks: Hooks | None = None,
    max_reasks: int = 1,
) -> dict[str, Any]:
    """Extract and store one document's fields; returns the envelope with ``stored``.

    ``stored`` is False when that version is no longer current, and when ``quality`` is
    ``"failed"`` (nothing is written, so fields read from an earlier version are never overwritten
    by a failure). The text the model reads is masked by ``redactor`` first (the engine passes its
    output policy with no caller exemptions, since the text leaves the process). Raises
    ``LLMNotConfigured`` and ``InvalidRequest`` for bad hints.
    """
    if llm is None:
        raise LLMNotConfigured("structured extraction needs an LLM: configure the llm section")
    found = await extract_structured_data(
        "\n\n".join(chunk_texts),
        llm=llm,
        field_hints=field_hints,
        redactor=redactor,
        http_client_factory=http_client_factory,
        hooks=hooks,
        max_reasks=max_reasks,
        document_id=document_id,
    )
    stored = found["quality"] != FAILED and await save_fields(
        sql,
        document_id,
        version,
        document_type=found["document_type"],
        fields=found["fields"],
        field_types=found["field_types"],
        mode=found["mode"],
        tokens=found["tokens"],
    )
    return {"document_id": document_id, "version": version, "stored": stored, **found}


async def extract_structured_data(
    text: str,
    *,
    llm: LLMConfig | None,
    field_hints: dict[str, str] | None = None,
    max_reasks: int = 1,
    redactor: Redactor | None = None,
    http_client_factory: HttpClientFactory | None = None,
    hooks: Hooks | None = None,
    document_id: str | None = None,
    **renamed: Any,
) -> dict[str, Any]:
    """A text's extraction envelope: ``quality``, ``readability``, ``document_type``, ``fields``
    (with ``field_types``), ``mode``, ``attempts``, ``tokens``, ``failure_reason`` and ``error``.

    A model that gave no usable reply is ``quality="failed"`` rather than an exception, so a batch
    of documents can carry on; a bad call still raises (``LLMNotConfigured``, ``InvalidRequest``
    for bad hints). ``max_reasks`` is how often an unusable reply on the prompt path is asked again
    (0 to 3); it is not the provider's ``max_retries``, and passing that name here is a
    ``TypeError`` so the two cannot be confused. Nothing is stored.
    """
    if "max_retries" in renamed:
        raise TypeError(
            "extract_structured_data() takes max_reasks= (re-asks after an unusable reply); max_retries is "
            "the provider's retry count and belongs on LLMConfig"
        )
    if renamed:
        raise TypeError(f"extract_structured_data() got unexpected keyword arguments {sorted(renamed)}")
    if llm is None:
        raise LLMNotConfigured("structured extraction needs an LLM: configure the llm section")
    hints = check_hints(field_hints)
    text = text[:MAX_CHARS]
    if redactor is not None:
        text = redactor.text(text) or ""
    if not text.strip():
        failure = NoReadableText("the document holds no readable text to extract fields from")
        return await _failed(failure, hooks, document_id)
    schema = hinted_schema(hints) if hints else OPEN_SCHEMA
    try:
        reply = await structured_call(
            llm,
            system=SYSTEM,
            user=f"Document:\n{text}",
            schema=schema,
            schema_name="document_fields",
            enforce=hints is not None,
            http_client_factory=http_client_factory,
            hooks=hooks,
            max_reasks=max_reasks,
        )
    except LLMNotConfigured:
        raise
    except ContextEngineError as exc:
        return await _failed(exc, hooks, document_id)
    named = ((str(k).strip(), v) for k, v in reply.value["fields"].items())
    fields: dict[str, Any] = dict([(k, v) for k, v in named if 0 < len(k) <= MAX_NAME_CHARS][:MAX_FIELDS])
    readability = reply.value["readability"]
    return {
        "quality": readability,
        "readability": readability,
        "document_type": reply.value.get("document_type"),
        "fields": fields,
        "field_types": {name: _type_of(name, value, hints) for name, value in fields.items()},
        "mode": reply.mode,
        "attempts": reply.attempts,
        "tokens": reply.tokens,
        "failure_reason": None,
        "error": None,
    }


class NoReadableText(ContextEngineError):
    """Nothing left to read once the text was trimmed and masked: no model is asked."""

    code = "no_readable_text"
    status = 422


async def _failed(exc: ContextEngineError, hooks: Hooks | None, document_id: str | None) -> dict[str, Any]:
    """The ``quality="failed"`` envelope, after the one ``structured_extraction`` outcome event."""
    mode, attempts = exc.details.get("mode"), exc.details.get("attempts", 0)
    if hooks is not None:
        context = {"stage": "structured_extraction", "document_id": document_id, "mode": mode, "attempts": attempts}
        event = ErrorEvent("structured_extraction", "document_fields", document_id, exc.code, exc.message,
                           attempts or None, context)  # fmt: skip
        await hooks.emit("on_error", event)
    return {
        "quality": FAILED,
        "readability": None,
        "document_type": None,
        "fields": {},
        "field_types": {},
        "mode": mode,
        "attempts": attempts,
        "tokens": exc.details.get("tokens", 0),
        "failure_reason": exc.code,
        "error": exc.message,
    }


async def extract_stored_document(
    sql: AsyncEngine,
    document_id: str,
    *,
    llm: LLMConfig | None,
    field_hints: dict[str, str] | None = None,
    redactor: Redactor | None = None,
    http_client_factory: HttpClientFactory | None = None,
    hooks: Hooks | None = None,
    max_reasks: int = 1,
) -> dict[str, Any]:
    """:func:`extract_document_fields` for a document already stored (reads its current chunks)."""
    if llm is None:
        raise LLMNotConfigured("structured extraction needs an LLM: configure the llm section")
    found = await stored_chunks(sql, document_id)
    if found is None:
        raise NotFound(f"document {document_id} not found")
    version, texts = found
    return await extract_document_fields(
        sql,
        document_id,
        version,
        texts,
        llm=llm,
        field_hints=field_hints,
        redactor=redactor,
        http_client_factory=http_client_factory,
        hooks=hooks,
        max_reasks=max_reasks,
    )


def _type_of(name: str, value: Any, hints: dict[str, str] | None) -> str:
    if hints is not None:
        return hints[name]
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string" if value is not None else "unknown"

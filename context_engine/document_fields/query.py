"""``query_meta``: the extracted fields a question names, and each document's values for them.

The model only RESOLVES which stored field names the question is about (an enum of the names
that exist in scope, enforced by the provider, so it cannot invent one); the values come straight
from storage under the caller's ACL and are masked on the way out. Nothing is filtered or compared
by value: "invoices over 1,000" returns every invoice's amount, and the comparison is the caller's.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.config import LLMConfig
from context_engine.document_fields.store import documents_with_fields, field_catalogue
from context_engine.errors import InvalidRequest
from context_engine.llm.base import HttpClientFactory
from context_engine.llm.structured import LLMNotConfigured, structured_call
from context_engine.redaction.apply import Redactor
from context_engine.storage.predicates import ReadScope

MAX_QUESTION_CHARS = 4000
MAX_LIMIT = 500
MAX_CATALOGUE = 300

SYSTEM = (
    "You map a question onto the names of stored document fields. Reply with JSON listing every "
    "field name (from the list given, exactly as written) whose values the question needs; an empty "
    "list when none fits."
)


async def query_meta(
    sql: AsyncEngine,
    question: str,
    *,
    scope: ReadScope,
    llm: LLMConfig | None,
    limit: int = 50,
    redactor: Redactor | None = None,
    http_client_factory: HttpClientFactory | None = None,
) -> dict[str, Any]:
    """``question``, ``resolved_fields`` (name, type, documents), ``documents`` (id, source_id, name,
    document_type, structured_data holding only the resolved fields), ``count`` and ``usage``."""
    if not isinstance(question, str) or not question.strip() or len(question) > MAX_QUESTION_CHARS:
        raise InvalidRequest(f"question must be a non-empty string of at most {MAX_QUESTION_CHARS} characters")
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be an integer between 1 and {MAX_LIMIT}")
    if llm is None:
        raise LLMNotConfigured("query_meta needs an LLM to resolve field names: configure the llm section")
    question = question.strip()
    catalogue = (await field_catalogue(sql, scope))[:MAX_CATALOGUE]
    out: dict[str, Any] = {"success": True, "question": question, "resolved_fields": [], "documents": [], "count": 0}
    if not catalogue:
        out["note"] = "no document in scope has extracted fields (structured extraction is off or has not run)"
        out["usage"] = {"kind": "query_meta", "provider_tokens": {"llm": 0}}
        return redactor.obj(out) if redactor is not None else out
    names = sorted({entry["name"] for entry in catalogue})
    listing = "\n".join(f"- {e['name']} ({e['type']}, in {e['documents']} documents)" for e in catalogue)
    reply = await structured_call(
        llm,
        system=SYSTEM,
        user=f"Stored fields:\n{listing}\n\nQuestion: {question}",
        schema=_resolve_schema(names),
        schema_name="resolved_fields",
        http_client_factory=http_client_factory,
    )
    resolved = list(dict.fromkeys(reply.value["fields"]))
    out["resolved_fields"] = [
        {"name": e["name"], "type": e["type"], "documents": e["documents"]} for e in catalogue if e["name"] in resolved
    ]
    rows = await documents_with_fields(sql, scope, resolved, limit) if resolved else []
    out["documents"] = [
        {
            "id": str(row["id"]),
            "source_id": row["source_id"],
            "name": row["name"],
            "document_type": row["document_type"],
            "structured_data": {name: row["fields"].get(name) for name in resolved if name in row["fields"]},
        }
        for row in rows
    ]
    out["count"] = len(out["documents"])
    out["usage"] = {"kind": "query_meta", "provider_tokens": {"llm": reply.tokens}, "mode": reply.mode}
    return redactor.obj(out) if redactor is not None else out


def _resolve_schema(names: list[str]) -> dict[str, Any]:
    """A list of field names, each one of ``names`` (the provider enforces the enum)."""
    return {"type": "object", "properties": {"fields": {"type": "array", "items": {"type": "string", "enum": names}}}}

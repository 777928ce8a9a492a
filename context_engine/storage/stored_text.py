"""The document text kept on its row: assembled from the chunk rows by ``repository.write_document``
and cut there at ``ingest.max_document_text_chars``; a cut leaves ``meta.text_truncated``."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection


async def was_truncated(conn: AsyncConnection, document_id: str) -> bool:
    """Whether the document's stored text was cut when its current version was written."""
    found = await conn.scalar(
        text(
            "SELECT coalesce((meta ->> 'text_truncated')::boolean, false) FROM ce_documents WHERE id = CAST(:d AS uuid)"
        ),
        {"d": document_id},
    )
    return bool(found)


def is_truncated(meta: dict[str, object] | None) -> bool:
    """The same answer from a document row's ``meta`` already read."""
    return bool((meta or {}).get("text_truncated"))

"""The opaque cursor of a page of documents: the (created_at, id) of the page's last row.

``list_documents`` reads rows in that order, so the next page starts strictly after the pair.
"""

from __future__ import annotations

import base64
import uuid
from datetime import datetime
from typing import Any

from context_engine.errors import InvalidCursor


def encode(row: dict[str, Any]) -> str:
    raw = f"{row['created_at'].isoformat()}|{row['id']}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(cursor: str) -> tuple[str, str]:
    """The (created_at, id) a cursor holds; ``InvalidCursor`` for anything a page did not hand out."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created, doc_id = raw.split("|", 1)
        datetime.fromisoformat(created)
        return created, str(uuid.UUID(doc_id))
    except (ValueError, UnicodeDecodeError):
        raise InvalidCursor("cursor is not valid; pass the next_cursor of a previous page") from None

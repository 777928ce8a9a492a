"""The record of one document on its way in, the same for single, many and bulk ingest.

Why one record: the three paths hand a document from check to extraction to storage, and passing
its six fields one by one let each path spell them in its own order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

#: an opened input: its bytes, a path, or a binary file object (read from where it stands)
Source = bytes | Path | IO[bytes]


@dataclass(frozen=True)
class DocumentInput:
    """A checked, opened document and what it is filed under. ``name`` is ``None`` when the caller
    gave none: the ingest names it after its content (:func:`context_engine.ingest.pipeline.unnamed_name`)."""

    source: Source
    name: str | None
    source_id: str
    acl: list[str]
    attributes: dict[str, Any]
    mime: str | None

    def filing(self, content_hash: str | None) -> tuple[str, str, list[str], str | None]:
        """``(source_id, name, acl, content hash)``: what admission looks the document up by."""
        return self.source_id, self.name or "", self.acl, content_hash

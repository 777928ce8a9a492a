"""What makes two ingests or two deletes "the same request" for an idempotency key."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path
from typing import Any

from context_engine.revisions.idempotency import fingerprint

_READ = 1 << 20


def _digest_stream(stream: Any) -> str:
    """SHA-256 of a seekable stream from its current position, which is restored afterwards."""
    start = stream.tell()
    digest = hashlib.sha256()
    try:
        while block := stream.read(_READ):
            digest.update(block if isinstance(block, bytes) else str(block).encode())
    finally:
        stream.seek(start, os.SEEK_SET)
    return digest.hexdigest()


async def content_digest(source: bytes | Path | Any) -> str:
    """SHA-256 of the bytes an ingest will read (what ``open_source`` resolved: bytes, a path or a stream)."""
    if isinstance(source, bytes | bytearray):
        return hashlib.sha256(source).hexdigest()
    if isinstance(source, Path):

        def read_path() -> str:
            with source.open("rb") as handle:
                return hashlib.file_digest(handle, "sha256").hexdigest()

        return await asyncio.to_thread(read_path)
    return await asyncio.to_thread(_digest_stream, source)


def ingest_fingerprint(
    content: str,
    *,
    name: str | None,
    source_id: str,
    acl: list[str],
    attributes: dict[str, Any],
    mime: str | None,
    batch: bool = False,
) -> str:
    """The same content under the same name, source, ACL, attributes and MIME type, embedded the same
    way (``batch``), is the same ingest. ``batch`` enters only when set, so keys stored before it
    existed keep their digests."""
    fields: dict[str, Any] = {
        "content": content,
        "name": name,
        "source_id": source_id,
        "acl": acl,
        "attributes": attributes,
        "mime": mime,
    }
    if batch:
        fields["batch"] = True
    return fingerprint("ingest", fields)


def delete_fingerprint(document_id: str) -> str:
    return fingerprint("delete", {"document_id": document_id})

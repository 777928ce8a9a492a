"""Zip-bomb and corrupt-container defence for the Office formats (DOCX, PPTX, XLSX).

Checked from the central directory alone, before any member is decompressed: a few kilobytes of
upload must not become gigabytes of XML in the parser. The limits are module constants so a
deployment that really ingests huge workbooks can raise them deliberately.
"""

from __future__ import annotations

import zipfile

from context_engine.ingest.extracted import ExtractionFailed
from context_engine.ingest.formats._base import Source

#: Sum of the members' declared uncompressed sizes above which a container is refused.
MAX_UNCOMPRESSED_BYTES = 1 << 30
#: Compression ratio above which a LARGE member is refused (XML compresses ~10-30:1 in practice).
MAX_COMPRESSION_RATIO = 200
#: Members smaller than this are never judged by ratio: a tiny file of spaces is harmless.
RATIO_MIN_MEMBER_BYTES = 10 << 20
#: More members than this is not a document anyone wrote.
MAX_MEMBERS = 50_000


def check_zip(source: Source, what: str) -> None:
    """Raise ``ExtractionFailed`` if ``source`` is not a readable zip, or looks like a zip bomb."""
    with source.open() as stream:
        try:
            with zipfile.ZipFile(stream) as archive:
                members = archive.infolist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError) as exc:
            raise ExtractionFailed(
                f"{source.label} is not a valid {what}: corrupt zip container ({exc})"
            ) from exc
    if len(members) > MAX_MEMBERS:
        raise ExtractionFailed(
            f"{source.label} looks like a zip bomb: {len(members)} members (limit {MAX_MEMBERS})"
        )
    total = sum(member.file_size for member in members)
    if total > MAX_UNCOMPRESSED_BYTES:
        raise ExtractionFailed(
            f"{source.label} looks like a zip bomb: its members expand to {total} bytes "
            f"(limit {MAX_UNCOMPRESSED_BYTES})"
        )
    for member in members:
        if member.file_size < RATIO_MIN_MEMBER_BYTES:
            continue
        ratio = member.file_size / max(member.compress_size, 1)
        if ratio > MAX_COMPRESSION_RATIO:
            raise ExtractionFailed(
                f"{source.label} looks like a zip bomb: {member.filename!r} expands {ratio:.0f}:1 "
                f"to {member.file_size} bytes (limit {MAX_COMPRESSION_RATIO}:1)"
            )

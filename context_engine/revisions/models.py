"""Result shapes of the revision history."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel


class DocumentVersion(BaseModel):
    """One admitted version and the revisions ``[valid_from, valid_to)`` it is visible in
    (``valid_to`` None: it is the current version)."""

    version: int
    name: str
    source_id: str
    content_hash: str
    acl: list[str]
    attributes: dict[str, Any]
    chunk_count: int
    valid_from: int
    valid_to: int | None
    created_at: datetime


class VacuumReport(BaseModel):
    """What ``vacuum_revisions`` removed, and the oldest revision still readable after it."""

    horizon: int
    chunks_removed: int
    versions_removed: int

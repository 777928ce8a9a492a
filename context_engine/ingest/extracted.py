"""What an extractor hands to the chunker: ordered units that keep the document's structure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Unit:
    """One structural block of a document.

    ``section`` is the nearest heading (or slide title, or sheet name), ``page`` the 1-based page
    where the format has pages. ``kind`` is ``text``, ``table``, ``rows`` (CSV rows of a sheet) or
    ``schema`` (a sheet's column summary). A unit whose ``atomic`` is true is never merged with
    its neighbours by the chunker (each slide, each schema chunk).
    """

    text: str
    section: str | None = None
    page: int | None = None
    kind: str = "text"
    atomic: bool = False
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Extracted:
    """The result of extraction. ``units`` may be a generator (spreadsheets stream)."""

    mime: str
    units: Iterable[Unit]
    meta: dict[str, Any] = field(default_factory=dict)


class ExtractionFailed(Exception):
    """Raised by an extractor for a file it cannot read; becomes a ``failed`` document."""

    def __init__(self, message: str, reason: str = "extraction_failed", *, page: int | None = None):
        super().__init__(message)
        self.reason = reason
        #: the page (1-based) the failure is about, where one is
        self.page = page

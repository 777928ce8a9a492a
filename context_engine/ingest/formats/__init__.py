"""Turn a file's bytes into ordered, structure-keeping :class:`~context_engine.ingest.extracted.Unit` s.

``extract(source, name=..., mime=..., max_rows=...)`` detects the format from the CONTENT first
(magic bytes, zip members, HTML/e-mail/JSON sniffing) and the name's extension second, then
dispatches through a registry (:mod:`.dispatch`), so a new format is one function and one
:func:`register` call.

Failure contract: a file that cannot be read raises ``ExtractionFailed`` with the library's own
exception chained as ``__cause__``. Two things pass through unwrapped because callers catch them
by type: ``ImportError`` (a missing optional extra; the message carries the install hint) and
``IngestTooLarge`` (``max_rows``, raised while streaming at the row that passes the limit — so for
the tabular formats it surfaces while iterating ``Extracted.units``, not from ``extract`` itself).
"""

from __future__ import annotations

from context_engine.ingest.extracted import Extracted, ExtractionFailed, Unit
from context_engine.ingest.formats._base import REGISTRY, Extractor, Source, register
from context_engine.ingest.formats.detect import detect_format
from context_engine.ingest.formats.dispatch import MAX_DEPTH, extract, extract_source, registered_formats

__all__ = [
    "MAX_DEPTH",
    "REGISTRY",
    "Extracted",
    "ExtractionFailed",
    "Extractor",
    "Source",
    "Unit",
    "detect_format",
    "extract",
    "extract_source",
    "register",
    "registered_formats",
]

# The built-in formats register themselves on import; the heavy libraries inside each are
# imported only when a file of that format arrives.
from context_engine.ingest.formats import eml as _eml
from context_engine.ingest.formats import html as _html
from context_engine.ingest.formats import jsondoc as _jsondoc
from context_engine.ingest.formats import office as _office
from context_engine.ingest.formats import pdf as _pdf
from context_engine.ingest.formats import tabular as _tabular
from context_engine.ingest.formats import text as _text

del _eml, _html, _jsondoc, _office, _pdf, _tabular, _text

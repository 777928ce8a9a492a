"""HTML: the extractor's registration; the reader and beautifulsoup4 load with the first HTML file."""

from __future__ import annotations

from context_engine.ingest.extracted import Extracted
from context_engine.ingest.formats import detect
from context_engine.ingest.formats._base import Source, extractor


@extractor(detect.HTML)
def extract_html(source: Source) -> Extracted:
    """Structure-keeping text of an HTML page (see :mod:`.html_reader`)."""
    from context_engine.ingest.formats.html_reader import read_html

    return read_html(source)

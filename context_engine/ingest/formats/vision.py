"""Scanned pages and images rendered for the ``vision_llm`` model, and its Markdown read back.

Why a model when one is configured: Tesseract returns a run of words, so a scanned table reaches
the index with its columns lost; a vision model writes the page back as Markdown, headings as
headings and tables as pipe tables, which the Markdown reader turns into sections and table units.
The model is asked through :class:`~context_engine.ingest.formats.page_transcriber.PageTranscriber`
(the ``source.vision`` of an extraction).

Page rasterisation needs the ``vision`` extra (pypdfium2, which bundles its own PDF renderer, and
Pillow). Without it a scanned page is refused with the install hint rather than quietly read by
Tesseract: a deployment that configured a model expects the model's reading.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Generator, Iterator
from typing import Any

from context_engine.ingest.extracted import Extracted, ExtractionFailed, Unit
from context_engine.ingest.formats import detect
from context_engine.ingest.formats._base import Source, no_text
from context_engine.ingest.formats.text import MarkdownPages
from context_engine.llm.base import ImageInput

VISION_HINT = 'install page rasterisation with pip install "pg-context-engine[vision]"'

#: the longest side of a rendered page or a sent image, in pixels: small print stays legible and
#: every provider takes it without scaling it down again
LONG_EDGE = 1600
#: render resolution ceiling for small pages (dots per inch)
MAX_DPI = 200
#: an image file sent as it is when it is already PNG or JPEG, one frame, and no larger than this
PASS_THROUGH_BYTES = 4 * 1024 * 1024

#: pdfium may not be entered from two threads at once, even for different documents. Reentrant: a
#: page generator left unfinished elsewhere can be finalised by the garbage collector on a thread that
#: already holds it (inside a pdfium read callback), and its ``finally`` closes its document under it
_PDFIUM = threading.RLock()


def require_rasteriser(what: str) -> None:
    try:
        import PIL.Image  # noqa: F401
        import pypdfium2  # noqa: F401
    except ImportError:
        raise ExtractionFailed(f"{what}; {VISION_HINT}") from None


def _png(image: Any) -> ImageInput:
    if image.mode not in ("RGB", "L"):
        image = image.convert("RGBA" if "A" in image.getbands() else "RGB")
    out = io.BytesIO()
    # the fastest zlib level: a rendered scan came out no larger than at the default and took 40% less time
    image.save(out, format="PNG", compress_level=1)
    return ImageInput(out.getvalue(), detect.PNG)


def pdf_page_count(source: Source) -> int:
    """How many pages the PDF holds, as pdfium reads it (``ExtractionFailed`` for one it cannot open)."""
    import pypdfium2

    with source.open() as stream:
        with _PDFIUM:
            try:
                document = pypdfium2.PdfDocument(stream)
            except pypdfium2.PdfiumError as exc:
                raise ExtractionFailed(f"{source.label} is not a PDF pdfium can open ({exc})") from None
            try:
                return len(document)
            finally:
                document.close()


def pdf_page_images(source: Source, numbers: list[int]) -> Generator[tuple[int, ImageInput], None, None]:
    """Each listed page (1-based) rendered to PNG, its longest side at most ``LONG_EDGE`` pixels."""
    import pypdfium2

    with source.open() as stream:
        with _PDFIUM:
            document = pypdfium2.PdfDocument(stream)
        try:
            for number in numbers:
                with _PDFIUM:
                    page = document[number - 1]
                    try:
                        width, height = page.get_size()
                        scale = min(MAX_DPI / 72, LONG_EDGE / max(width, height, 1.0))
                        image = page.render(scale=scale).to_pil()
                        encoded = _png(image)
                    finally:
                        page.close()
                yield number, encoded
        finally:
            with _PDFIUM:
                document.close()


def transcribe_pdf_pages(source: Source, numbers: list[int]) -> list[Unit]:
    """Units of the listed scanned pages, as ``vision_llm`` reads them (headings carry across pages)."""
    assert source.vision is not None
    listed = ", ".join(str(number) for number in numbers[:20])
    which = f"page {listed} has" if len(numbers) == 1 else f"pages {listed} have"
    require_rasteriser(f"{source.label}: {which} no text layer (scanned) and vision_llm needs them as images")
    reader = MarkdownPages()
    units: list[Unit] = []
    pages = pdf_page_images(source, numbers)
    try:
        for number, markdown in source.vision.transcribe(pages, source.label):
            units.extend(reader.read(markdown, number, {"transcribed": True}))
    finally:
        pages.close()  # a failed page leaves it unfinished: its document is closed here, not by the collector
    return units


def frame_images(image: Any, raw: bytes) -> Iterator[tuple[int, ImageInput]]:
    """Each frame as PNG (scaled to ``LONG_EDGE``); a small single-frame PNG or JPEG goes as it is."""
    from PIL import ImageSequence

    frames = getattr(image, "n_frames", 1)
    if (
        frames == 1
        and image.format in ("PNG", "JPEG")
        and max(image.size) <= LONG_EDGE
        and len(raw) <= PASS_THROUGH_BYTES
    ):
        yield 1, ImageInput(raw, detect.PNG if image.format == "PNG" else detect.JPEG)
        return
    for number, frame in enumerate(ImageSequence.Iterator(image), start=1):
        page = frame.copy()
        page.thumbnail((LONG_EDGE, LONG_EDGE))
        yield number, _png(page)


def transcribe_image(source: Source) -> Extracted:
    """An image file read by ``vision_llm``: one page per frame (a multi-page TIFF has several)."""
    assert source.vision is not None
    require_rasteriser(f"{source.label} is an image, and vision_llm needs Pillow to read it")
    from PIL import Image

    raw = source.read()
    tokens_before = source.vision.tokens
    reader = MarkdownPages()
    units: list[Unit] = []
    with Image.open(io.BytesIO(raw)) as image:
        mime = Image.MIME.get(image.format or "", detect.PNG)
        frames = getattr(image, "n_frames", 1)
        for number, markdown in source.vision.transcribe(frame_images(image, raw), source.label):
            units.extend(reader.read(markdown, number, {"transcribed": True}))
    if not units:
        raise no_text(source)
    meta = {"pages": frames, **vision_meta(source, list(range(1, frames + 1)), tokens_before)}
    return Extracted(mime=mime, units=units, meta=meta)


def vision_meta(source: Source, pages: list[int], tokens_before: int) -> dict[str, Any]:
    """What the document's meta records of its transcription: which pages, by which model, at what cost."""
    assert source.vision is not None
    tokens = source.vision.tokens - tokens_before
    return {"vision_pages": pages, "vision_model": source.vision.model, "vision_tokens": tokens}

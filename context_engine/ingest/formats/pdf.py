"""PDF (pypdf) and images, with a vision model or Tesseract OCR for pages that have no text layer.

Every PDF unit carries its 1-based ``page``; ``meta["pages"]`` is the page count. A page with no
text but with an image is a scan. With ``vision_llm`` configured it is rendered and transcribed to
Markdown by that model (:mod:`vision`; ``meta["vision_pages"]``). Otherwise it is OCR'd when the
``[ocr]`` extra and the Tesseract binary are present, and otherwise the WHOLE file fails with the
install hint — indexing only the pages that happened to have text would be a document that
answers wrongly and looks healthy. A page with neither text nor images is blank and has no units.

With the ``[pdf]`` extra (pdfplumber), a text page that holds ruled tables keeps them as Markdown
tables (:mod:`pdf_tables`); without it, the text layer is read as plain text.

A PDF whose ``%%EOF`` marker is missing from its tail is refused as truncated: pypdf's lenient
mode would otherwise recover whatever pages it can and silently drop the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from context_engine.ingest.extracted import Extracted, ExtractionFailed, Unit
from context_engine.ingest.formats import detect, pdf_tables
from context_engine.ingest.formats._base import Source, extractor, no_text
from context_engine.ingest.formats.text import paragraphs

OCR_HINT = (
    'install the OCR extra with pip install "pg-context-engine[ocr]" and the Tesseract OCR engine '
    "itself (e.g. apt-get install tesseract-ocr, or brew install tesseract)"
)

#: How far from the end the ``%%EOF`` marker may sit (PDF writers append a little whitespace).
EOF_WINDOW = 2048

OcrFn = Callable[[Any], str]


def ocr_engine() -> OcrFn | None:
    """``image -> text`` through pytesseract, or None when the extra or the binary is missing."""
    try:
        import pytesseract
    except ImportError:
        return None
    try:
        pytesseract.get_tesseract_version()
    except Exception:  # the Python package is there, the tesseract binary is not
        return None

    def run(image: Any) -> str:
        return str(pytesseract.image_to_string(image))

    return run


def _ocr_unavailable(what: str) -> ExtractionFailed:
    return ExtractionFailed(f"{what} needs OCR, which is not available here: {OCR_HINT}")


def _page_has_images(page: Any, depth: int = 0) -> bool:
    """True when the page draws at least one image XObject (checked without decoding it)."""
    if depth > 8:  # forms inside forms; a self-referencing one must not recurse forever
        return False
    try:
        resources = page.get("/Resources")
        resources = resources.get_object() if resources is not None else None
        xobjects = resources.get("/XObject") if resources is not None else None
        if xobjects is None:
            return False
        xobjects = xobjects.get_object()
        for ref in xobjects.values():
            xobject = ref.get_object()
            if xobject.get("/Subtype") == "/Image":
                return True
            if xobject.get("/Subtype") == "/Form" and _page_has_images(xobject, depth + 1):
                return True
    except Exception:
        return False
    return False


@extractor(detect.PDF)
def extract_pdf(source: Source) -> Extracted:
    """Text per page with its page number; scanned pages OCR'd or refused with the install hint."""
    try:
        from pypdf import PdfReader
    except ImportError as exc:  # pragma: no cover - the office extra is installed in tests
        raise ImportError('reading PDF needs pypdf: pip install "pg-context-engine[office]"') from exc

    size = source.size
    with source.open() as stream:
        stream.seek(max(0, size - EOF_WINDOW))
        tail = stream.read()
        if b"%%EOF" not in tail:
            raise ExtractionFailed(
                f"{source.label} is a truncated or corrupt PDF (no %%EOF marker at its end)"
            )
        stream.seek(0)
        try:
            reader = PdfReader(stream, strict=False)
            if reader.is_encrypted and not reader.decrypt(""):
                raise ExtractionFailed(f"{source.label} is a password-protected PDF")
            pages = list(reader.pages)
        except ExtractionFailed:
            raise
        except Exception as exc:
            raise ExtractionFailed(f"{source.label} is a truncated or corrupt PDF: {exc}") from exc
        if not pages:
            raise ExtractionFailed(f"{source.label} is a PDF with no pages")

        units: list[Unit] = []
        text_pages: list[int] = []
        scanned: list[tuple[int, Any]] = []
        for number, page in enumerate(pages, start=1):
            try:
                text = page.extract_text() or ""
            except Exception as exc:
                raise ExtractionFailed(f"{source.label}: page {number} cannot be read: {exc}") from exc
            if text.strip():
                text_pages.append(number)
                units.extend(Unit(text=block, page=number) for block in paragraphs(text))
            elif _page_has_images(page):
                scanned.append((number, page))

        ocr_pages: list[int] = []
        if scanned and source.vision is None:
            engine = ocr_engine()
            if engine is None:
                listed = ", ".join(str(number) for number, _ in scanned[:20])
                which = f"page {listed} has" if len(scanned) == 1 else f"pages {listed} have"
                raise _ocr_unavailable(f"{source.label}: {which} no text layer (scanned) and")
            for number, page in scanned:
                text = "\n\n".join(engine(image.image) for image in page.images)
                ocr_pages.append(number)
                units.extend(Unit(text=block, page=number, meta={"ocr": True}) for block in paragraphs(text))
        meta: dict[str, Any] = {"pages": len(pages)}
        if ocr_pages:
            meta["ocr_pages"] = ocr_pages
        try:
            title = reader.metadata.title if reader.metadata is not None else None
        except Exception:
            title = None
        if title:
            meta["title"] = str(title)
    if scanned and source.vision is not None:
        # after pypdf is done with the stream: the pages are rendered from a pass of their own
        from context_engine.ingest.formats import vision

        tokens_before = source.vision.tokens
        numbers = [number for number, _ in scanned]
        units.extend(vision.transcribe_pdf_pages(source, numbers))
        meta.update(vision.vision_meta(source, numbers, tokens_before))
    if text_pages and pdf_tables.available():
        # a second pass over the file, after pypdf is done with the stream (a caller's file is shared)
        try:
            tables = pdf_tables.table_pages(source, text_pages)
        except Exception as exc:  # pdfplumber refuses a file pypdf read: keep the plain text, say so
            tables = {}
            meta["tables_unread"] = type(exc).__name__
        if tables:
            units = [unit for unit in units if unit.page not in tables]
            units.extend(unit for number in sorted(tables) for unit in tables[number])
            meta["table_pages"] = sorted(tables)
    units.sort(key=lambda unit: unit.page or 0)  # stable: a page's units keep their order
    if not units:
        raise no_text(source)
    return Extracted(mime=detect.PDF, units=units, meta=meta)


def extract_image(source: Source) -> Extracted:
    """An image is all scan: read by ``vision_llm`` when one is configured, else OCR every frame (a
    multi-page TIFF is one frame per page)."""
    if source.vision is not None:
        from context_engine.ingest.formats.vision import transcribe_image

        return transcribe_image(source)
    engine = ocr_engine()
    if engine is None:
        raise _ocr_unavailable(f"{source.label} is an image, so its text")
    from PIL import Image, ImageSequence

    units: list[Unit] = []
    with source.open() as stream, Image.open(stream) as image:
        mime = Image.MIME.get(image.format or "", detect.PNG)
        frames = 0
        for number, frame in enumerate(ImageSequence.Iterator(image), start=1):
            frames = number
            text = engine(frame.copy())
            units.extend(Unit(text=block, page=number, meta={"ocr": True}) for block in paragraphs(text))
    if not units:
        raise no_text(source)
    return Extracted(mime=mime, units=units, meta={"pages": frames, "ocr_pages": list(range(1, frames + 1))})


for _mime in sorted(detect.IMAGES):
    extractor(_mime)(extract_image)

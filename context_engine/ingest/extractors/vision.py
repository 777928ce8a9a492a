"""Scanned pages and images transcribed to Markdown by the ``vision_llm`` model.

Why a model when one is configured: Tesseract returns a run of words, so a scanned table reaches
the index with its columns lost; a vision model writes the page back as Markdown, headings as
headings and tables as pipe tables, which the Markdown reader turns into sections and table units.

Extraction is synchronous and runs in a worker thread, while the model client lives on the
engine's event loop. :class:`PageTranscriber` bridges the two: each page's call is scheduled on
that loop and the worker waits for its answer, with at most ``vision_llm.concurrency`` pages in
flight. Extraction happens before ingest opens any transaction, so no pooled connection is held
while the model works. Answers are remembered by the image's digest for the life of one ingest,
so a large document's second extraction pass pays for no page twice.

The model sees the raw page (there is no redacting an image before it is read); its reply is
untrusted text: a wrapping code fence and control characters are removed here, and the ingest
pipeline scrubs it like any other extracted text before it is stored, indexed or embedded.

Page rasterisation needs the ``vision`` extra (pypdfium2, which bundles its own PDF renderer, and
Pillow). Without it a scanned page is refused with the install hint rather than quietly read by
Tesseract: a deployment that configured a model expects the model's reading.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import io
import re
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from context_engine.config import VisionLLMConfig, vision_section
from context_engine.errors import ConfigError, ContextEngineError
from context_engine.ingest.extracted import Extracted, ExtractionFailed, Unit
from context_engine.ingest.extractors import detect
from context_engine.ingest.extractors._base import Source, no_text
from context_engine.ingest.extractors.text import MarkdownPages
from context_engine.llm.base import HttpClientFactory, ImageInput, LLMClient, LLMReply

VISION_HINT = 'install page rasterisation with pip install "pg-context-engine[vision]"'

#: the longest side of a rendered page or a sent image, in pixels: small print stays legible and
#: every provider takes it without scaling it down again
LONG_EDGE = 1600
#: render resolution ceiling for small pages (dots per inch)
MAX_DPI = 200
#: an image file sent as it is when it is already PNG or JPEG, one frame, and no larger than this
PASS_THROUGH_BYTES = 4 * 1024 * 1024

SYSTEM_PROMPT = (
    "You transcribe one scanned page into Markdown for a search index. Write out all of the text on the page "
    "in reading order, word for word; do not summarise, explain, translate or add anything. Mark headings with "
    "#, keep lists as lists, and write every table as a Markdown pipe table whose first row is its header. "
    "Do not describe pictures. Reply with the Markdown alone, without a code fence, and with nothing at all "
    "if the page holds no text."
)
USER_PROMPT = "Transcribe this page."

#: pdfium may not be entered from two threads at once, even for different documents
_PDFIUM = threading.Lock()
_FENCED = re.compile(r"\A\s*(`{3,}|~{3,})[\w-]*[ \t]*\n(.*?)\n?\1\s*\Z", re.DOTALL)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def build_vision_llm(config: VisionLLMConfig, http_client_factory: HttpClientFactory | None = None) -> LLMClient:
    """The ``vision_llm`` client; a setting it lacks is named under ``vision_llm``, not ``llm``."""
    from context_engine.llm.factory import build_llm

    try:
        return build_llm(config, http_client_factory)
    except ConfigError as exc:
        raise ConfigError(vision_section(exc.message), code=exc.code, details=exc.details) from None


def clean_reply(text: str) -> str:
    """The model's Markdown without a wrapping fence, control characters or unencodable code points."""
    fenced = _FENCED.match(text)
    if fenced:
        text = fenced.group(2)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL.sub("", text).encode("utf-8", "replace").decode("utf-8")
    return text.strip()


class PageTranscriber:
    """One ingest's page transcriptions, asked of ``llm`` on ``loop`` from a worker thread."""

    def __init__(self, llm: LLMClient, config: VisionLLMConfig, loop: asyncio.AbstractEventLoop):
        self.llm = llm
        self.concurrency = config.concurrency
        self.max_tokens = config.max_tokens
        #: the most one page may take: every attempt at its timeout, plus room for backoff
        self.page_deadline = (config.max_retries + 1) * config.timeout + 60.0
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._memo: dict[str, str] = {}
        #: tokens the model reported for the pages transcribed so far
        self.tokens = 0

    @property
    def model(self) -> str:
        return f"{self.llm.provider}:{self.llm.model}"

    def transcribe(self, pages: Iterable[tuple[int, ImageInput]], label: str) -> Iterator[tuple[int, str]]:
        """``(page, markdown)`` in page order; the first page that fails raises ``ExtractionFailed``."""
        if threading.get_ident() == self._loop_thread:
            raise RuntimeError("page transcription waits on the event loop; extract in a worker thread")
        window: deque[tuple[int, str, concurrent.futures.Future[LLMReply] | None]] = deque()
        try:
            for number, image in pages:
                key = hashlib.sha256(image.data).hexdigest()
                future = None if key in self._memo else self._submit(image)
                window.append((number, key, future))
                while len(window) >= self.concurrency:
                    yield self._settle(window.popleft(), label)
            while window:
                yield self._settle(window.popleft(), label)
        finally:
            for _, _, future in window:
                if future is not None:
                    future.cancel()

    def _submit(self, image: ImageInput) -> concurrent.futures.Future[LLMReply]:
        call = self.llm.complete_with_images(system=SYSTEM_PROMPT, prompt=USER_PROMPT, images=[image])
        return asyncio.run_coroutine_threadsafe(call, self._loop)

    def _settle(
        self, entry: tuple[int, str, concurrent.futures.Future[LLMReply] | None], label: str
    ) -> tuple[int, str]:
        number, key, future = entry
        if future is None:
            return number, self._memo[key]
        failed = f"{label}: vision_llm ({self.model}) could not transcribe page {number}"
        try:
            reply = future.result(timeout=self.page_deadline)
        except ContextEngineError as exc:
            raise ExtractionFailed(
                f"{failed}: {vision_section(exc.message)}", reason="vision_failed", page=number
            ) from exc
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ExtractionFailed(
                f"{failed}: no answer within {self.page_deadline:.0f} s", reason="vision_failed", page=number
            ) from None
        except Exception as exc:  # a bug below the provider's own error handling: named by type only
            raise ExtractionFailed(f"{failed} ({type(exc).__name__})", reason="vision_failed", page=number) from exc
        self.tokens += reply.tokens
        if reply.truncated:
            raise ExtractionFailed(
                f"{label}: the transcription of page {number} was cut off at vision_llm.max_tokens "
                f"({self.max_tokens}); raise it",
                reason="vision_failed",
                page=number,
            )
        text = clean_reply(reply.text)
        self._memo[key] = text
        return number, text


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


def pdf_page_images(source: Source, numbers: list[int]) -> Iterator[tuple[int, ImageInput]]:
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
    for number, markdown in source.vision.transcribe(pdf_page_images(source, numbers), source.label):
        units.extend(reader.read(markdown, number, {"transcribed": True}))
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

"""Vision transcription as functions of their own: images and PDF pages written out as Markdown.

Ingest sends a scanned page to ``vision_llm`` by itself; these are the same transcriber
(:class:`~context_engine.ingest.formats.page_transcriber.PageTranscriber`: its prompt, page rendering,
concurrency, per-page deadline, reply cleaning and digest memo) for a host that wants the text
without storing a document. A failure reaches ``hooks.on_error`` as ingest reports it (stage
``extract``, reason ``vision_failed``, the page in the context) and is then raised as
:class:`VisionFailed`; the model's spend goes to ``hooks.on_usage`` (``llm_tokens``, action
``vision``) whether or not every page came back.

The model sees the raw image (there is no redacting a picture before it is read); its reply is
untrusted text, cleaned of a wrapping fence and control characters and nothing more, so mask it
with your redaction policy before it reaches anyone else.
"""

from __future__ import annotations

import asyncio
import io
import pathlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from context_engine.config import LLMConfig, VisionLLMConfig
from context_engine.errors import ContextEngineError, InvalidRequest
from context_engine.hooks import ErrorEvent, Hooks, UsageEvent
from context_engine.ingest.extracted import ExtractionFailed
from context_engine.ingest.formats._base import Source
from context_engine.ingest.formats.page_transcriber import PageTranscriber, build_vision_llm
from context_engine.ingest.formats.vision import (
    frame_images,
    pdf_page_count,
    pdf_page_images,
    require_rasteriser,
)
from context_engine.llm.base import HttpClientFactory, ImageInput

PdfInput = bytes | bytearray | memoryview | pathlib.Path | str | IO[bytes]


class VisionFailed(ContextEngineError):
    """A page the model could not transcribe (or the rasteriser is not installed); names the page."""

    code = "vision_failed"
    status = 502


@dataclass
class TranscribedPage:
    #: 1-based: the PDF's page number, or the image's place in the input (each frame of a multi-frame
    #: image counts as one)
    page: int
    #: the model's Markdown; empty when it found no text on the page
    markdown: str


@dataclass
class Transcription:
    pages: list[TranscribedPage] = field(default_factory=list)
    #: ``provider:model`` that read the pages
    model: str = ""
    #: tokens the model reported for these pages
    tokens: int = 0

    @property
    def text(self) -> str:
        """Every page's Markdown in order, blank-line separated (empty pages left out)."""
        return "\n\n".join(page.markdown for page in self.pages if page.markdown)


async def extract_text_from_images(
    images: Sequence[bytes | ImageInput],
    *,
    llm: LLMConfig,
    hooks: Hooks | None = None,
    http_client_factory: HttpClientFactory | None = None,
    name: str = "images",
) -> Transcription:
    """Each image (PNG, JPEG, or anything Pillow reads: a multi-page TIFF is one page per frame)
    transcribed to Markdown by ``llm`` (``config.vision_llm``, or any ``LLMConfig`` naming a model that
    reads images). ``name`` is how messages and events name the input."""
    if isinstance(images, bytes | bytearray | memoryview | ImageInput) or not isinstance(images, Sequence):
        raise InvalidRequest("images must be a list of images (bytes or ImageInput)")
    if not images:
        return Transcription(model=_model_name(llm))
    if not all(isinstance(image, ImageInput) for image in images):
        _rasteriser(f"{name!r}: reading images for vision_llm needs Pillow")
    _check_images(images, name)

    def pages() -> Iterator[tuple[int, ImageInput]]:
        from PIL import Image

        number = 0
        for image in images:
            if isinstance(image, ImageInput):
                number += 1
                yield number, image
                continue
            raw = bytes(image)
            with Image.open(io.BytesIO(raw)) as opened:
                for _, frame in frame_images(opened, raw):
                    number += 1
                    yield number, frame

    return await _transcribe(pages, llm, hooks, http_client_factory, repr(name))


async def extract_pdf_pages(
    pdf: PdfInput,
    pages: Sequence[int] | None = None,
    *,
    llm: LLMConfig,
    hooks: Hooks | None = None,
    http_client_factory: HttpClientFactory | None = None,
    name: str | None = None,
) -> Transcription:
    """The listed pages of a PDF (1-based; every page when ``pages`` is None) rendered and transcribed
    to Markdown by ``llm``. Every listed page goes to the model, text layer or not: ingest alone
    decides per page, sending only the scanned ones. ``pdf`` is bytes, a path or a binary file."""
    source = Source.of(pdf, name=name, max_rows=None)
    _rasteriser(f"{source.label}: rendering PDF pages for vision_llm needs pypdfium2 and Pillow")
    try:
        count = await asyncio.to_thread(pdf_page_count, source)
    except ExtractionFailed as exc:
        raise InvalidRequest(str(exc)) from None
    numbers = list(range(1, count + 1)) if pages is None else list(pages)
    bad = [n for n in numbers if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= count]
    if bad:
        raise InvalidRequest(f"{source.label} has pages 1 to {count}; {bad[:5]} are not among them")
    if len(set(numbers)) != len(numbers):
        raise InvalidRequest("pages lists a page more than once")
    return await _transcribe(lambda: pdf_page_images(source, numbers), llm, hooks, http_client_factory, source.label)


def _check_images(images: Sequence[bytes | ImageInput], name: str) -> None:
    """Every image readable (its header, which is all ``Image.open`` parses) before any page is paid for."""
    from PIL import Image, UnidentifiedImageError

    for position, image in enumerate(images, start=1):
        if isinstance(image, ImageInput):
            continue
        if not isinstance(image, bytes | bytearray | memoryview):
            raise InvalidRequest(f"{name!r}: image {position} must be bytes or an ImageInput")
        try:
            with Image.open(io.BytesIO(bytes(image))):
                pass
        except (UnidentifiedImageError, OSError):
            raise InvalidRequest(f"{name!r}: image {position} is not an image Pillow can read") from None


def _vision_config(llm: LLMConfig) -> VisionLLMConfig:
    """``llm`` as a ``vision_llm`` section: what it sets is kept, the rest takes the page-sized defaults."""
    if isinstance(llm, VisionLLMConfig):
        return llm
    if not isinstance(llm, LLMConfig):
        raise InvalidRequest("llm must be an LLMConfig (config.vision_llm, or one naming a model that reads images)")
    return VisionLLMConfig.model_validate(llm.model_dump(exclude_unset=True))


def _model_name(llm: LLMConfig) -> str:
    return f"{llm.provider}:{llm.model}" if llm.model else llm.provider


def _rasteriser(what: str) -> None:
    try:
        require_rasteriser(what)
    except ExtractionFailed as exc:
        raise VisionFailed(str(exc), code=exc.reason) from None


def _decoded(pages: Iterator[tuple[int, ImageInput]], label: str) -> Iterator[tuple[int, ImageInput]]:
    """``pages`` with a page that cannot be decoded or rendered (a header that lied) as ``InvalidRequest``."""
    number = 0
    while True:
        try:
            number, image = next(pages)
        except StopIteration:
            return
        except ContextEngineError:
            raise
        except Exception as exc:  # Pillow's and pdfium's own errors, named by type only
            done = f" after page {number}" if number else ""
            raise InvalidRequest(f"{label}: a page{done} cannot be decoded ({type(exc).__name__})") from None
        yield number, image


async def _transcribe(
    pages: Any, llm: LLMConfig, hooks: Hooks | None, http_client_factory: HttpClientFactory | None, label: str
) -> Transcription:
    """Run the ingest transcriber over ``pages()`` in a worker thread; report to ``hooks`` either way."""
    config = _vision_config(llm)
    client = build_vision_llm(config, http_client_factory)
    transcriber = PageTranscriber(client, config, asyncio.get_running_loop())
    done: list[TranscribedPage] = []

    def run() -> None:
        for number, markdown in transcriber.transcribe(_decoded(pages(), label), label):
            done.append(TranscribedPage(number, markdown))

    try:
        await asyncio.to_thread(run)
    except ExtractionFailed as exc:
        failure = VisionFailed(str(exc), code=exc.reason, details={"page": exc.page, "model": transcriber.model})
        if hooks is not None:
            context = {"stage": "extract", "page": exc.page, "model": transcriber.model, "pages_done": len(done)}
            event = ErrorEvent("extract", label, None, exc.reason, failure.message, None, context)
            await hooks.emit("on_error", event)
        raise failure from None
    finally:
        try:
            if hooks is not None:
                detail = {"action": "vision", "model": transcriber.model, "pages": len(done)}
                await hooks.emit("on_usage", UsageEvent("llm_tokens", transcriber.tokens, None, detail))
        finally:
            await client.aclose()
    return Transcription(pages=done, model=transcriber.model, tokens=transcriber.tokens)

"""One ingest's page transcriptions by the ``vision_llm`` model, bridged from the extracting thread.

Extraction is synchronous and runs in a worker thread, while the model client lives on the
engine's event loop. :class:`PageTranscriber` bridges the two: each page's call is scheduled on
that loop and the worker waits for its answer, with at most ``vision_llm.concurrency`` pages in
flight. Extraction happens before ingest opens any transaction, so no pooled connection is held
while the model works. Answers are remembered by the image's digest for the life of one ingest,
so a large document's second extraction pass pays for no page twice.

The model sees the raw page (there is no redacting an image before it is read); its reply is
untrusted text: a wrapping code fence and control characters are removed here, and the ingest
pipeline scrubs it like any other extracted text before it is stored, indexed or embedded.
Rendering the pages is :mod:`context_engine.ingest.formats.vision`'s.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import re
import threading
from collections import deque
from collections.abc import Iterable, Iterator

from context_engine.config import VisionLLMConfig, vision_section
from context_engine.errors import ConfigError, ContextEngineError
from context_engine.ingest.extracted import ExtractionFailed
from context_engine.llm.base import HttpClientFactory, ImageInput, LLMClient, LLMReply

SYSTEM_PROMPT = (
    "You transcribe one scanned page into Markdown for a search index. Write out all of the text on the page "
    "in reading order, word for word; do not summarise, explain, translate or add anything. Mark headings with "
    "#, keep lists as lists, and write every table as a Markdown pipe table whose first row is its header. "
    "Do not describe pictures. Reply with the Markdown alone, without a code fence, and with nothing at all "
    "if the page holds no text."
)
USER_PROMPT = "Transcribe this page."
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

"""``extract_text_from_images`` and ``extract_pdf_pages``: ingest's page transcriber as public functions,
over real HTTP against the scripted vision model of ``test_vision``; failures and spend reach the
given ``hooks``."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator
from typing import Any

import pytest
from PIL import Image

from context_engine import InvalidRequest, extract_pdf_pages, extract_text_from_images
from context_engine.config import LLMConfig, VisionLLMConfig
from context_engine.hooks import ErrorEvent, Hooks, UsageEvent
from context_engine.ingest.formats.page_transcriber import SYSTEM_PROMPT
from context_engine.llm.base import ImageInput
from context_engine.vision import VisionFailed
from tests.fakes import FakeHTTPServer, Target
from tests.test_vision import (
    GUARD_SECONDS,
    PAGE_MARKDOWN,
    PNG_MAGIC,
    SECRET,
    completion,
    openai_images,
    openai_vision,
    png_bytes,
    scan_pdf,
    shade_of,
    vision_config,
)


@pytest.fixture
def server() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer() as fake:
        yield fake


def by_shade(fail_at: int | None = None) -> Any:
    """Answers each page with its own grey level, so a page's Markdown says which page it was."""

    def handler(body: Any, headers: dict[str, str], _target: Target) -> Any:
        ((_, image),) = openai_images(body)
        shade = shade_of(image)
        if shade == fail_at:
            return 503, {}, {"error": {"message": f"overloaded, key {headers.get('authorization')}"}}
        return 200, {}, completion(f"# Shade {shade}\n\nPage text.")

    return handler


class Recorded:
    def __init__(self) -> None:
        self.errors: list[ErrorEvent] = []
        self.usage: list[UsageEvent] = []
        self.hooks = Hooks(on_error=self.errors.append, on_usage=self.usage.append)


async def within(call: Any) -> Any:
    return await asyncio.wait_for(call, GUARD_SECONDS)


async def test_images_are_transcribed_in_order_and_metered(server: FakeHTTPServer) -> None:
    seen: list[tuple[str, bytes]] = []
    server.route("POST", "/v1/chat/completions", openai_vision(seen=seen))
    first, second = png_bytes((64, 48)), png_bytes((40, 30))
    got = Recorded()
    out = await within(extract_text_from_images([first, second], llm=VisionLLMConfig(**vision_config(server)),
                                                hooks=got.hooks))  # fmt: skip
    assert [(p.page, p.markdown) for p in out.pages] == [(1, PAGE_MARKDOWN.strip()), (2, PAGE_MARKDOWN.strip())]
    assert out.model == "custom:vision-test" and out.tokens == 1400
    assert out.text == PAGE_MARKDOWN.strip() + "\n\n" + PAGE_MARKDOWN.strip()
    assert sorted(image for _, image in seen) == sorted([first, second])  # small PNGs go as they are
    assert got.errors == []
    ((usage),) = got.usage
    assert (usage.kind, usage.units, usage.detail) == (
        "llm_tokens", 1400, {"action": "vision", "model": "custom:vision-test", "pages": 2})  # fmt: skip


async def test_pdf_pages_are_rendered_and_read_by_the_ingest_transcriber(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/chat/completions", by_shade())
    pdf = scan_pdf(40, 120, 200)
    plain = LLMConfig(provider="custom", base_url=server.url("/v1"), model="vision-test", api_key=SECRET,
                      max_retries=0, timeout=10)  # fmt: skip
    listed = await within(extract_pdf_pages(pdf, [3, 1], llm=plain, name="scan.pdf"))
    assert [(p.page, p.markdown.splitlines()[0]) for p in listed.pages] == [(3, "# Shade 200"), (1, "# Shade 40")]
    assert len(server.requests) == 2
    body = server.requests[0].json()
    assert server.requests[0].header("authorization") == f"Bearer {SECRET}"  # the key survives the conversion
    assert body["messages"][0]["content"] == SYSTEM_PROMPT  # the prompt ingest sends
    assert body["max_tokens"] == 4096  # a plain LLMConfig takes the page-sized vision defaults it did not set
    ((_, image),) = openai_images(body)
    assert image.startswith(PNG_MAGIC)
    every = await within(extract_pdf_pages(pdf, llm=plain))
    assert [p.page for p in every.pages] == [1, 2, 3] and every.tokens == 2100


async def test_a_failed_page_reaches_on_error_and_raises_naming_it(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/chat/completions", by_shade(fail_at=200))
    got = Recorded()
    settings = VisionLLMConfig(**vision_config(server, concurrency=1))
    with pytest.raises(VisionFailed) as failed:
        await within(extract_pdf_pages(scan_pdf(40, 120, 200), llm=settings, hooks=got.hooks, name="flaky.pdf"))
    error = failed.value
    assert error.code == "vision_failed" and error.details["page"] == 3
    assert "vision_llm (custom:vision-test) could not transcribe page 3" in error.message
    assert "HTTP 503" in error.message and SECRET not in error.message
    ((event),) = got.errors
    assert (event.stage, event.name, event.failure_reason, event.error) == (
        "extract", "'flaky.pdf'", "vision_failed", error.message)  # fmt: skip
    assert event.context == {"stage": "extract", "page": 3, "model": "custom:vision-test", "pages_done": 2}
    ((usage),) = got.usage  # the two pages that came back were paid for
    assert usage.units == 1400 and usage.detail["pages"] == 2


async def test_an_image_the_model_refuses_is_reported_the_same_way(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/chat/completions", lambda *_: (400, {}, {"error": {"message": "no image inputs"}}))
    got = Recorded()
    with pytest.raises(VisionFailed, match="could not transcribe page 1"):
        settings = VisionLLMConfig(**vision_config(server))
        await within(extract_text_from_images([ImageInput(png_bytes(), "image/png")], llm=settings, hooks=got.hooks))
    assert [(e.stage, e.failure_reason, e.context["page"]) for e in got.errors] == [("extract", "vision_failed", 1)]


async def test_bad_input_is_refused_before_any_model_call(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/chat/completions", by_shade())
    settings = VisionLLMConfig(**vision_config(server))
    pdf = scan_pdf(40, 120)
    for pages in ([3], [0], [1, 1], ["1"]):
        with pytest.raises(InvalidRequest):
            await within(extract_pdf_pages(pdf, pages, llm=settings))
    with pytest.raises(InvalidRequest, match="not a PDF"):
        await within(extract_pdf_pages(b"%PDF-1.4 truncated", llm=settings))
    with pytest.raises(InvalidRequest, match="image 2 is not an image"):
        await within(extract_text_from_images([png_bytes(), b"not an image"], llm=settings))
    with pytest.raises(InvalidRequest):
        await within(extract_text_from_images(png_bytes(), llm=settings))  # type: ignore[arg-type]
    empty = await within(extract_text_from_images([], llm=settings))
    assert empty.pages == [] and empty.text == ""
    assert server.requests == []


async def test_an_image_whose_body_is_broken_is_a_precise_error(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/chat/completions", openai_vision())
    buffer = io.BytesIO()
    Image.new("RGB", (2000, 1500), (10, 200, 30)).save(buffer, format="PNG")  # too large to pass through as it is
    broken = buffer.getvalue()[:200]  # the header reads, the pixels do not
    with pytest.raises(InvalidRequest, match="cannot be decoded"):
        await within(extract_text_from_images([broken], llm=VisionLLMConfig(**vision_config(server)), name="cut.png"))
    assert server.requests == []

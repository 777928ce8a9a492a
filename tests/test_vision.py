"""``vision_llm``: scanned PDF pages and images transcribed to Markdown by a model, over real HTTP.

Each provider's fake on 127.0.0.1 checks that it received the page as an image in its own wire
format and answers Markdown with a heading and a table; the document is ingested into the real
embedded PostgreSQL and the stored chunks are read back. Gemini and Bedrock speak through their
real SDKs (google-genai, boto3) pointed at the same kind of fake.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pydantic
import pytest
from PIL import Image

from context_engine import TRUSTED, ContextEngine
from context_engine.config import ContextEngineConfig, LLMConfig, VisionLLMConfig
from context_engine.errors import ConfigError
from context_engine.hooks import ErrorEvent, Hooks, UsageEvent
from context_engine.ingest.formats import ExtractionFailed, extract
from context_engine.ingest.formats.page_transcriber import PageTranscriber, clean_reply
from context_engine.llm import build_llm
from context_engine.llm.base import ImageInput, LLMClient, LLMReply
from context_engine.redaction import RedactionPolicy, RedactionRule
from tests.conftest import make_config
from tests.fakes import FakeHTTPServer, Target, json_reply
from tests.fakes.word_embedder import WordEmbedder
from tests.filegen import SCANNED, make_pdf

# the tests' databases start migrated (a copy of the session's template; see tests/conftest.py)
pytestmark = pytest.mark.migrated(dim=16)

SECRET = "sk-vision-test-secret-0123456789"
PAGE_MARKDOWN = (
    "# Leave allowance\n\n"
    "Annual leave by band, as approved by the board.\n\n"
    "| Band | Days per year |\n"
    "| --- | --- |\n"
    "| One | 22 |\n"
    "| Three | 27 |\n"
)
TABLE = "| Band | Days per year |\n| --- | --- |\n| One | 22 |\n| Three | 27 |"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
GUARD_SECONDS = 30.0


@pytest.fixture
def server() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer() as fake:
        yield fake


def png_bytes(size: tuple[int, int] = (64, 48)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, (250, 250, 250)).save(buffer, format="PNG")
    return buffer.getvalue()


def scan_pdf(*shades: int) -> bytes:
    """A PDF of image-only pages (what a scanner writes), page ``k`` filled with grey ``shades[k-1]``."""
    pages = [Image.new("L", (300, 400), shade) for shade in shades]
    buffer = io.BytesIO()
    pages[0].save(buffer, format="PDF", save_all=True, append_images=pages[1:], resolution=50)
    return buffer.getvalue()


def shade_of(png: bytes) -> int:
    """The grey level at the centre of a rendered page: which of :func:`scan_pdf`'s pages it is."""
    with Image.open(io.BytesIO(png)) as image:
        return int(image.convert("L").getpixel((image.width // 2, image.height // 2)))


def completion(content: str, finish: str = "stop", tokens: int = 700) -> dict[str, Any]:
    return {
        "id": "chatcmpl-vision",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}],
        "usage": {"prompt_tokens": tokens - 100, "completion_tokens": 100, "total_tokens": tokens},
    }


def openai_images(body: Any) -> list[tuple[str, bytes]]:
    """``(mime, bytes)`` of every image part of the request's user turn (OpenAI's wire format)."""
    images = []
    for message in body["messages"]:
        if message["role"] != "user" or not isinstance(message["content"], list):
            continue
        for part in message["content"]:
            if part["type"] == "image_url":
                head, _, data = part["image_url"]["url"].partition(",")
                assert head.startswith("data:") and head.endswith(";base64")
                images.append((head[len("data:") : -len(";base64")], base64.b64decode(data)))
    return images


def openai_vision(markdown: str = PAGE_MARKDOWN, seen: list[tuple[str, bytes]] | None = None) -> Any:
    """An OpenAI-compatible chat server that answers ``markdown`` only to a request carrying one image."""

    def handler(body: Any, _headers: dict[str, str], _target: Target) -> Any:
        images = openai_images(body)
        if len(images) != 1:
            return 400, {}, {"error": {"message": "expected exactly one image part"}}
        if seen is not None:
            seen.append(images[0])
        return 200, {}, completion(markdown)

    return handler


def vision_config(server: FakeHTTPServer, **overrides: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "provider": "custom",
        "base_url": server.url("/v1"),
        "model": "vision-test",
        "api_key": SECRET,
        "max_retries": 0,
        "timeout": 10.0,
    }
    settings.update(overrides)
    return settings


def chunks_of(database_url: str, document_id: str) -> list[tuple[str, int | None, str, str | None]]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT text, page, kind, section FROM ce_chunks WHERE document_id = %s ORDER BY position",
            (document_id,),
        ).fetchall()
    return [tuple(row) for row in rows]  # type: ignore[misc]


def document_row(database_url: str, document_id: str) -> tuple[Any, ...]:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT status, failure_reason, error, meta, chunk_count FROM ce_documents WHERE id = %s",
            (document_id,),
        ).fetchone()
    assert row is not None
    return tuple(row)


async def ingest(engine: ContextEngine, data: bytes, name: str) -> Any:
    report = await asyncio.wait_for(engine.ingest(file=data, name=name), GUARD_SECONDS)
    return report.documents[0]


# ------------------------------------------------------------------------------ openai-compatible
async def test_a_scanned_pdf_page_is_transcribed_to_markdown_and_keeps_its_number(
    database_url: str, server: FakeHTTPServer
) -> None:
    seen: list[tuple[str, bytes]] = []
    server.route("POST", "/v1/chat/completions", openai_vision(seen=seen))
    config = make_config(database_url, vision_llm=vision_config(server))
    pdf = make_pdf(["Cover page typed with a text layer", SCANNED])
    usage: list[UsageEvent] = []
    async with ContextEngine(config, embedder=WordEmbedder(), hooks=Hooks(on_usage=usage.append)) as engine:
        doc = await ingest(engine, pdf, "handbook.pdf")
        assert doc.status == "completed", doc.error
        found = await engine.search("days per year band three", principals=TRUSTED)
    ((mime, image),) = seen  # only the scanned page went to the model, rendered as a PNG
    assert mime == "image/png" and image.startswith(PNG_MAGIC)
    with Image.open(io.BytesIO(image)) as rendered:
        assert max(rendered.size) <= 1600 and rendered.size[1] > rendered.size[0]  # a portrait page
    (request,) = server.requests
    body = request.json()
    assert request.header("authorization") == f"Bearer {SECRET}"
    assert body["model"] == "vision-test" and body["max_tokens"] == 4096
    assert "Markdown" in body["messages"][0]["content"]  # our instructions travel as the system turn

    chunks = chunks_of(database_url, doc.document_id)
    assert chunks[0][:2] == ("Cover page typed with a text layer", 1)
    tables = [c for c in chunks if c[2] == "table"]
    assert tables == [(TABLE, 2, "table", "Leave allowance")]
    assert all(page == 2 for _, page, _, _ in chunks[1:])
    status, _, _, meta, _ = document_row(database_url, doc.document_id)
    assert status == "completed"
    assert meta["pages"] == 2 and meta["vision_pages"] == [2]
    assert meta["vision_model"] == "custom:vision-test" and meta["vision_tokens"] == 700
    assert "ocr_pages" not in meta
    (event,) = [e for e in usage if e.kind == "ingest"]  # the vision model's spend is metered with the document
    assert event.detail["vision_tokens"] == 700 and event.detail["vision_model"] == "custom:vision-test"
    assert any(hit.page == 2 and "Three | 27" in hit.chunk_text for hit in found.hits)


async def test_an_image_is_transcribed_and_its_bytes_reach_the_model_as_they_are(
    database_url: str, server: FakeHTTPServer
) -> None:
    seen: list[tuple[str, bytes]] = []
    server.route("POST", "/v1/chat/completions", openai_vision(seen=seen))
    picture = png_bytes()
    async with ContextEngine(
        make_config(database_url, vision_llm=vision_config(server)), embedder=WordEmbedder()
    ) as engine:
        doc = await ingest(engine, picture, "scan.png")
    assert doc.status == "completed", doc.error
    assert seen == [("image/png", picture)]
    chunks = chunks_of(database_url, doc.document_id)
    assert (TABLE, 1, "table", "Leave allowance") in chunks
    assert doc.mime == "image/png" and doc.pages == 1


async def test_a_multi_page_tiff_sends_each_frame_as_a_png_page(
    database_url: str, server: FakeHTTPServer
) -> None:
    frames = [Image.new("L", (40, 30), shade) for shade in (200, 120)]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="TIFF", save_all=True, append_images=frames[1:])
    seen: list[tuple[str, bytes]] = []
    server.route("POST", "/v1/chat/completions", openai_vision(seen=seen))
    async with ContextEngine(
        make_config(database_url, vision_llm=vision_config(server)), embedder=WordEmbedder()
    ) as engine:
        doc = await ingest(engine, buffer.getvalue(), "fax.tiff")
    assert doc.status == "completed", doc.error
    assert [mime for mime, _ in seen] == ["image/png", "image/png"]
    assert all(image.startswith(PNG_MAGIC) for _, image in seen)
    pages = {page for _, page, kind, _ in chunks_of(database_url, doc.document_id) if kind == "table"}
    assert pages == {1, 2}


# ------------------------------------------------------------------------------ anthropic
def anthropic_vision(seen: list[dict[str, Any]]) -> Any:
    def handler(body: Any, headers: dict[str, str], _target: Target) -> Any:
        seen.append({"body": body, "key": headers.get("x-api-key")})
        (turn,) = body["messages"]
        images = [block for block in turn["content"] if block["type"] == "image"]
        if len(images) != 1:
            return 400, {}, {"type": "error", "error": {"type": "invalid_request_error", "message": "no image"}}
        return (
            200,
            {},
            {
                "id": "msg_vision",
                "type": "message",
                "role": "assistant",
                "model": "claude-test",
                "content": [{"type": "text", "text": "```markdown\n" + PAGE_MARKDOWN + "```"}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 1500, "output_tokens": 90},
            },
        )

    return handler


async def test_anthropic_reads_a_png_sent_as_a_base64_image_block(database_url: str, server: FakeHTTPServer) -> None:
    import anthropic  # noqa: F401  (the anthropic extra is part of the test install)

    seen: list[dict[str, Any]] = []
    server.route("POST", "/v1/messages", anthropic_vision(seen))
    picture = png_bytes()
    settings = vision_config(server, provider="anthropic", base_url=server.url(), model="claude-test")
    async with ContextEngine(make_config(database_url, vision_llm=settings), embedder=WordEmbedder()) as engine:
        doc = await ingest(engine, picture, "receipt.png")
    assert doc.status == "completed", doc.error
    (call,) = seen
    assert call["key"] == SECRET
    image, text = call["body"]["messages"][0]["content"]
    assert image == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(picture).decode()},
    }
    assert text == {"type": "text", "text": "Transcribe this page."}
    assert call["body"]["max_tokens"] == 4096 and "Markdown" in call["body"]["system"]
    # the code fence the model wrapped its answer in is gone; the table is a table
    assert (TABLE, 1, "table", "Leave allowance") in chunks_of(database_url, doc.document_id)
    meta = document_row(database_url, doc.document_id)[3]
    assert meta["vision_model"] == "anthropic:claude-test" and meta["vision_tokens"] == 1590


async def test_anthropic_transcribes_a_scanned_pdf_page(database_url: str, server: FakeHTTPServer) -> None:
    import anthropic  # noqa: F401  (the anthropic extra is part of the test install)

    seen: list[dict[str, Any]] = []
    server.route("POST", "/v1/messages", anthropic_vision(seen))
    settings = vision_config(server, provider="anthropic", base_url=server.url(), model="claude-test")
    async with ContextEngine(make_config(database_url, vision_llm=settings), embedder=WordEmbedder()) as engine:
        doc = await ingest(engine, make_pdf([SCANNED, "Typed closing page"]), "mixed.pdf")
    assert doc.status == "completed", doc.error
    source = seen[0]["body"]["messages"][0]["content"][0]["source"]
    assert source["media_type"] == "image/png" and base64.b64decode(source["data"]).startswith(PNG_MAGIC)
    chunks = chunks_of(database_url, doc.document_id)
    assert (TABLE, 1, "table", "Leave allowance") in chunks
    assert chunks[-1][:2] == ("Typed closing page", 2)


# ------------------------------------------------------------------------------ gemini and bedrock
@pytest.fixture
def no_ambient_clouds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No Google or AWS settings from the machine: everything the SDKs use comes from the test."""
    for name in (
        "GOOGLE_API_KEY",
        "GEMINI_API_KEY",
        "GOOGLE_GENAI_USE_VERTEXAI",
        "GOOGLE_CLOUD_PROJECT",
        "GOOGLE_CLOUD_LOCATION",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAFAKEVISION0001")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake/vision/secret/0123456789")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


async def test_gemini_sends_the_page_as_inline_data(server: FakeHTTPServer, no_ambient_clouds: None) -> None:
    path = "/v1/models/gemini-2.5-flash:generateContent"
    server.route(
        "POST",
        path,
        json_reply(
            200,
            {
                "candidates": [
                    {"content": {"role": "model", "parts": [{"text": PAGE_MARKDOWN}]}, "finishReason": "STOP"}
                ],
                "usageMetadata": {"promptTokenCount": 300, "candidatesTokenCount": 80, "totalTokenCount": 380},
            },
        ),
    )
    llm = build_llm(VisionLLMConfig(provider="gemini", api_key="AIza-vision-key", base_url=server.url()))
    picture = png_bytes()
    try:
        reply = await asyncio.wait_for(
            llm.complete_with_images(system="S", prompt="Transcribe.", images=[ImageInput(picture, "image/png")]),
            GUARD_SECONDS,
        )
    finally:
        await llm.aclose()
    assert (reply.text, reply.tokens, reply.truncated) == (PAGE_MARKDOWN, 380, False)
    body = server.requests_to(path)[0].json()
    (turn,) = body["contents"]
    assert turn["role"] == "user"
    inline = turn["parts"][0]["inlineData"]  # the SDK writes the bytes URL-safe and the type in snake case
    assert inline.get("mimeType", inline.get("mime_type")) == "image/png"
    assert base64.urlsafe_b64decode(inline["data"]) == picture
    assert turn["parts"][1] == {"text": "Transcribe."}
    assert body["systemInstruction"]["parts"][0]["text"] == "S"
    assert body["generationConfig"]["maxOutputTokens"] == 4096


async def test_bedrock_sends_the_page_as_a_converse_image_block(
    server: FakeHTTPServer, no_ambient_clouds: None
) -> None:
    model = "anthropic.claude-3-5-sonnet-20241022-v2:0"
    path = "/model/anthropic.claude-3-5-sonnet-20241022-v2%3A0/converse"
    server.route(
        "POST",
        path,
        json_reply(
            200,
            {
                "output": {"message": {"role": "assistant", "content": [{"text": PAGE_MARKDOWN}]}},
                "stopReason": "max_tokens",
                "usage": {"inputTokens": 900, "outputTokens": 4096, "totalTokens": 4996},
                "metrics": {"latencyMs": 5},
            },
        ),
    )
    llm = build_llm(VisionLLMConfig(provider="bedrock", model=model, region="eu-west-1", base_url=server.url()))
    picture = png_bytes()
    try:
        reply = await asyncio.wait_for(
            llm.complete_with_images(system="S", prompt="Transcribe.", images=[ImageInput(picture, "image/png")]),
            GUARD_SECONDS,
        )
    finally:
        await llm.aclose()
    assert reply.text == PAGE_MARKDOWN and reply.truncated  # stopped at the cap: the caller must not trust it whole
    body = server.requests_to(path)[0].json()
    (turn,) = body["messages"]
    image, text = turn["content"]
    assert image == {"image": {"format": "png", "source": {"bytes": base64.b64encode(picture).decode()}}}
    assert text == {"text": "Transcribe."} and body["system"] == [{"text": "S"}]
    assert "toolConfig" not in body and "outputConfig" not in body


# ------------------------------------------------------------------------------ without vision_llm
async def test_without_vision_llm_a_scanned_page_still_needs_ocr(database_url: str) -> None:
    """Today's path: the text layer, then Tesseract (not installed here, so the [ocr] hint)."""
    async with ContextEngine(make_config(database_url), embedder=WordEmbedder()) as engine:
        doc = await ingest(engine, make_pdf(["typed", SCANNED]), "scan.pdf")
        text_doc = await ingest(engine, make_pdf(["only typed text here"]), "typed.pdf")
    assert doc.status == "failed" and doc.failure_reason == "extraction_failed"
    assert "page 2 has no text layer" in (doc.error or "") and "[ocr]" in (doc.error or "")
    assert "vision" not in (doc.error or "")
    assert text_doc.status == "completed"
    meta = document_row(database_url, text_doc.document_id)[3]
    assert "vision_pages" not in meta


async def test_a_text_layer_never_goes_to_the_model(database_url: str, server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/chat/completions", openai_vision())
    async with ContextEngine(
        make_config(database_url, vision_llm=vision_config(server)), embedder=WordEmbedder()
    ) as engine:
        doc = await ingest(engine, make_pdf(["A born-digital page", "and its second page"]), "typed.pdf")
        plain = await engine.ingest(text="plain text is never transcribed", name="note")
    assert doc.status == "completed" and plain.documents[0].status == "completed"
    assert server.requests == []
    assert [page for _, page, _, _ in chunks_of(database_url, doc.document_id)] == [1, 2]


# ------------------------------------------------------------------------------ failures
async def test_a_provider_failure_fails_the_document_naming_the_page(
    database_url: str, server: FakeHTTPServer
) -> None:
    def page_three_fails(body: Any, headers: dict[str, str], target: Target) -> Any:
        ((_, image),) = openai_images(body)
        if shade_of(image) == 200:
            return 503, {}, {"error": {"message": f"overloaded, key {headers.get('authorization')}"}}
        return 200, {}, completion(PAGE_MARKDOWN)

    server.route("POST", "/v1/chat/completions", page_three_fails)
    settings = vision_config(server, concurrency=1)
    errors: list[ErrorEvent] = []
    hooks = Hooks(on_error=errors.append)
    config = make_config(database_url, vision_llm=settings)
    async with ContextEngine(config, embedder=WordEmbedder(), hooks=hooks) as engine:
        doc = await ingest(engine, scan_pdf(40, 120, 200), "flaky.pdf")
    assert doc.status == "failed" and doc.failure_reason == "vision_failed"
    assert doc.failure_message and "scanned pages" in doc.failure_message
    error = doc.error or ""
    assert "vision_llm (custom:vision-test) could not transcribe page 3" in error and "HTTP 503" in error
    assert SECRET not in error
    assert len(server.requests) == 3
    status, reason, _, _, chunk_count = document_row(database_url, doc.document_id)
    assert (status, reason, chunk_count) == ("failed", "vision_failed", 0)
    assert chunks_of(database_url, doc.document_id) == []  # pages 1 and 2 were not half-written
    ((stage, reason, hooked),) = [(e.stage, e.failure_reason, e.error) for e in errors]
    assert (stage, reason, hooked) == ("extract", "vision_failed", error)


async def test_a_model_that_refuses_images_is_a_precise_failure(database_url: str, server: FakeHTTPServer) -> None:
    server.route(
        "POST",
        "/v1/chat/completions",
        json_reply(400, {"error": {"message": "This model does not support image inputs.", "type": "invalid_request"}}),
    )
    async with ContextEngine(
        make_config(database_url, vision_llm=vision_config(server)), embedder=WordEmbedder()
    ) as engine:
        doc = await ingest(engine, png_bytes(), "photo.png")
    assert doc.failure_reason == "vision_failed"
    assert "vision_llm (custom:vision-test) could not transcribe page 1" in (doc.error or "")
    assert "does not support image inputs" in (doc.error or "")


async def test_a_reply_cut_off_at_max_tokens_fails_rather_than_storing_half_a_page(
    database_url: str, server: FakeHTTPServer
) -> None:
    server.route("POST", "/v1/chat/completions", json_reply(200, completion("# Leave\n\n| Band |", finish="length")))
    settings = vision_config(server, max_tokens=64)
    async with ContextEngine(make_config(database_url, vision_llm=settings), embedder=WordEmbedder()) as engine:
        doc = await ingest(engine, make_pdf([SCANNED]), "long.pdf")
    assert doc.failure_reason == "vision_failed"
    assert "page 1 was cut off at vision_llm.max_tokens (64); raise it" in (doc.error or "")


async def test_a_page_the_model_finds_empty_leaves_no_text_to_index(database_url: str, server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/chat/completions", json_reply(200, completion("")))
    async with ContextEngine(
        make_config(database_url, vision_llm=vision_config(server)), embedder=WordEmbedder()
    ) as engine:
        doc = await ingest(engine, make_pdf([SCANNED]), "blank.pdf")
    assert doc.failure_reason == "extraction_failed" and "no extractable text" in (doc.error or "")


async def test_without_the_vision_extra_a_scanned_page_names_it(
    database_url: str, server: FakeHTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.route("POST", "/v1/chat/completions", openai_vision())
    monkeypatch.setitem(sys.modules, "pypdfium2", None)  # what an install without the extra looks like
    async with ContextEngine(
        make_config(database_url, vision_llm=vision_config(server)), embedder=WordEmbedder()
    ) as engine:
        doc = await ingest(engine, make_pdf(["typed", SCANNED]), "scan.pdf")
    assert doc.status == "failed" and doc.failure_reason == "extraction_failed"
    assert "page 2 has no text layer (scanned)" in (doc.error or "")
    assert 'pip install "pg-context-engine[vision]"' in (doc.error or "")
    assert server.requests == []  # no fallback: the model was configured, Tesseract is not what was asked for


# ------------------------------------------------------------------------------ bad configuration
def test_a_provider_that_is_not_an_llm_is_refused_by_name() -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        ContextEngineConfig(vision_llm={"provider": "cohere"})
    assert "vision_llm.provider" in str(caught.value)
    assert "cohere serves embeddings only" in str(caught.value)


def test_vertex_vision_may_leave_its_project_to_the_environment() -> None:
    """Like ``llm``: project and location are optional (GOOGLE_CLOUD_PROJECT / GOOGLE_CLOUD_LOCATION)."""
    vision = ContextEngineConfig(vision_llm={"provider": "vertex_ai", "location": "europe-west4"}).vision_llm
    assert vision is not None and (vision.project, vision.location) == (None, "europe-west4")
    with pytest.raises(pydantic.ValidationError, match="used by provider 'vertex_ai' only"):
        ContextEngineConfig(vision_llm={"provider": "anthropic", "project": "p"})


def test_vision_llm_reads_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CE_VISION_LLM__PROVIDER", "anthropic")
    monkeypatch.setenv("CE_VISION_LLM__MAX_RETRIES", "0")
    monkeypatch.setenv("CE_VISION_LLM__CONCURRENCY", "2")
    vision = ContextEngineConfig.from_env().vision_llm
    assert vision is not None
    assert (vision.provider, vision.max_retries, vision.concurrency, vision.max_tokens) == ("anthropic", 0, 2, 4096)


async def test_a_provider_missing_its_settings_is_named_under_vision_llm(database_url: str) -> None:
    config = make_config(database_url, vision_llm={"provider": "openai"})
    async with ContextEngine(config, embedder=WordEmbedder()) as engine:
        with pytest.raises(ConfigError) as caught:
            await engine.ingest(text="anything", name="n")
    assert "vision_llm.api_key is required for provider 'openai' (CE_VISION_LLM__API_KEY)" in caught.value.message


class TextOnlyLLM(LLMClient):
    """A host's own client for a model that reads text only: it serves ``complete`` and nothing else."""

    provider, model = "text-only", "t1"

    async def complete(
        self, *, system: str, messages: list[dict[str, str]], schema: Any = None, schema_name: str = "reply"
    ) -> LLMReply:
        return LLMReply("unused", 1, "text")


async def test_a_client_that_cannot_send_images_refuses_naming_vision_llm() -> None:
    transcriber = PageTranscriber(TextOnlyLLM(), VisionLLMConfig(provider="custom"), asyncio.get_running_loop())
    with pytest.raises(ExtractionFailed) as caught:
        await asyncio.to_thread(extract, png_bytes(), name="scan.png", vision=transcriber)
    assert caught.value.reason == "vision_failed"
    assert str(caught.value) == (
        "'scan.png': vision_llm (text-only:t1) could not transcribe page 1: "
        "provider 'text-only' cannot send images to its model"
    )


def test_only_types_every_provider_takes_can_be_sent() -> None:
    with pytest.raises(ValueError, match="image/tiff"):
        ImageInput(b"II*\x00", "image/tiff")


# ------------------------------------------------------------------------------ the reply is untrusted
def test_the_reply_is_cleaned_before_it_is_read() -> None:
    assert clean_reply("```md\n# Title\n\ntext\n```") == "# Title\n\ntext"
    assert clean_reply("~~~\n| a | b |\n~~~\n") == "| a | b |"
    assert clean_reply("in\x00line\x07 text\r\nnext \ud800") == "inline text\nnext ?"
    assert clean_reply("keeps ``` inside\n") == "keeps ``` inside"


async def test_ingest_redaction_scrubs_what_the_model_wrote(database_url: str, server: FakeHTTPServer) -> None:
    leaked = "Contact dana.scully@fbi.example for the leave table."
    server.route("POST", "/v1/chat/completions", openai_vision(markdown=leaked + "\n\n" + PAGE_MARKDOWN))
    policy = RedactionPolicy(rules=[RedactionRule(name="email", detector="email", apply_at="ingest")])
    config = make_config(database_url, vision_llm=vision_config(server), redaction=policy)
    async with ContextEngine(config, embedder=WordEmbedder()) as engine:
        doc = await ingest(engine, make_pdf([SCANNED]), "contacts.pdf")
    assert doc.status == "completed", doc.error
    texts = " ".join(text for text, _, _, _ in chunks_of(database_url, doc.document_id))
    assert "dana.scully" not in texts and "[EMAIL]" in texts
    with psycopg.connect(database_url) as conn:
        (stored,) = conn.execute("SELECT text FROM ce_documents WHERE id = %s", (doc.document_id,)).fetchone()
    assert "dana.scully" not in stored


# ------------------------------------------------------------------------------ pages in flight
async def test_pages_go_out_together_and_come_back_in_page_order(database_url: str, server: FakeHTTPServer) -> None:
    """Three scanned pages, two in flight: page 1's answer is held back until page 2's request has
    arrived, so the calls overlap; each answer names the page it saw and the chunks keep page order."""
    page_two_sent = threading.Event()
    shades = {40: 1, 120: 2, 200: 3}

    def handler(body: Any, _headers: dict[str, str], _target: Target) -> Any:
        ((_, image),) = openai_images(body)
        page = shades[shade_of(image)]
        if page == 1:
            assert page_two_sent.wait(GUARD_SECONDS), "page 2 was not sent while page 1 was with the model"
        elif page == 2:
            page_two_sent.set()
        return 200, {}, completion(f"# Part {page}\n\nWhat page {page} says.")

    server.route("POST", "/v1/chat/completions", handler)
    settings = vision_config(server, concurrency=2)
    async with ContextEngine(make_config(database_url, vision_llm=settings), embedder=WordEmbedder()) as engine:
        doc = await ingest(engine, scan_pdf(40, 120, 200), "three.pdf")
    assert doc.status == "completed", doc.error
    chunks = chunks_of(database_url, doc.document_id)
    assert [(text, page, section) for text, page, _, section in chunks] == [
        ("What page 1 says.", 1, "Part 1"),
        ("What page 2 says.", 2, "Part 2"),
        ("What page 3 says.", 3, "Part 3"),
    ]


async def test_a_large_documents_second_pass_pays_for_no_page_twice(
    database_url: str, server: FakeHTTPServer
) -> None:
    # hold_chunks=1 makes the pipeline extract the document a second time as it writes the chunks
    server.route("POST", "/v1/chat/completions", openai_vision())
    config = make_config(database_url, vision_llm=vision_config(server), ingest={"hold_chunks": 1})
    async with ContextEngine(config, embedder=WordEmbedder()) as engine:
        doc = await ingest(engine, scan_pdf(40, 200), "twice.pdf")
    assert doc.status == "completed", doc.error
    assert doc.chunks >= 4
    assert len(server.requests) == 2  # one call per page, not per pass


async def test_a_repeated_page_image_is_transcribed_once(database_url: str, server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/chat/completions", openai_vision())
    settings = vision_config(server, concurrency=1)
    async with ContextEngine(make_config(database_url, vision_llm=settings), embedder=WordEmbedder()) as engine:
        doc = await ingest(engine, scan_pdf(90, 90, 90), "repeated.pdf")
    assert doc.status == "completed", doc.error
    assert len(server.requests) == 1
    tables = [page for _, page, kind, _ in chunks_of(database_url, doc.document_id) if kind == "table"]
    assert tables == [1, 2, 3]


async def test_the_event_loop_keeps_serving_while_a_page_is_with_the_model(
    database_url: str, server: FakeHTTPServer
) -> None:
    arrived, release = threading.Event(), threading.Event()

    def slow(body: Any, _headers: dict[str, str], _target: Target) -> Any:
        arrived.set()
        release.wait(GUARD_SECONDS)
        return 200, {}, completion(PAGE_MARKDOWN)

    server.route("POST", "/v1/chat/completions", slow)
    async with ContextEngine(
        make_config(database_url, vision_llm=vision_config(server)), embedder=WordEmbedder()
    ) as engine:
        await engine.ingest(text="Leave policy typed in the handbook.", name="typed")
        pending = asyncio.create_task(engine.ingest(file=make_pdf([SCANNED]), name="slow.pdf"))
        assert await asyncio.to_thread(arrived.wait, GUARD_SECONDS)
        # the model has the page: a search and another ingest still run to the end meanwhile
        search = engine.search("leave policy handbook", principals=TRUSTED)
        hits = (await asyncio.wait_for(search, GUARD_SECONDS)).hits
        other = await asyncio.wait_for(engine.ingest(text="Another note.", name="other"), GUARD_SECONDS)
        assert not pending.done()
        release.set()
        report = await asyncio.wait_for(pending, GUARD_SECONDS)
    assert hits and other.documents[0].status == "completed"
    assert report.documents[0].status == "completed"


def test_the_llm_config_is_unchanged_by_vision_defaults() -> None:
    assert (LLMConfig().max_tokens, LLMConfig().timeout) == (1024, 60.0)
    vision = VisionLLMConfig()
    assert (vision.max_tokens, vision.timeout, vision.concurrency) == (4096, 180.0, 4)
    assert json.loads(vision.model_dump_json())["concurrency"] == 4

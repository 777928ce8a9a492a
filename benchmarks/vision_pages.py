"""What ``vision_llm`` transcription costs the host: rendering per page, bytes sent, and overlap.

Run: ``python benchmarks/vision_pages.py [--pages 20] [--delay 0.2]``.
The PDF is image-only (every page a 150 dpi letter-size greyscale scan with lines of text and a ruled
table drawn on it), written by Pillow. The model is a local OpenAI-compatible fake on 127.0.0.1
that answers a fixed Markdown page after ``--delay`` seconds, so the figures are the engine's own
cost (render, encode, HTTP) and how well pages overlap, never a real model's latency.
Figures only: compare runs on one machine, and note the load average printed with them.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import resource
import statistics
import time
from typing import Any

from PIL import Image, ImageDraw

from context_engine.config import VisionLLMConfig
from context_engine.ingest.formats import extract
from context_engine.ingest.formats.page_transcriber import PageTranscriber, build_vision_llm
from tests.fakes import FakeHTTPServer, Target

MARKDOWN = "# Rates\n\nRates by band.\n\n| Band | Rate |\n| --- | --- |\n| One | 10 |\n| Two | 12 |\n"


def scanned_pdf(pages: int) -> bytes:
    """``pages`` letter-size scans at 150 dpi, each with 40 lines of text and a ruled table."""
    images = []
    for number in range(pages):
        image = Image.new("L", (1275, 1650), 255)
        draw = ImageDraw.Draw(image)
        for line in range(40):
            draw.text((100, 100 + line * 22), f"Page {number + 1} line {line}: the quick brown fox.", fill=0)
        for row in range(6):
            draw.line((100, 1100 + row * 40, 1100, 1100 + row * 40), fill=0, width=2)
        images.append(image)
    buffer = io.BytesIO()
    images[0].save(buffer, format="PDF", save_all=True, append_images=images[1:], resolution=150)
    return buffer.getvalue()


def fake_model(delay: float, sizes: list[int]) -> Any:
    def handler(body: Any, _headers: dict[str, str], _target: Target) -> Any:
        url = body["messages"][1]["content"][0]["image_url"]["url"]
        sizes.append(len(url))
        time.sleep(delay)
        return 200, {}, {
            "choices": [{"index": 0, "message": {"role": "assistant", "content": MARKDOWN}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1200, "completion_tokens": 60, "total_tokens": 1260},
        }

    return handler


async def run(pdf: bytes, server: FakeHTTPServer, concurrency: int) -> float:
    config = VisionLLMConfig(
        provider="custom", base_url=server.url("/v1"), model="bench", api_key="k", concurrency=concurrency
    )
    llm = build_vision_llm(config)
    try:
        transcriber = PageTranscriber(llm, config, asyncio.get_running_loop())
        started = time.perf_counter()
        result = await asyncio.to_thread(extract, pdf, name="scan.pdf", vision=transcriber)
        elapsed = time.perf_counter() - started
        assert result.meta["vision_pages"] == list(range(1, result.meta["pages"] + 1))
        return elapsed
    finally:
        await llm.aclose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=20)
    parser.add_argument("--delay", type=float, default=0.2, help="seconds the fake model takes per page")
    args = parser.parse_args()
    pdf = scanned_pdf(args.pages)
    print(f"load average {os.getloadavg()[0]:.2f}; {args.pages} scanned pages, PDF {len(pdf) / 1e6:.1f} MB")
    with FakeHTTPServer() as server:
        sizes: list[int] = []
        server.route("POST", "/v1/chat/completions", fake_model(0.0, sizes))
        instant = asyncio.run(run(pdf, server, 1))
        median_kb = statistics.median(sizes) / 1e3
        print(
            f"model answering at once: {instant / args.pages * 1000:.0f} ms per page of engine time "
            f"(render + PNG + HTTP, one page at a time); data URL per page median {median_kb:.0f} kB"
        )
        server.route("POST", "/v1/chat/completions", fake_model(args.delay, []))
        for concurrency in (1, 4):
            wall = asyncio.run(run(pdf, server, concurrency))
            print(f"model taking {args.delay:.1f} s per page, concurrency {concurrency}: {wall:.1f} s for the document")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of the process {peak:.0f} MiB")


if __name__ == "__main__":
    main()

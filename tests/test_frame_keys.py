"""The ``frame_key`` the knowledge tool hands the model is the name compute's code finds.

Two CSV files and a two-sheet workbook, ingested for real; ``discover`` and the aggregate refusal
name frames; a host ``code_runner`` (given to the engine) records the frame names compute's
generated code receives, with the model scripted over HTTP on 127.0.0.1.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from context_engine import TRUSTED, UNSCOPED, ContextEngine
from tests.conftest import make_config
from tests.fakes import FakeHTTPServer, json_reply
from tests.knowledge_fakes import completion


def workbook() -> bytes:
    from openpyxl import Workbook

    book = Workbook()
    first = book.active
    first.title = "Q1"
    first.append(["region", "amount"])
    first.append(["north", 10])
    second = book.create_sheet("Q2")
    second.append(["region", "amount"])
    second.append(["south", 20])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


@pytest.fixture
def model() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer() as server:
        server.route("POST", "/v1/chat/completions", json_reply(200, completion(json.dumps({"code": "result = 1"}))))
        yield server


@pytest.fixture
async def engine_and_seen(database_url: str, model: FakeHTTPServer) -> AsyncIterator[tuple[ContextEngine, list[str]]]:
    seen: list[str] = []

    def runner(code: str, context: dict[str, Any], seconds: float) -> dict[str, Any]:
        seen.extend(context["dfs"])
        return {"result": 1}

    llm = {"provider": "custom", "base_url": model.url("/v1"), "model": "coder", "max_retries": 0, "timeout": 30}
    async with ContextEngine(make_config(database_url, llm=llm), code_runner=runner) as engine:
        await engine.ingest(file=b"item,amount\nink,3\npaper,4\n", name="costs 2024.csv", source_id="fin")
        await engine.ingest(file=b"item,amount\npens,5\n", name="costs-2024.csv", source_id="fin")
        await engine.ingest(file=workbook(), name="book.xlsx", source_id="fin")
        yield engine, seen


async def test_discover_and_the_refusal_name_the_frames_compute_gives_the_code(
    engine_and_seen: tuple[ContextEngine, list[str]],
) -> None:
    engine, seen = engine_and_seen
    found = await engine.search_knowledge_base(action="discover", principals=TRUSTED, scope=UNSCOPED)
    named = {s["frame_key"] for d in found["documents"] for s in d["structure"].get("sheets", [])}
    refusal = await engine.search_knowledge_base(
        action="search", query="total amount per region", principals=TRUSTED, scope=["fin"]
    )
    suggested = refusal["next_action"]["suggestion"]["frame_key"]
    out = await engine.search_knowledge_base(action="compute", query="total amount", principals=TRUSTED, scope=["fin"])
    assert out["success"] is True, out
    assert named == set(seen) and len(seen) == 4
    assert suggested in seen

"""``get_chunks`` items carry the ``language`` of the code they hold; ``list`` items carry ``parked``:
why a document that is neither indexed nor failed waits, and how much of it is embedded."""

from __future__ import annotations

from typing import Any

from context_engine import TRUSTED, UNSCOPED, ContextEngine, call_knowledge_tool
from context_engine.ingest.chunker import chunk_units
from context_engine.ingest.extracted import Unit
from tests.conftest import make_config
from tests.fakes.http_server import (  # noqa: F401
    FakeHTTPServer,
    Target,
    fake_embedding,
    fake_http_server,
    fake_openai_embeddings,
)

DIM = 8

NOTES = """# Setup

Install the package first.

```python
import context_engine
print(context_engine.__name__)
```

# Shell

Then run it from a terminal.

```bash
context-engine migrate
```
"""


def test_a_packed_chunk_keeps_the_one_language_of_its_code() -> None:
    def count(text: str) -> int:
        return len(text.split())

    units = [
        Unit(text="Prose before.", section="s"),
        Unit(text="x = 1", section="s", meta={"block": "code", "language": "python"}),
        Unit(text="Prose in another section.", section="t"),
        Unit(text="echo a", section="u", meta={"language": "bash"}),
        Unit(text="let b = 2", section="u", meta={"language": "rust"}),
    ]
    chunks = list(chunk_units(units, budget=100, count_tokens=count))
    assert [c.meta.get("language") for c in chunks] == ["python", None, None]  # two languages: neither


async def test_get_chunks_items_say_the_language_of_their_code(database_url: str) -> None:
    async with ContextEngine(make_config(database_url)) as engine:
        report = (await engine.ingest(text=NOTES, name="notes.md")).documents[0]
        answer = await call_knowledge_tool(
            engine, principals=TRUSTED, scope=UNSCOPED, action="get_chunks", document_id=report.document_id
        )
    assert answer["success"] is True, answer
    by_section = {c["section"]: c["language"] for c in answer["chunks"]}
    assert by_section == {"Setup": "python", "Shell": "bash"}
    assert all("language" in c for c in answer["chunks"])


def _config(database_url: str, server: FakeHTTPServer) -> Any:
    return make_config(database_url, embedding=fake_embedding(server, DIM, max_concurrency=1, max_batch_items=2))


async def test_list_says_which_documents_are_parked_and_how_far_they_got(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    ok = fake_openai_embeddings(DIM)
    state = {"calls": 0, "broken": True}

    def flaky(body: Any, headers: dict[str, str], target: Target) -> Any:
        state["calls"] += 1
        if state["broken"] and state["calls"] == 3:
            return 503, {}, {"error": {"message": "upstream overloaded"}}
        return ok(body, headers, target)

    fake_http_server.route("POST", "/v1/embeddings", flaky)
    sections = "\n\n".join(f"# Part {i}\n\nPart {i} talks about subject {i} at length." for i in range(6))
    async with ContextEngine(_config(database_url, fake_http_server)) as engine:
        done = (await engine.ingest(text="A short finished note.", name="done.md")).documents[0]
        waiting = (await engine.ingest(text=sections, name="waiting.md")).documents[0]
        assert (done.status, waiting.status) == ("completed", "embedding")
        listed = await call_knowledge_tool(engine, principals=TRUSTED, scope=UNSCOPED, action="list")
        state["broken"] = False
        await engine.resume_embeddings(waiting.document_id)
        after = await call_knowledge_tool(engine, principals=TRUSTED, scope=UNSCOPED, action="list")
    parked = {d["name"]: d["parked"] for d in listed["documents"]}
    assert parked["done.md"] is None
    assert parked["waiting.md"] is not None
    assert parked["waiting.md"]["reason"] == "embedding"
    # the finished note took the first request, the waiting one's first batch of two the second
    assert (parked["waiting.md"]["embedded_chunks"], parked["waiting.md"]["chunks"]) == (2, 6)
    assert "resume_embeddings" in parked["waiting.md"]["note"]
    assert {d["name"]: d["parked"] for d in after["documents"]} == {"done.md": None, "waiting.md": None}

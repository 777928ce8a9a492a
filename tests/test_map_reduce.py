"""map_reduce against a scripted model on 127.0.0.1: one answer per document, concurrent and bounded
model calls with their cost in ``usage``, the spreadsheet refusal before any call or runner, the
ACL, redaction, host runners, and the Anthropic wire format."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from context_engine import TRUSTED, ContextEngine
from context_engine.llm.structured import LLMNotConfigured
from context_engine.mapreduce import SpreadsheetsNeedCompute
from context_engine.redaction import RedactionPolicy, RedactionRule
from tests.conftest import make_config
from tests.fakes import FakeHTTPServer
from tests.knowledge_fakes import completion

# the tests' databases start migrated (a copy of the session's template; see tests/conftest.py)
pytestmark = pytest.mark.migrated()

QUESTION = "Does this contract renew automatically?"


class ContractJudge:
    """Answers from the document text in the prompt, slowly, counting how many calls overlap."""

    def __init__(self, delay: float = 0.2, broken: str | None = None):
        self.delay, self.broken = delay, broken
        self.now = self.peak = 0
        self.lock = threading.Lock()

    def __call__(self, body: Any, _h: dict[str, str], _t: Any) -> Any:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        try:
            time.sleep(self.delay)
            prompt = body["messages"][1]["content"]
            assert "response_format" not in body  # the shape is the caller's: no schema on the wire
            if self.broken and self.broken in prompt:
                return 200, {}, completion("no JSON here", 30)
            return 200, {}, completion(json.dumps({"answer": "auto-renews" in prompt}), 50)
        finally:
            with self.lock:
                self.now -= 1


@pytest.fixture
def server() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer() as fake:
        yield fake


def llm_settings(server: FakeHTTPServer) -> dict[str, Any]:
    return {"provider": "custom", "base_url": server.url("/v1"), "model": "m", "max_retries": 0, "timeout": 10}


@pytest.fixture
async def llm_engine(database_url: str, server: FakeHTTPServer) -> AsyncIterator[ContextEngine]:
    async with ContextEngine(make_config(database_url, llm=llm_settings(server))) as eng:
        yield eng


async def contracts(engine: ContextEngine, n: int, **kwargs: Any) -> dict[str, bool]:
    """``n`` contracts, every third one auto-renewing; name -> renews."""
    renews = {}
    for i in range(n):
        name = f"contract-{i:02d}.md"
        renews[name] = i % 3 == 0
        clause = "This agreement auto-renews each year." if renews[name] else "This agreement ends on 2025-12-31."
        await engine.ingest(text=f"# Contract {i}\n\n{clause}", name=name, source_id="legal", **kwargs)
    return renews


async def test_one_answer_per_document_concurrently_with_its_cost(
    llm_engine: ContextEngine, server: FakeHTTPServer
) -> None:
    renews = await contracts(llm_engine, 27)
    judge = ContractJudge()
    server.route("POST", "/v1/chat/completions", judge)
    out = await llm_engine.map_reduce(QUESTION, principals=TRUSTED)
    assert (out["success"], out["considered"], out["processed"], out["failed"]) == (True, 25, 25, 0)
    answers = {r["document_name"]: r["data"]["answer"] for r in out["results"]}
    assert len(answers) == 25 and all(answers[name] == renews[name] for name in answers)
    assert set(answers) == {f"contract-{i:02d}.md" for i in range(2, 27)}  # the newest 25
    usage = out["usage"]
    assert usage["llm_calls"] == 25 and usage["provider_tokens"] == {"llm": 25 * 50}
    assert 1 < judge.peak <= usage["concurrency"] == 4 and usage["max_in_flight"] == judge.peak
    assert "hint" not in out


async def test_a_document_whose_answer_never_parses_is_one_failed_entry(
    llm_engine: ContextEngine, server: FakeHTTPServer
) -> None:
    await contracts(llm_engine, 3)
    server.route("POST", "/v1/chat/completions", ContractJudge(delay=0, broken="contract-01.md"))
    out = await llm_engine.map_reduce(QUESTION, principals=TRUSTED, limit=3)
    assert (out["processed"], out["failed"]) == (2, 1)
    (failed,) = [r for r in out["results"] if "error" in r]
    assert failed["document_name"] == "contract-01.md" and "not valid JSON" in failed["error"]
    # the broken one was asked twice (the prompt path's one re-ask): 2 x 30 + 2 x 50
    assert len(server.requests) == 4 and out["usage"]["provider_tokens"] == {"llm": 160}


async def test_spreadsheets_are_refused_before_any_call_or_runner(
    llm_engine: ContextEngine, server: FakeHTTPServer
) -> None:
    await llm_engine.ingest(file=b"region,amount\r\nnorth,1\r\n", name="a.csv", source_id="fin")
    await llm_engine.ingest(file=b"region,amount\r\nsouth,2\r\n", name="b.csv", source_id="fin")
    called: list[str] = []

    async def runner(instruction: str, **_: Any) -> dict[str, Any]:
        called.append(instruction)
        return {}

    for kwargs in ({}, {"runner": runner}):
        with pytest.raises(SpreadsheetsNeedCompute) as refused:
            await llm_engine.map_reduce("total amount?", principals=TRUSTED, source_ids=["fin"], **kwargs)
        assert refused.value.code == "use_compute" and refused.value.status == 422
        assert refused.value.details["next_action"] == {"action": "compute", "query": "total amount?"}
    assert server.requests == [] and called == []


async def test_a_mixed_scope_runs_with_a_hint(llm_engine: ContextEngine, server: FakeHTTPServer) -> None:
    await llm_engine.ingest(file=b"region,amount\r\nnorth,1\r\n", name="a.csv", source_id="fin")
    await contracts(llm_engine, 2)
    server.route("POST", "/v1/chat/completions", ContractJudge(delay=0))
    out = await llm_engine.map_reduce(QUESTION, principals=TRUSTED)
    assert out["considered"] == 3 and out["hint"]["action"] == "compute" and "1 of these" in out["hint"]["reason"]


async def test_only_documents_the_caller_may_see_are_read_and_text_is_masked(
    llm_engine: ContextEngine, server: FakeHTTPServer
) -> None:
    await llm_engine.ingest(text="Owner ann@example.com. It auto-renews.", name="mine.md", source_id="s", acl=["a"])
    await llm_engine.ingest(text="Secret terms.", name="theirs.md", source_id="s", acl=["b"])
    server.route("POST", "/v1/chat/completions", ContractJudge(delay=0))
    policy = RedactionPolicy(rules=[RedactionRule(name="email", detector="email")])
    out = await llm_engine.map_reduce(QUESTION, principals=["a"], redaction=policy)
    assert [r["document_name"] for r in out["results"]] == ["mine.md"]
    sent = server.requests[0].body.decode()
    assert "ann@example.com" not in sent and "[EMAIL]" in sent and "Secret terms" not in sent


async def test_a_host_runner_gets_the_resolved_ids_and_its_reply_is_swept(llm_engine: ContextEngine) -> None:
    await contracts(llm_engine, 3)
    seen: list[dict[str, Any]] = []

    async def runner(instruction: str, **kwargs: Any) -> dict[str, Any]:
        seen.append(kwargs)
        return {"success": True, "results": [{"data": "mail bob@example.com"}]}

    policy = RedactionPolicy(rules=[RedactionRule(name="email", detector="email")])
    out = await llm_engine.map_reduce(QUESTION, principals=[], limit=2, runner=runner, redaction=policy)
    assert out == {"success": True, "results": [{"data": "mail [EMAIL]"}]}
    (call,) = seen
    assert len(call["document_ids"]) == 2 and call["limit"] == 2 and call["principals"] == []


async def test_map_reduce_without_a_model_is_off(engine: ContextEngine) -> None:
    with pytest.raises(LLMNotConfigured):
        await engine.map_reduce(QUESTION, principals=TRUSTED)


async def test_map_reduce_over_the_anthropic_wire_format(database_url: str, server: FakeHTTPServer) -> None:
    import anthropic  # noqa: F401  (the anthropic extra is part of the test install)

    def handler(body: Any, _h: dict[str, str], _t: Any) -> Any:
        assert "output_config" not in body and "tools" not in body
        text = json.dumps({"answer": "auto-renews" in body["messages"][0]["content"]})
        return 200, {}, {"id": "m", "type": "message", "role": "assistant", "model": "c",
                         "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                         "stop_sequence": None, "usage": {"input_tokens": 20, "output_tokens": 5}}

    server.route("POST", "/v1/messages", handler)
    llm = {"provider": "anthropic", "base_url": server.url(), "model": "c", "api_key": "k", "max_retries": 0}
    async with ContextEngine(make_config(database_url, llm=llm)) as eng:
        renews = await contracts(eng, 3)
        out = await eng.map_reduce(QUESTION, principals=TRUSTED)
    assert {r["document_name"]: r["data"]["answer"] for r in out["results"]} == renews
    assert out["usage"]["provider_tokens"] == {"llm": 75}

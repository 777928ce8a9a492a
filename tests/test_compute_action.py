"""The compute action end to end: a scripted model on 127.0.0.1 (OpenAI-compatible and Anthropic
wire formats) writes the code, the checker vets it, the worker runs it over frames rebuilt from a
real ingest. Covers off-by-default, the one rewrite (refused code, a missing frame key), redaction
before the model and on the way out, and host runners."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pandas as pd
import pytest

from context_engine import TRUSTED, ContextEngine
from context_engine.compute import ComputeConfig, ComputeDisabled, NoFrames, compute_over_frames
from context_engine.config import ContextEngineConfig
from context_engine.hooks import ErrorEvent, UsageEvent
from context_engine.llm import reset_native_schema_support
from context_engine.llm.structured import LLMNotConfigured
from context_engine.redaction import RedactionPolicy, RedactionRule
from context_engine.redaction.apply import Redactor
from tests.conftest import make_config
from tests.fakes import FakeHTTPServer, json_reply, sequence
from tests.knowledge_fakes import completion

# the tests' databases start migrated (a copy of the session's template; see tests/conftest.py)
pytestmark = pytest.mark.migrated()

ON = ComputeConfig(enable_code_execution=True, cpu_seconds=5, wall_seconds=60)
TOTAL = "result = float(dfs['sales']['amount'].sum())"


@pytest.fixture
def server() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer() as fake:
        yield fake


@pytest.fixture(autouse=True)
def _fresh_memo() -> Iterator[None]:
    reset_native_schema_support()
    yield
    reset_native_schema_support()


def llm_settings(server: FakeHTTPServer) -> dict[str, Any]:
    return {"provider": "custom", "base_url": server.url("/v1"), "model": "coder", "max_retries": 0, "timeout": 10}


def code_reply(code: str, tokens: int = 100) -> Any:
    return json_reply(200, completion(json.dumps({"code": code}), tokens))


def sent_prompt(server: FakeHTTPServer, index: int) -> str:
    return server.requests[index].json()["messages"][-1]["content"]


def csv_bytes(rows: list[list[Any]]) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue().encode()


SALES = [["region", "amount", "owner"]] + [
    ["north" if i % 2 else "south", i, f"user{i}@example.com"] for i in range(1, 501)
]


@pytest.fixture
async def llm_engine(database_url: str, server: FakeHTTPServer) -> AsyncIterator[ContextEngine]:
    async with ContextEngine(make_config(database_url, llm=llm_settings(server))) as eng:
        yield eng


# ------------------------------------------------------------------------------------ off by default
async def test_compute_is_off_by_default_and_says_so(llm_engine: ContextEngine, server: FakeHTTPServer) -> None:
    with pytest.raises(ComputeDisabled) as off:
        await llm_engine.compute("total amount", principals=TRUSTED)
    assert off.value.code == "compute_disabled" and "code execution is not enabled" in off.value.message
    with pytest.raises(ComputeDisabled):
        await compute_over_frames({"t": pd.DataFrame({"a": [1]})}, "sum", config=llm_engine.config)
    assert server.requests == []


async def test_compute_without_a_model_or_frames_is_refused_plainly() -> None:
    frames = {"t": pd.DataFrame({"a": [1]})}
    with pytest.raises(LLMNotConfigured) as no_llm:
        await compute_over_frames(frames, "sum", config=ContextEngineConfig(), settings=ON)
    assert no_llm.value.status == 501
    config = ContextEngineConfig(llm={"provider": "custom", "base_url": "http://127.0.0.1:9", "model": "m"})
    with pytest.raises(NoFrames):
        await compute_over_frames({}, "sum", config=config, settings=ON)


# ------------------------------------------------------------------------------------ stored sheets
async def test_a_total_over_every_row_of_a_stored_sheet(llm_engine: ContextEngine, server: FakeHTTPServer) -> None:
    report = await llm_engine.ingest(file=csv_bytes(SALES), name="sales.csv", source_id="fin")
    server.route("POST", "/v1/chat/completions", code_reply(TOTAL, 120))
    out = await llm_engine.compute("What is the total amount?", principals=TRUSTED, settings=ON)
    assert out["success"] and out["result"] == float(sum(range(1, 501)))
    assert (out["attempts"], out["provider_tokens"], out["error"]) == (1, {"llm_input": 110, "llm_output": 10}, None)
    assert out["documents_used"] == [report.documents[0].document_id] and out["frames"] == ["sales"]
    assert out["code"] == TOTAL and out["execution_time"] > 0
    body = server.requests[0].json()
    assert body["response_format"]["json_schema"]["name"] == "compute_code"
    prompt = sent_prompt(server, 0)
    assert "dfs['sales']: 500 rows" in prompt and "'amount' (int64)" in prompt and "Question: What is" in prompt


async def test_compute_reads_only_what_the_caller_may_see(llm_engine: ContextEngine, server: FakeHTTPServer) -> None:
    await llm_engine.ingest(file=csv_bytes(SALES), name="sales.csv", source_id="fin", acl=["finance"])
    server.route("POST", "/v1/chat/completions", code_reply(TOTAL))
    with pytest.raises(NoFrames):
        await llm_engine.compute("total", principals=["staff"], settings=ON)
    assert server.requests == []
    out = await llm_engine.compute("total", principals=["finance"], settings=ON)
    assert out["result"] == float(sum(range(1, 501)))


# ------------------------------------------------------------------------------------ the one rewrite
async def test_refused_code_buys_one_rewrite_with_the_refusal(
    llm_engine: ContextEngine, server: FakeHTTPServer
) -> None:
    await llm_engine.ingest(file=csv_bytes(SALES), name="sales.csv", source_id="fin")
    unsafe = "import os\nresult = os.getcwd()"
    server.route("POST", "/v1/chat/completions", sequence(code_reply(unsafe, 80), code_reply(TOTAL, 90)))
    errors: list[ErrorEvent] = []
    usage: list[UsageEvent] = []
    llm_engine.hooks.on_error, llm_engine.hooks.on_usage = errors.append, usage.append
    out = await llm_engine.compute("total", principals=TRUSTED, settings=ON)
    assert out["success"] and out["attempts"] == 2 and out["provider_tokens"] == {"llm_input": 150, "llm_output": 20}
    rewrite = sent_prompt(server, 1)
    assert "import os" in rewrite and "Import is not allowed" in rewrite
    # one failed attempt, one usage event carrying both calls' tokens
    (error,) = errors
    assert (error.stage, error.failure_reason, error.error[:10]) == ("compute_codegen", "unsafe_code", "attempt 1:")
    assert error.attempt == 1 and error.context == {"stage": "compute_codegen", "attempt": 1}
    assert [(u.kind, u.units, u.detail) for u in usage] == [("llm_tokens", 170, {"action": "compute", "attempts": 2})]


async def test_refused_twice_is_an_error_and_nothing_runs(llm_engine: ContextEngine, server: FakeHTTPServer) -> None:
    await llm_engine.ingest(file=csv_bytes(SALES), name="sales.csv", source_id="fin")
    server.route("POST", "/v1/chat/completions", code_reply("result = ().__class__"))
    out = await llm_engine.compute("total", principals=TRUSTED, settings=ON)
    assert (out["success"], out["error_code"], out["attempts"], out["result"]) == (False, "unsafe_code", 2, None)
    assert "'__class__'" in out["error"] and len(server.requests) == 2 and out["execution_time"] is None


async def test_a_missing_frame_key_buys_one_rewrite(llm_engine: ContextEngine, server: FakeHTTPServer) -> None:
    await llm_engine.ingest(file=csv_bytes(SALES), name="sales.csv", source_id="fin")
    await llm_engine.ingest(file=csv_bytes(SALES[:3]), name="costs.csv", source_id="fin")
    wrong = "result = float(dfs['sales']['amount'].sum())"
    right = "result = float(dfs['sales.csv']['amount'].sum())"
    server.route("POST", "/v1/chat/completions", sequence(code_reply(wrong), code_reply(right)))
    out = await llm_engine.compute("total of sales", principals=TRUSTED, settings=ON)
    assert out["success"] and out["attempts"] == 2 and out["result"] == float(sum(range(1, 501)))
    assert sorted(out["frames"]) == ["costs.csv", "sales.csv"]
    assert "no frame named 'sales'; available:" in sent_prompt(server, 1)
    assert "did you mean 'sales.csv'?" in sent_prompt(server, 1)


async def test_a_second_missing_key_is_reported(llm_engine: ContextEngine, server: FakeHTTPServer) -> None:
    await llm_engine.ingest(file=csv_bytes(SALES), name="sales.csv", source_id="fin")
    server.route("POST", "/v1/chat/completions", code_reply("result = dfs['revenue'].sum()"))
    out = await llm_engine.compute("total", principals=TRUSTED, settings=ON)
    assert (out["success"], out["error_code"], out["attempts"]) == (False, "frame_key", 2)
    assert out["error"] == "no frame named 'revenue'; available: ['sales']; did you mean 'sales'?"


async def test_other_runtime_errors_are_reported_not_retried(llm_engine: ContextEngine, server: FakeHTTPServer) -> None:
    await llm_engine.ingest(file=csv_bytes(SALES), name="sales.csv", source_id="fin")
    server.route("POST", "/v1/chat/completions", code_reply("result = dfs['sales']['no_such_column'].sum()"))
    out = await llm_engine.compute("total", principals=TRUSTED, settings=ON)
    assert (out["success"], out["error_code"], out["attempts"]) == (False, "runtime", 1)
    assert out["error"].startswith("KeyError")


# ------------------------------------------------------------------------------------ redaction
async def test_the_model_sees_masked_cells_and_headers_and_the_result_is_swept(server: FakeHTTPServer) -> None:
    policy = RedactionPolicy(rules=[RedactionRule(name="email", detector="email")])
    frames = {"people": pd.DataFrame({"ann@example.com": [1, 2], "owner": ["bob@example.com", "x"]})}
    code = "result = {'owners': dfs['people']['owner'].tolist(), 'cols': list(dfs['people'].columns)}"
    server.route("POST", "/v1/chat/completions", code_reply(code))
    config = ContextEngineConfig(llm=llm_settings(server))
    redactor = Redactor(policy, None, None)
    out = await compute_over_frames(frames, "who owns", config=config, settings=ON, redactor=redactor)
    assert out["result"] == {"owners": ["[EMAIL]", "x"], "cols": ["[EMAIL]", "owner"]}
    sent = server.requests[0].body.decode()
    assert "example.com" not in sent and "[EMAIL]" in sent


# ------------------------------------------------------------------------------------ wire formats
async def test_the_anthropic_wire_format_native_then_forced_tool(server: FakeHTTPServer) -> None:
    import anthropic  # noqa: F401  (the anthropic extra is part of the test install)
    frames = {"t": pd.DataFrame({"a": [1, 2, 3]})}

    def handler(body: Any, _h: dict[str, str], _t: Any) -> Any:
        usage = {"input_tokens": 30, "output_tokens": 10}
        if "output_config" in body:
            error = {"type": "invalid_request_error", "message": "output_config: Extra inputs are not permitted"}
            return 400, {}, {"type": "error", "error": error}
        code = {"code": "result = int(dfs['t']['a'].sum())"}
        tool = {"type": "tool_use", "id": "t1", "name": "compute_code", "input": code}
        return 200, {}, {"id": "m", "type": "message", "role": "assistant", "model": "c", "content": [tool],
                         "stop_reason": "tool_use", "stop_sequence": None, "usage": usage}

    server.route("POST", "/v1/messages", handler)
    llm = {"provider": "anthropic", "base_url": server.url(), "model": "c", "api_key": "k", "max_retries": 0}
    out = await compute_over_frames(frames, "sum a", config=ContextEngineConfig(llm=llm), settings=ON)
    assert out["success"] and out["result"] == 6 and out["provider_tokens"] == {"llm_input": 30, "llm_output": 10}
    assert server.requests[1].json()["tool_choice"] == {"type": "tool", "name": "compute_code"}


# ------------------------------------------------------------------------------------ host runners
async def test_a_host_code_runner_turns_compute_on_and_gets_checked_code(server: FakeHTTPServer) -> None:
    seen: list[tuple[str, list[str], float]] = []

    async def runner(code: str, context: dict[str, Any], seconds: float) -> dict[str, Any]:
        seen.append((code, sorted(context["dfs"]), seconds))
        return {"result": int(context["dfs"]["t"]["a"].sum()), "stdout": ""}

    server.route("POST", "/v1/chat/completions", code_reply("result = dfs['t']['a'].sum()"))
    config = ContextEngineConfig(llm=llm_settings(server))
    out = await compute_over_frames({"t": pd.DataFrame({"a": [4, 5]})}, "sum", config=config, code_runner=runner)
    assert out["success"] and out["result"] == 9 and seen == [("result = dfs['t']['a'].sum()", ["t"], 30.0)]


async def test_a_host_compute_runner_replaces_the_action_and_is_swept(llm_engine: ContextEngine) -> None:
    calls: list[dict[str, Any]] = []

    async def runner(instruction: str, **kwargs: Any) -> dict[str, Any]:
        calls.append({"instruction": instruction, **kwargs})
        return {"success": True, "result": "owner is ann@example.com", "documents_used": ["x"]}

    policy = RedactionPolicy(rules=[RedactionRule(name="email", detector="email")])
    out = await llm_engine.compute("who", principals=["staff"], source_ids=["fin"], runner=runner, redaction=policy)
    assert out == {"success": True, "result": "owner is [EMAIL]", "documents_used": ["x"]}
    assert calls == [{"instruction": "who", "source_ids": ["fin"], "document_ids": None, "principals": ["staff"]}]


async def test_a_sync_code_runner_given_to_the_engine_runs_off_the_event_loop(server: FakeHTTPServer) -> None:
    import threading

    threads: list[int] = []

    def runner(code: str, context: dict[str, Any], seconds: float) -> dict[str, Any]:
        threads.append(threading.get_ident())
        return {"result": int(context["dfs"]["t"]["a"].sum())}

    server.route("POST", "/v1/chat/completions", code_reply("result = dfs['t']['a'].sum()"))
    engine = ContextEngine(ContextEngineConfig(llm=llm_settings(server)), code_runner=runner)
    out = await engine.compute_over_frames({"t": pd.DataFrame({"a": [4, 5]})}, "sum")
    assert out["success"] and out["result"] == 9
    assert threads and threads[0] != threading.get_ident()

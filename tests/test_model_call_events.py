"""Model calls are observable: ``on_error`` events from structured calls (per failed attempt, terminal,
repair), from entity and structured extraction, and compute's attempt as a field; ``max_reasks``
and ``call_llm(response_schema=, schema_name=)``. Scripted OpenAI-compatible servers on 127.0.0.1
and real ``Hooks``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from context_engine import ContextEngine, call_llm, extract_structured_data
from context_engine.config import LLMConfig
from context_engine.graph.entities import ChunkText, extract
from context_engine.graph.errors import GraphExtractionFailed
from context_engine.hooks import ErrorEvent, Hooks
from context_engine.llm import StructuredCallError, build_llm, reset_native_schema_support, structured_call
from tests.conftest import make_config
from tests.fakes import FakeHTTPServer, json_reply, sequence
from tests.knowledge_fakes import completion

SCHEMA: dict[str, Any] = {"type": "object", "properties": {"total": {"type": ["number", "null"]}}}


@pytest.fixture
def server() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer() as fake:
        yield fake


@pytest.fixture(autouse=True)
def _fresh_memo() -> Iterator[None]:
    reset_native_schema_support()
    yield
    reset_native_schema_support()


@pytest.fixture
def errors() -> list[ErrorEvent]:
    return []


def llm_of(server: FakeHTTPServer) -> LLMConfig:
    return LLMConfig(provider="custom", base_url=server.url("/v1"), model="m", api_key="k", max_retries=0, timeout=10)


def prompt_only(*replies: Any) -> Any:
    """A server that refuses a response schema, so the call takes the prompt path."""
    answers = sequence(*replies)

    def handler(body: Any, headers: dict[str, str], target: Any) -> Any:
        if body.get("response_format", {}).get("type") == "json_schema":
            return 400, {}, {"error": {"message": "response_format json_schema is not supported"}}
        return answers(body, headers, target)

    return handler


def staged(events: list[ErrorEvent]) -> list[tuple[str, int | None, str | None]]:
    return [(e.stage, e.attempt, e.context.get("mode")) for e in events]


async def test_a_rescued_prompt_call_reports_its_failed_attempt_only(
    server: FakeHTTPServer, errors: list[ErrorEvent]
) -> None:
    server.route("POST", "/v1/chat/completions", prompt_only(
        json_reply(200, completion("Sure, it is 12.")), json_reply(200, completion('{"total": 12}'))
    ))  # fmt: skip
    result = await structured_call(llm_of(server), system="s", user="u", schema=SCHEMA, schema_name="invoice",
                                   hooks=Hooks(on_error=errors.append))  # fmt: skip
    assert result.attempts == 2
    assert staged(errors) == [("structured_call_attempt", 1, "prompt")]
    (event,) = errors
    assert event.failure_reason == "llm_invalid_reply" and event.context["schema_name"] == "invoice"
    assert "Sure, it is 12." not in event.error  # the model's own reply stays out of the event


async def test_a_failed_call_reports_each_attempt_and_then_the_outcome(
    server: FakeHTTPServer, errors: list[ErrorEvent]
) -> None:
    server.route("POST", "/v1/chat/completions", prompt_only(json_reply(200, completion("[]"))))
    with pytest.raises(StructuredCallError):
        await structured_call(llm_of(server), system="s", user="u", schema=SCHEMA, hooks=Hooks(on_error=errors.append))
    assert staged(errors) == [
        ("structured_call_attempt", 1, "prompt"),
        ("structured_call_attempt", 2, "prompt"),
        ("structured_call", 2, "prompt"),
    ]


async def test_a_provider_failure_is_an_attempt_and_the_outcome(
    server: FakeHTTPServer, errors: list[ErrorEvent]
) -> None:
    server.route("POST", "/v1/chat/completions", json_reply(500, {"error": {"message": "down"}}))
    with pytest.raises(Exception) as failed:
        await structured_call(llm_of(server), system="s", user="u", schema=SCHEMA, hooks=Hooks(on_error=errors.append))
    assert [e.stage for e in errors] == ["structured_call_attempt", "structured_call"]
    assert all(e.failure_reason == failed.value.code and e.attempt == 1 for e in errors)  # type: ignore[attr-defined]


async def test_an_enforced_reply_that_is_not_plain_json_is_a_repair_event(
    server: FakeHTTPServer, errors: list[ErrorEvent]
) -> None:
    server.route("POST", "/v1/chat/completions", json_reply(200, completion('```json\n{"total": 1}\n```')))
    result = await structured_call(llm_of(server), system="s", user="u", schema=SCHEMA,
                                   hooks=Hooks(on_error=errors.append))  # fmt: skip
    assert result.value == {"total": 1} and result.mode == "native"
    assert staged(errors) == [("structured_call_repair", 1, "native")]


@pytest.mark.parametrize(("max_reasks", "requests"), [(0, 1), (2, 3)])
async def test_max_reasks_bounds_the_prompt_paths_re_asks(
    server: FakeHTTPServer, max_reasks: int, requests: int
) -> None:
    server.route("POST", "/v1/chat/completions", prompt_only(json_reply(200, completion("no json here"))))
    with pytest.raises(StructuredCallError) as failed:
        await structured_call(llm_of(server), system="s", user="u", schema=SCHEMA, max_reasks=max_reasks)
    assert failed.value.attempts == requests
    asked = [r for r in server.requests_to("/v1/chat/completions") if "json_schema" not in r.body.decode()]
    assert len(asked) == requests


async def test_extract_structured_data_takes_max_reasks_and_refuses_max_retries(
    server: FakeHTTPServer, errors: list[ErrorEvent]
) -> None:
    with pytest.raises(TypeError, match="max_reasks"):
        await extract_structured_data("Total: 12", llm=llm_of(server), max_retries=1)
    assert server.requests == []
    server.route("POST", "/v1/chat/completions", prompt_only(json_reply(200, completion("not json"))))
    hooks = Hooks(on_error=errors.append)
    failed = await extract_structured_data("Total: 12", llm=llm_of(server), max_reasks=0, hooks=hooks)
    assert (failed["quality"], failed["failure_reason"], failed["attempts"]) == ("failed", "llm_invalid_reply", 1)
    outcome = [e for e in errors if e.stage == "structured_extraction"]
    assert len(outcome) == 1 and outcome[0].context == {
        "stage": "structured_extraction", "document_id": None, "mode": "prompt", "attempts": 1}  # fmt: skip
    assert staged(errors)[:2] == [("structured_call_attempt", 1, "prompt"), ("structured_call", 1, "prompt")]


@pytest.fixture
async def llm_engine(database_url: str, server: FakeHTTPServer) -> AsyncIterator[ContextEngine]:
    llm = {"provider": "custom", "base_url": server.url("/v1"), "model": "m", "max_retries": 0, "timeout": 10}
    async with ContextEngine(make_config(database_url, llm=llm)) as eng:
        yield eng


async def test_a_failed_extraction_of_a_stored_document_fires_one_outcome_event(
    llm_engine: ContextEngine, server: FakeHTTPServer, errors: list[ErrorEvent]
) -> None:
    report = await llm_engine.ingest(text="Invoice 7. Total due: 12.50", name="inv.txt", source_id="fin")
    doc = report.documents[0].document_id
    llm_engine.hooks.on_error = errors.append
    server.route("POST", "/v1/chat/completions", json_reply(200, completion('{"document_type": 5}')))
    failed = await llm_engine.extract_fields(doc, field_hints={"total": "number"})
    assert (failed["quality"], failed["stored"], failed["fields"]) == ("failed", False, {})
    assert [(e.stage, e.document_id) for e in errors] == [
        ("structured_call_attempt", None), ("structured_call", None), ("structured_extraction", doc)]  # fmt: skip
    assert errors[-1].context["mode"] == "native" and errors[-1].context["attempts"] == 1


async def test_a_failed_entity_extraction_batch_is_reported(server: FakeHTTPServer, errors: list[ErrorEvent]) -> None:
    server.route("POST", "/v1/chat/completions", json_reply(200, completion(json.dumps({"chunks": "nope"}))))
    llm = build_llm(llm_of(server))
    try:
        with pytest.raises(GraphExtractionFailed):
            await extract(llm, [ChunkText(1, "Acme supplies Widget Pro.")], hooks=Hooks(on_error=errors.append),
                          document_id="doc-1")  # fmt: skip
    finally:
        await llm.aclose()
    assert [e.stage for e in errors] == ["structured_call_attempt", "structured_call", "entity_extraction"]
    last = errors[-1]
    assert last.document_id == "doc-1" and last.context["mode"] == "native" and last.context["attempts"] == 1


async def test_call_llm_sends_the_response_schema_under_its_name_and_validates_nothing(
    server: FakeHTTPServer,
) -> None:
    server.route("POST", "/v1/chat/completions", json_reply(200, completion('{"total": "twelve"}', 9)))
    reply = await call_llm(llm_of(server), system="s", user="Total: 12", response_schema=SCHEMA, schema_name="invoice")
    assert (reply.text, reply.mode, reply.tokens) == ('{"total": "twelve"}', "native", 9)
    sent = server.requests[0].json()["response_format"]["json_schema"]
    assert sent["name"] == "invoice" and sent["schema"]["required"] == ["total"]
    plain = await call_llm(llm_of(server), user="hello")
    assert "response_format" not in server.requests[-1].json() and plain.text == '{"total": "twelve"}'

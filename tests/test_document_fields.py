"""Structured extraction after ingest and query_meta over it, against a scripted model on 127.0.0.1:
hinted fields are enforced and exact, open extraction is validated locally, rows follow the
document's version and lifetime, and query_meta returns every visible document's values."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from sqlalchemy import text as sql_text

from context_engine import TRUSTED, ContextEngine, extract_structured_data
from context_engine.config import LLMConfig
from context_engine.document_fields import extract_document_fields
from context_engine.errors import InvalidRequest, NotFound
from context_engine.hooks import ErrorEvent, Hooks
from context_engine.llm.structured import LLMNotConfigured
from context_engine.redaction import RedactionPolicy, RedactionRule
from context_engine.redaction.apply import Redactor
from tests.conftest import make_config
from tests.fakes import FakeHTTPServer
from tests.knowledge_fakes import completion

# the tests' databases start migrated (a copy of the session's template; see tests/conftest.py)
pytestmark = pytest.mark.migrated()

HINTS = {"invoice_date": "date", "total": "number", "customer": "string"}
INVOICE = "Invoice INV-{n}\nCustomer: {who}\nDate: 2024-0{n}-15\nTotal due: {total} EUR"


class FieldModel:
    """Reads the invoice text in the prompt; resolves field names by the words of the question."""

    def __init__(self) -> None:
        self.bodies: list[Any] = []

    def __call__(self, body: Any, _h: dict[str, str], _t: Any) -> Any:
        self.bodies.append(body)
        fmt = body.get("response_format") or {}
        name = fmt.get("json_schema", {}).get("name") if fmt.get("type") == "json_schema" else None
        prompt = body["messages"][-1]["content"]
        if name == "resolved_fields":
            question = prompt.split("Question:")[1]
            wanted = [f for f in ("invoice_date", "total", "customer") if f.split("_")[-1] in question]
            return 200, {}, completion(json.dumps({"fields": wanted}), 20)
        found = {
            "invoice_date": re.search(r"Date: (\S+)", prompt),
            "total": re.search(r"Total due: (\S+)", prompt),
            "customer": re.search(r"Customer: (\S+)", prompt),
        }
        fields: dict[str, Any] = {k: (m.group(1) if m else None) for k, m in found.items()}
        if fields["total"] is not None:
            fields["total"] = float(fields["total"])
        if name is None:  # open extraction: the model picks its own keys
            fields = {"due_total": fields["total"], "client": fields["customer"]}
        envelope = {"document_type": "invoice", "readability": "high", "fields": fields}
        return 200, {}, completion(json.dumps(envelope), 40)


@pytest.fixture
def server() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer() as fake:
        yield fake


def llm_of(server: FakeHTTPServer) -> LLMConfig:
    return LLMConfig(provider="custom", base_url=server.url("/v1"), model="m", api_key="secret-key", max_retries=0,
                     timeout=10)  # fmt: skip


@pytest.fixture
async def llm_engine(database_url: str, server: FakeHTTPServer) -> AsyncIterator[ContextEngine]:
    llm = {"provider": "custom", "base_url": server.url("/v1"), "model": "m", "max_retries": 0, "timeout": 10,
           "api_key": "secret-key"}  # fmt: skip
    async with ContextEngine(make_config(database_url, llm=llm)) as eng:
        yield eng


async def invoice(engine: ContextEngine, n: int, who: str, total: str, **kwargs: Any) -> str:
    text = INVOICE.format(n=n, who=who, total=total)
    report = await engine.ingest(text=text, name=f"inv-{n}.txt", source_id="fin", mime="text/plain", **kwargs)
    return report.documents[0].document_id


async def test_hinted_extraction_enforces_exactly_the_hinted_keys(
    llm_engine: ContextEngine, server: FakeHTTPServer
) -> None:
    model = FieldModel()
    server.route("POST", "/v1/chat/completions", model)
    doc = await invoice(llm_engine, 1, "acme", "1200.50")
    out = await llm_engine.extract_fields(doc, field_hints=HINTS)
    assert out["stored"] and out["mode"] == "native" and out["document_type"] == "invoice"
    assert out["fields"] == {"invoice_date": "2024-01-15", "total": 1200.5, "customer": "acme"}
    assert out["field_types"] == HINTS
    schema = model.bodies[0]["response_format"]["json_schema"]["schema"]["properties"]["fields"]
    assert schema["required"] == list(HINTS) and schema["additionalProperties"] is False
    assert schema["properties"]["total"]["type"] == ["number", "null"]


async def test_open_extraction_sends_no_schema_and_is_validated_here(
    llm_engine: ContextEngine, server: FakeHTTPServer
) -> None:
    model = FieldModel()
    server.route("POST", "/v1/chat/completions", model)
    doc = await invoice(llm_engine, 2, "globex", "99")
    out = await llm_engine.extract_fields(doc)
    assert out["mode"] == "prompt" and out["fields"] == {"due_total": 99.0, "client": "globex"}
    assert out["field_types"] == {"due_total": "number", "client": "string"}
    body = model.bodies[0]
    assert "response_format" not in body and '"additionalProperties"' in body["messages"][0]["content"]


async def test_bad_hints_and_unknown_documents_fail_before_any_request(
    llm_engine: ContextEngine, server: FakeHTTPServer
) -> None:
    doc = await invoice(llm_engine, 3, "initech", "5")
    too_many = {f"f{i}": "string" for i in range(60)}
    for hints in ({"total": "money"}, {"__class__": "string"}, {}, too_many):
        with pytest.raises(InvalidRequest):
            await llm_engine.extract_fields(doc, field_hints=hints)
    with pytest.raises(NotFound):
        await llm_engine.extract_fields("7b0c5b46-0000-4000-8000-000000000000")
    assert server.requests == []


async def test_fields_follow_the_document_version_and_its_deletion(
    llm_engine: ContextEngine, server: FakeHTTPServer
) -> None:
    server.route("POST", "/v1/chat/completions", FieldModel())
    doc = await invoice(llm_engine, 4, "umbrella", "10")
    sql = await llm_engine.database()
    await invoice(llm_engine, 4, "umbrella", "20")  # same name and source: version 2 replaces version 1
    stale = await extract_document_fields(sql, doc, 1, ["Total due: 10"], llm=llm_engine.config.llm, field_hints=HINTS)
    assert stale["stored"] is False
    await llm_engine.extract_fields(doc, field_hints=HINTS)
    async with sql.connect() as conn:
        row = (await conn.execute(sql_text("SELECT version, fields FROM ce_document_fields"))).mappings().one()
    assert row["version"] == 2 and row["fields"]["total"] == 20.0
    await llm_engine.delete_document(doc, principals=TRUSTED)
    async with sql.connect() as conn:
        assert await conn.scalar(sql_text("SELECT count(*) FROM ce_document_fields")) == 0


async def test_query_meta_returns_each_visible_documents_values_unfiltered(
    llm_engine: ContextEngine, server: FakeHTTPServer
) -> None:
    server.route("POST", "/v1/chat/completions", FieldModel())
    small = await invoice(llm_engine, 5, "ann@example.com", "10", acl=["finance"])
    large = await invoice(llm_engine, 6, "hooli", "5000", acl=["finance"])
    hidden = await invoice(llm_engine, 7, "secret", "777", acl=["board"])
    for doc in (small, large, hidden):
        await llm_engine.extract_fields(doc, field_hints=HINTS)
    server.clear()
    policy = RedactionPolicy(rules=[RedactionRule(name="email", detector="email")])
    out = await llm_engine.query_meta(
        "invoices with a total over 1000: their total and date", principals=["finance"], redaction=policy
    )
    assert [f["name"] for f in out["resolved_fields"]] == ["invoice_date", "total"]
    by_id = {d["id"]: d["structured_data"] for d in out["documents"]}
    assert by_id == {
        small: {"invoice_date": "2024-05-15", "total": 10.0},  # not filtered by value: compare yourself
        large: {"invoice_date": "2024-06-15", "total": 5000.0},
    }
    assert out["count"] == 2 and out["usage"]["provider_tokens"] == {"llm": 20}
    names = server.requests[0].json()["response_format"]["json_schema"]["schema"]["properties"]["fields"]
    assert names["items"]["enum"] == ["customer", "invoice_date", "total"]
    customers = await llm_engine.query_meta("the customer", principals=["finance"], redaction=policy)
    assert sorted(d["structured_data"]["customer"] for d in customers["documents"]) == ["[EMAIL]", "hooli"]


async def test_query_meta_with_nothing_extracted_calls_no_model(
    llm_engine: ContextEngine, server: FakeHTTPServer
) -> None:
    await invoice(llm_engine, 8, "x", "1")
    out = await llm_engine.query_meta("the totals", principals=TRUSTED)
    assert (out["success"], out["documents"], out["count"]) == (True, [], 0) and "no document" in out["note"]
    assert server.requests == []


async def test_query_meta_without_a_model_is_off(engine: ContextEngine) -> None:
    with pytest.raises(LLMNotConfigured) as off:
        await engine.query_meta("the totals", principals=TRUSTED)
    assert off.value.code == "llm_not_configured"


# ------------------------------------------------------------------------------ the quality envelope
def scripted(*contents: str) -> Any:
    """A model that answers each request with the next of ``contents`` (the last one from then on)."""
    answers = list(contents)

    def handler(body: Any, _h: dict[str, str], _t: Any) -> Any:
        content = answers.pop(0) if len(answers) > 1 else answers[0]
        return 200, {}, completion(content, 15)

    return handler


def outcome_events(events: list[ErrorEvent]) -> list[ErrorEvent]:
    return [e for e in events if e.stage == "structured_extraction"]


async def test_an_empty_extraction_is_not_a_failed_one(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/chat/completions", scripted('{"document_type": "memo", "readability": "medium", '
                                                          '"fields": {}}'))  # fmt: skip
    out = await extract_structured_data("A memo that states no facts.", llm=llm_of(server))
    assert (out["quality"], out["readability"], out["fields"], out["failure_reason"]) == ("medium", "medium", {}, None)
    assert out["error"] is None and out["attempts"] == 1
    body = server.requests[0].json()
    assert '"readability"' in body["messages"][0]["content"]  # the envelope's rating is part of the asked shape


async def test_invalid_json_past_max_reasks_is_quality_failed(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/chat/completions", scripted("Sure! The total is 12 EUR."))
    errors: list[ErrorEvent] = []
    out = await extract_structured_data("Total: 12", llm=llm_of(server), max_reasks=1,
                                        hooks=Hooks(on_error=errors.append))  # fmt: skip
    assert (out["quality"], out["readability"], out["document_type"], out["fields"]) == ("failed", None, None, {})
    assert (out["failure_reason"], out["mode"], out["attempts"]) == ("llm_invalid_reply", "prompt", 2)
    assert out["tokens"] == 30  # both paid attempts are counted
    assert "Sure!" not in out["error"]  # the model's own reply stays out of the envelope
    assert len(server.requests) == 2
    (event,) = outcome_events(errors)
    assert (event.failure_reason, event.context["attempts"]) == ("llm_invalid_reply", 2)


@pytest.mark.parametrize("rating", [None, "excellent"])
async def test_a_missing_or_unknown_readability_fails_rather_than_defaulting(
    server: FakeHTTPServer, rating: str | None
) -> None:
    envelope: dict[str, Any] = {"document_type": "invoice", "fields": {"total": 12}}
    if rating is not None:
        envelope["readability"] = rating
    server.route("POST", "/v1/chat/completions", scripted(json.dumps(envelope)))
    out = await extract_structured_data("Total: 12", llm=llm_of(server))
    assert (out["quality"], out["failure_reason"], out["fields"]) == ("failed", "llm_invalid_reply", {})
    assert "readability" in out["error"]
    hinted = await extract_structured_data("Total: 12", llm=llm_of(server), field_hints={"total": "number"})
    assert hinted["quality"] == "failed" and hinted["mode"] == "native"  # enforced: refused, not re-asked


async def test_a_model_that_is_down_is_quality_failed_and_keeps_what_was_stored(
    llm_engine: ContextEngine, server: FakeHTTPServer
) -> None:
    server.route("POST", "/v1/chat/completions", FieldModel())
    doc = await invoice(llm_engine, 9, "wayne", "75")
    first = await llm_engine.extract_fields(doc, field_hints=HINTS)
    assert first["quality"] == "high" and first["stored"] is True
    errors: list[ErrorEvent] = []
    llm_engine.hooks.on_error = errors.append

    def down(_body: Any, headers: dict[str, str], _t: Any) -> Any:
        return 503, {}, {"error": {"message": f"overloaded ({headers.get('authorization')})"}}

    server.route("POST", "/v1/chat/completions", down)
    out = await llm_engine.extract_fields(doc, field_hints=HINTS)
    assert (out["quality"], out["stored"], out["failure_reason"]) == ("failed", False, "provider_unavailable")
    assert out["attempts"] == 1 and out["fields"] == {}
    assert "secret-key" not in json.dumps(out)
    (event,) = outcome_events(errors)
    assert (event.document_id, event.failure_reason) == (doc, "provider_unavailable")
    sql = await llm_engine.database()
    async with sql.connect() as conn:
        kept = (await conn.execute(sql_text("SELECT fields FROM ce_document_fields"))).scalar_one()
    assert kept["total"] == 75.0  # a failure overwrites nothing


async def test_no_readable_text_is_quality_failed_without_a_model_call(server: FakeHTTPServer) -> None:
    errors: list[ErrorEvent] = []
    everything = RedactionRule(name="all", pattern=r"(?s).+", action="remove")
    remove_all = Redactor(RedactionPolicy(rules=[everything]), None, None)
    for text, redactor in (("  \n\t ", None), ("Total: 12", remove_all)):
        out = await extract_structured_data(text, llm=llm_of(server), redactor=redactor,
                                            hooks=Hooks(on_error=errors.append))  # fmt: skip
        assert (out["quality"], out["failure_reason"], out["attempts"], out["mode"]) == (
            "failed", "no_readable_text", 0, None)  # fmt: skip
    assert server.requests == []
    assert [e.failure_reason for e in outcome_events(errors)] == ["no_readable_text"] * 2

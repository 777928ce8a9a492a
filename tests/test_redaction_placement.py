"""Placement: with an output policy on, no raw PII reaches a hosted reranker or an LLM.

A fake rerank server and a fake LLM server record every byte they receive; the caller still
gets correctly ranked, masked hits.
"""

from __future__ import annotations

from typing import Any

from context_engine import TRUSTED, ContextEngine
from context_engine.redaction import RedactionPolicy, RedactionRule
from tests.conftest import make_config
from tests.fakes.http_server import FakeHTTPServer, fake_http_server  # noqa: F401
from tests.knowledge_fakes import chat, judge_by_words, rerank_api, split_into

EMAIL = "fox.mulder@fbi.example.com"
PHONE = "+1 202 555 0143"
CARD = "5555 5555 5555 4444"
RAW = (EMAIL, PHONE, CARD, "202 555 0143", "5555555555554444")

POLICY = RedactionPolicy(
    rules=[
        RedactionRule(name="email", detector="email"),
        RedactionRule(name="phone", detector="phone"),
        RedactionRule(name="card", detector="credit_card"),
    ]
)

DOCS = {
    "escalation.md": f"# Escalation\n\nFor a lease dispute call the duty officer on {PHONE} or mail {EMAIL}.",
    "billing.md": f"# Billing\n\nLease deposits are charged to the corporate card {CARD} within five days.",
    "notice.md": "# Notice\n\nA lease notice must be sent by registered letter ninety days ahead.",
    "parking.md": "# Parking\n\nThe parking garage opens at seven and closes at midnight.",
}


def _no_raw(server: FakeHTTPServer) -> None:
    for request in server.requests:
        body = request.body.decode("utf-8", "replace")
        for raw in RAW:
            assert raw not in body, (request.path, raw)


async def test_reranker_and_llm_receive_only_masked_text(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    server = fake_http_server

    def score(_query: str, doc: str) -> float:
        return 0.9 if "duty officer" in doc else 0.2

    server.route("POST", "/v2/rerank", rerank_api(score))
    server.route(
        "POST",
        "/v1/chat/completions",
        chat(subqueries=split_into("who handles a lease dispute", "how are lease deposits charged")),
    )
    config = make_config(
        database_url,
        redaction=POLICY,
        llm={"provider": "custom", "base_url": server.url("/v1"), "model": "fake", "max_retries": 0, "timeout": 5},
        rerank={"provider": "cohere", "base_url": server.url(), "api_key": "k", "timeout": 5},
    )
    async with ContextEngine(config) as engine:
        for name, body in DOCS.items():
            await engine.ingest(text=body, name=name)
        result = await engine.knowledge_query(
            "Who handles a lease dispute and how are lease deposits charged?", top_k=2, principals=TRUSTED
        )
        search = await engine.search("duty officer lease card", principals=TRUSTED, top_k=4)
    assert server.requests_to("/v2/rerank"), "the reranker was called"
    _no_raw(server)
    dumped = result.model_dump_json() + search.model_dump_json()
    assert not any(raw in dumped for raw in RAW)
    assert result.trace.rerank_applied is True
    assert result.matches[0].source_name == "escalation.md"  # still ranked by the judge's verdict
    assert "[PHONE]" in result.matches[0].content and "[EMAIL]" in result.matches[0].content
    assert any("[CARD]" in h.chunk_text for h in search.hits)


async def test_llm_judge_sees_masked_passages(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    server = fake_http_server
    server.route("POST", "/v1/chat/completions", chat(relevance=judge_by_words({"officer": 9, "deposits": 6})))
    llm: dict[str, Any] = {"provider": "custom", "base_url": server.url("/v1"), "model": "fake", "max_retries": 0}
    async with ContextEngine(make_config(database_url, redaction=POLICY, llm=llm)) as engine:
        for name, body in DOCS.items():
            await engine.ingest(text=body, name=name)
        result = await engine.knowledge_query("lease officer deposits", top_k=2, expand=False, principals=TRUSTED)
    assert server.requests, "the judge was asked"
    _no_raw(server)
    assert result.trace.rerank_applied is True
    assert [m.source_name for m in result.matches] == ["escalation.md", "billing.md"]

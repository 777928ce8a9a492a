"""Rerankers over real HTTP against a scripted server on 127.0.0.1: Cohere, Voyage, Jina and the LLM
judge; the guard arithmetic they feed (Kendall's tau-b, the relevance floor, the fallback order)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from context_engine.config import ContextEngineConfig, LLMConfig, RerankConfig
from context_engine.errors import ConfigError, ProviderError
from context_engine.knowledge import guard
from context_engine.llm import StructuredCallError, build_llm
from context_engine.rerank import build_reranker
from context_engine.rerank.http import HttpReranker
from context_engine.rerank.llm_judge import LLMJudgeReranker
from tests.fakes import FakeHTTPServer, json_reply, sequence
from tests.knowledge_fakes import chat, judge_by_words, malformed, rerank_api

SECRET = "rk-test-secret-key-abcdef"
PASSAGES = ["The notice period is six months.", "Parking is free.", "Notice must be given in writing."]


@pytest.fixture
def server() -> Iterator[FakeHTTPServer]:
    """A scripted HTTP server on 127.0.0.1 playing the LLM and rerank providers for one test."""
    with FakeHTTPServer() as fake:
        yield fake


def score_notice(_query: str, doc: str) -> float:
    return 0.9 if "notice" in doc.lower() else 0.02


def config(provider: str, server: FakeHTTPServer, **overrides: Any) -> RerankConfig:
    return RerankConfig(provider=provider, base_url=server.url(), api_key=SECRET, **overrides)


@pytest.mark.parametrize(
    ("provider", "path", "count_field", "results_key"),
    [
        ("cohere", "/v2/rerank", "top_n", "results"),
        ("voyage", "/v1/rerank", "top_k", "data"),
        ("jina", "/v1/rerank", "top_n", "results"),
    ],
)
async def test_rerank_apis(
    server: FakeHTTPServer, provider: str, path: str, count_field: str, results_key: str
) -> None:
    server.route("POST", path, rerank_api(score_notice, results_key=results_key))
    reranker = HttpReranker(config(provider, server))
    result = await reranker.rerank("notice period?", PASSAGES)
    await reranker.aclose()
    assert result.scores == [0.9, 0.02, 0.9]  # mapped back by index (the reply is sorted by score)
    (request,) = server.requests
    body = request.json()
    assert body["query"] == "notice period?" and body["documents"] == PASSAGES
    assert body[count_field] == 3 and body["model"] == reranker.model
    assert request.header("authorization") == f"Bearer {SECRET}"
    assert result.tokens == 21


async def test_a_reply_without_an_index_is_an_error(server: FakeHTTPServer) -> None:
    server.route("POST", "/v2/rerank", json_reply(200, {"results": [{"relevance_score": 0.5}]}))
    with pytest.raises(ProviderError, match="not a rerank result"):
        await HttpReranker(config("cohere", server)).rerank("q", PASSAGES)


async def test_rerank_errors_are_redacted_and_retries_configurable(server: FakeHTTPServer) -> None:
    server.route("POST", "/v2/rerank", json_reply(401, {"message": f"invalid api token {SECRET}"}))
    with pytest.raises(ProviderError) as failed:
        await HttpReranker(config("cohere", server, max_retries=3)).rerank("q", PASSAGES)
    assert failed.value.code == "provider_rejected" and SECRET not in str(failed.value)
    assert len(server.requests) == 1  # a 401 is final
    server.clear()
    server.route("POST", "/v2/rerank", sequence(json_reply(503, {}), rerank_api(score_notice)))
    reranker = HttpReranker(config("cohere", server, max_retries=1))
    reranker.backoff_base = 0.01
    assert (await reranker.rerank("q", PASSAGES)).scores[0] == 0.9
    assert len(server.requests) == 2


async def test_a_host_client_is_used_for_purpose_reranker_and_never_closed(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/rerank", rerank_api(score_notice, results_key="data"))
    purposes: list[str] = []
    async with httpx.AsyncClient() as host:

        def factory(purpose: str) -> httpx.AsyncClient:
            purposes.append(purpose)
            return host

        reranker = HttpReranker(config("voyage", server), factory)
        await reranker.rerank("q", PASSAGES)
        await reranker.aclose()
        assert purposes == ["reranker"] and not host.is_closed


def llm_config(server: FakeHTTPServer) -> LLMConfig:
    return LLMConfig(provider="custom", base_url=server.url("/v1"), model="judge", max_retries=0)


async def test_the_llm_judge_scores_every_passage_on_0_to_1(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/chat/completions", chat(relevance=judge_by_words({"notice": 9})))
    judge = LLMJudgeReranker(build_llm(llm_config(server)))
    result = await judge.rerank("What is the notice period?", PASSAGES)
    await judge.aclose()
    assert result.scores == [0.9, 0.1, 0.9] and result.tokens == 50
    prompt = server.requests[0].json()["messages"][1]["content"]
    assert "Question: What is the notice period?" in prompt and "[1] Parking is free." in prompt


async def test_the_llm_judge_ignores_invented_and_repeated_indices(server: FakeHTTPServer) -> None:
    content = '{"scores": [{"index": 7, "score": 10}, {"index": 1, "score": 8}, {"index": 1, "score": 0}]}'
    server.route("POST", "/v1/chat/completions", chat(relevance=lambda body: content))
    judge = LLMJudgeReranker(build_llm(llm_config(server)))
    assert (await judge.rerank("q", PASSAGES)).scores == [None, 0.8, None]


async def test_a_malformed_judge_reply_under_an_enforced_schema_is_an_error_not_re_asked(
    server: FakeHTTPServer,
) -> None:
    server.route("POST", "/v1/chat/completions", chat(relevance=malformed))
    judge = LLMJudgeReranker(build_llm(llm_config(server)))
    with pytest.raises(StructuredCallError) as failed:
        await judge.rerank("q", PASSAGES)
    assert failed.value.mode == "native" and failed.value.attempts == 1 and len(server.requests) == 1


def test_which_judge_is_built() -> None:
    llm = {"provider": "custom", "base_url": "http://127.0.0.1:9", "model": "m"}
    assert build_reranker(ContextEngineConfig()) is None
    assert isinstance(build_reranker(ContextEngineConfig(llm=llm)), LLMJudgeReranker)
    cohere = ContextEngineConfig(llm=llm, rerank={"provider": "cohere", "api_key": "k"})
    assert isinstance(build_reranker(cohere), HttpReranker)
    with pytest.raises(ConfigError, match="llm section"):
        build_reranker(ContextEngineConfig(rerank={"provider": "llm"}))
    with pytest.raises(ConfigError, match=r"rerank\.api_key"):
        build_reranker(ContextEngineConfig(rerank={"provider": "jina"}))


# ------------------------------------------------------------------------------------ guard arithmetic
def test_kendall_tau() -> None:
    assert guard.kendall_tau([5, 4, 3, 2]) == 1.0
    assert guard.kendall_tau([1, 2, 3, 4]) == -1.0
    assert guard.kendall_tau([3, 3, 3]) == 0.0  # no order expressed
    sparse = [0.0] * 19 + [1.0]  # only the last of 20 is relevant: 19 disagreeing pairs of 190
    assert guard.kendall_tau(sparse) == pytest.approx(-0.1)
    halves = [0.0] * 10 + [1.0] * 10  # the bottom half above the top half
    assert guard.kendall_tau(halves) == pytest.approx(-100 / 190)
    assert guard.kendall_tau([3, 4, 1, 2]) == pytest.approx(1 / 3)  # two adjacent swaps
    assert guard.kendall_tau([1, None, 0.5]) == pytest.approx(1 / 3)  # unscored ranks last
    assert guard.kendall_tau([0.9]) == 0.0


def test_verdict_guards() -> None:
    floor, tau = 0.1, -0.2
    assert guard.verdict([0.9, 0.2, 0.5], relevance_floor=floor, min_tau=tau)[:2] == (True, "applied")
    assert guard.verdict([0.05, 0.0, 0.01], relevance_floor=floor, min_tau=tau)[:2] == (False, "nothing_relevant")
    assert guard.verdict([None, None], relevance_floor=floor, min_tau=tau)[:2] == (False, "nothing_relevant")
    assert guard.verdict([0.1, 0.2, 0.3, 0.4], relevance_floor=floor, min_tau=tau)[:2] == (
        False,
        "contradicts_consensus",
    )
    # a judge that promotes the last passage but otherwise agrees keeps its verdict
    assert guard.verdict([0.8, 0.7, 0.6, 0.5, 0.9], relevance_floor=floor, min_tau=tau)[0] is True


def test_fallback_and_judged_orders() -> None:
    passages = ["Parking rules", "Notice period of the lease", "The lease notice is six months"]
    assert guard.deterministic_order("What is the lease notice period?", passages) == [1, 2, 0]
    assert guard.judged_order([0.2, 0.9, 0.9, None]) == [1, 2, 0, 3]

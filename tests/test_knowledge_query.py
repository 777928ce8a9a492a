"""``ContextEngine.knowledge_query`` on a real PostgreSQL, with the LLM and rerank providers talking
real HTTP to scripted servers on 127.0.0.1: expansion, the no-model path, every rerank guard firing
or not, enumeration widening, agents, ACLs and the fields of every match.

One small corpus is ingested once for the module (the local embedder is slow on a loaded machine);
each test builds its own engine on it with the model settings it needs, sharing one embedder.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest

from context_engine import TRUSTED, ContextEngine, InvalidRequest, NotFound
from context_engine.config import EmbeddingConfig
from context_engine.embeddings.base import Embedder
from context_engine.embeddings.factory import build_embedder
from context_engine.knowledge import shape
from context_engine.knowledge.models import KnowledgeResult
from tests.conftest import make_config
from tests.fakes import FakeHTTPServer
from tests.knowledge_fakes import (
    Counter,
    chat,
    first_user,
    judge_all,
    judge_by_words,
    judge_inverted,
    malformed,
    rerank_api,
    slow,
    split_into,
)

LEASE = (
    "# Article 12 - Termination\n\n"
    "The tenant may terminate the lease at the end of each three-year period by giving six months' notice "
    "by registered letter.\n\n"
    "# Article 14 - Signatures\n\n"
    "The lease is signed by the managing director of Dupont SARL and by the landlord."
)
DEADLINES = (
    "# Deadlines\n\n"
    "| Deadline | Date |\n|---|---|\n| Rent review | 1 March |\n| Insurance renewal | 30 June |\n"
    "| Notice of termination | 30 September |\n\n"
    "# Notes\n\n"
    "Each deadline in the table is binding on both parties, and a missed deadline costs a penalty."
)
PARKING = "Parking spaces in the garage are assigned by the facilities team; the deadline to ask is Friday."
HR = "# Salaries\n\nThe salary review deadline for managers is 15 November."
OFFICE = (
    "# Office\n\nThe office closes at 6 pm and visitors sign in at reception.\n\n"
    "# Reminders\n\nThe finance team emails deadline reminders every Monday morning."
)
DOCS = [
    ("lease.md", LEASE, "dupont", []),
    ("deadlines.md", DEADLINES, "dupont", []),
    ("parking.md", PARKING, "facilities", []),
    ("salaries.md", HR, "hr", ["group:hr"]),
    ("office.md", OFFICE, "general", []),
]
NOTICE_Q = "How much notice does the tenant need to give to terminate the lease?"
COMPOUND_Q = "What is the notice period and who signs the lease?"


# ---------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
async def embedder() -> AsyncIterator[Embedder]:
    shared = build_embedder(EmbeddingConfig())
    yield shared
    await shared.aclose()


@pytest.fixture
def server() -> Iterator[FakeHTTPServer]:
    """A scripted HTTP server on 127.0.0.1 playing the LLM and rerank providers for one test."""
    with FakeHTTPServer() as fake:
        yield fake


@pytest.fixture(scope="module")
async def corpus(pg_base_url: str, embedder: Embedder) -> AsyncIterator[dict[str, Any]]:
    """A database holding the corpus: ``{"url": ..., "ids": {name: document id}}``."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_base_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    head, _, query = pg_base_url.partition("?")
    url = f"{head.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")
    ids = {}
    async with ContextEngine(make_config(url), embedder=embedder) as eng:
        for doc, body, source, acl in DOCS:
            report = await eng.ingest(text=body, name=doc, source_id=source, acl=acl, principals=TRUSTED)
            assert report.documents[0].status == "completed", report
            ids[doc] = report.documents[0].document_id
    try:
        yield {"url": url, "ids": ids}
    finally:
        with psycopg.connect(pg_base_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def llm_settings(server: FakeHTTPServer) -> dict[str, Any]:
    return {"provider": "custom", "base_url": server.url("/v1"), "model": "fake-chat", "max_retries": 0, "timeout": 5}


def engine_for(corpus: dict[str, Any], embedder: Embedder, **overrides: Any) -> ContextEngine:
    return ContextEngine(make_config(corpus["url"], **overrides), embedder=embedder)


async def ask(eng: ContextEngine, query: str, **kwargs: Any) -> KnowledgeResult:
    kwargs.setdefault("principals", TRUSTED)
    return await eng.knowledge_query(query, **kwargs)


def contents(result: KnowledgeResult) -> list[str]:
    return [m.content for m in result.matches]


# ---------------------------------------------------------------------------------- the no-model path
async def test_no_model_is_called_with_expand_and_rerank_off(
    corpus: dict[str, Any], embedder: Embedder, server: FakeHTTPServer
) -> None:
    counter = Counter(chat(sub_queries=split_into("a?", "b?"), relevance=judge_all(9)))
    server.route("POST", "/v1/chat/completions", counter)
    async with engine_for(corpus, embedder, llm=llm_settings(server)) as eng:
        result = await ask(eng, COMPOUND_Q, expand=False, rerank=False, top_k=3)
    assert server.requests == [] and counter.calls == 0
    trace = result.trace
    assert trace.queries == [COMPOUND_Q] and trace.tokens_used == 0 and trace.rerank_applied is False
    assert trace.rerank_reason == "not_requested" and trace.timings.expand_ms == 0 and trace.timings.rerank_ms == 0
    assert len(result.matches) == 3 and all(m.rerank_score is None for m in result.matches)
    assert "six months' notice" in " ".join(contents(result))


async def test_without_any_model_configured_the_defaults_call_nothing(
    corpus: dict[str, Any], embedder: Embedder
) -> None:
    async with engine_for(corpus, embedder) as eng:
        result = await ask(eng, COMPOUND_Q)
    assert result.trace.queries == [COMPOUND_Q] and result.trace.rerank_reason == "no_reranker"
    assert result.trace.tokens_used == 0 and result.matches


# ---------------------------------------------------------------------------------- the fields
async def test_every_match_field(corpus: dict[str, Any], embedder: Embedder) -> None:
    async with engine_for(corpus, embedder) as eng:
        first = await ask(eng, NOTICE_Q, top_k=20)
        again = await ask(eng, NOTICE_Q, top_k=20)
    assert [m.chunk_id for m in first.matches] == [m.chunk_id for m in again.matches]  # stable across calls
    top = first.matches[0]
    assert top.source_id == corpus["ids"]["lease.md"] and top.source_name == "lease.md"
    assert (top.collection_id, top.dossier_name) == ("dupont", "dupont")
    assert top.section == "Article 12 - Termination" and top.page is None
    assert top.matched_by == ["fts", "vector"]  # registry order, as in /search
    for match in first.matches:
        assert isinstance(match.chunk_id, str) and match.chunk_id.isdigit()
        assert match.similarity is not None and 0.0 <= match.similarity <= 1.0
        assert len(match.content) <= shape.MAX_CONTENT_CHARS
        assert match.matched_by and set(match.matched_by) <= {"vector", "fts"}
    assert [m.score for m in first.matches] == sorted((m.score for m in first.matches), reverse=True)
    both = [m.score for m in first.matches if m.matched_by == ["fts", "vector"]]
    one = [m.score for m in first.matches if len(m.matched_by) == 1]
    assert both and one and max(one) < max(both)  # found by both channels ranks higher
    trace = first.trace
    assert trace.vector_backend == "pgvector" and trace.candidate_count >= len(first.matches)
    assert trace.timings.search_ms >= 0
    wire = first.model_dump(mode="json")
    assert set(wire) == {"matches", "trace"}
    assert set(wire["matches"][0]) == {
        "sourceId", "sourceName", "collectionId", "dossierName", "chunkId", "section", "page", "content",
        "similarity", "score", "matchedBy", "rerankScore",
    }  # fmt: skip
    assert set(wire["trace"]) == {
        "queries", "vectorBackend", "candidateCount", "rerankApplied", "timings", "tokensUsed",
    }  # fmt: skip
    assert set(wire["trace"]["timings"]) == {"expandMs", "searchMs", "rerankMs"}


async def test_an_empty_answer_is_normal(corpus: dict[str, Any], embedder: Embedder) -> None:
    async with engine_for(corpus, embedder) as eng:
        result = await ask(eng, NOTICE_Q, source_ids=["no-such-source"])
    assert result.matches == [] and result.trace.candidate_count == 0


async def test_bad_input_is_refused(corpus: dict[str, Any], embedder: Embedder) -> None:
    async with engine_for(corpus, embedder) as eng:
        for query, kwargs in (
            ("", {}),
            ("   ", {}),
            ("x" * 4001, {}),
            ("q", {"top_k": 0}),
            ("q", {"top_k": 21}),
            ("q", {"top_k": True}),
            ("q", {"expand": "yes"}),
            ("q", {"source_ids": "dupont"}),
        ):
            with pytest.raises(InvalidRequest):
                await ask(eng, query, **kwargs)


def test_content_is_clipped_at_a_word_boundary() -> None:
    long = "word " * 1000
    clipped = shape.clip(long)
    assert len(clipped) <= shape.MAX_CONTENT_CHARS and clipped.endswith("word…")
    assert shape.clip("short") == "short"


# ---------------------------------------------------------------------------------- ACL and agents
async def test_the_acl_applies(corpus: dict[str, Any], embedder: Embedder) -> None:
    async with engine_for(corpus, embedder) as eng:
        hidden = await ask(eng, "salary review deadline for managers", principals=["group:eng"], top_k=20)
        shown = await ask(eng, "salary review deadline for managers", principals=["group:hr"], top_k=20)
    assert "salaries.md" not in {m.source_name for m in hidden.matches}
    assert shown.matches[0].source_name == "salaries.md"


async def test_agents_restrict_retrieval_to_their_links(corpus: dict[str, Any], embedder: Embedder) -> None:
    agent = f"agent-{uuid.uuid4().hex[:8]}"
    ids = corpus["ids"]
    async with engine_for(corpus, embedder) as eng:
        with pytest.raises(NotFound) as unknown:
            await ask(eng, NOTICE_Q, agent_id=agent)
        assert (unknown.value.code, unknown.value.status) == ("agent_not_found", 404)

        links = await eng.link_agent_sources(agent, document_ids=[ids["lease.md"]])
        assert links.document_ids == [ids["lease.md"]] and links.source_ids == []
        only = await ask(eng, "deadline notice parking", agent_id=agent, top_k=20)
        assert {m.source_name for m in only.matches} == {"lease.md"}

        await eng.link_agent_sources(agent, source_ids=["facilities"], document_ids=[ids["lease.md"]])  # idempotent
        both = await ask(eng, "deadline notice parking", agent_id=agent, top_k=20)
        assert {m.source_name for m in both.matches} == {"lease.md", "parking.md"}

        links = await eng.unlink_agent_sources(agent, document_ids=[ids["lease.md"]])
        assert links.document_ids == [] and links.source_ids == ["facilities"]
        rest = await ask(eng, "deadline notice parking", agent_id=agent, top_k=20)
        assert {m.source_name for m in rest.matches} == {"parking.md"}

        await eng.unlink_agent_sources(agent)
        assert (await eng.agent_sources(agent)).source_ids == []
        with pytest.raises(NotFound):
            await ask(eng, NOTICE_Q, agent_id=agent)


async def test_an_agent_link_grants_no_access(corpus: dict[str, Any], embedder: Embedder) -> None:
    agent = f"agent-{uuid.uuid4().hex[:8]}"
    async with engine_for(corpus, embedder) as eng:
        await eng.link_agent_sources(agent, document_ids=[corpus["ids"]["salaries.md"]])
        outsider = await ask(eng, "salary review deadline", agent_id=agent, principals=[])
        insider = await ask(eng, "salary review deadline", agent_id=agent, principals=["group:hr"])
        with pytest.raises(NotFound):
            await eng.link_agent_sources(agent, document_ids=[str(uuid.uuid4())])
        with pytest.raises(InvalidRequest):
            await eng.link_agent_sources(agent)
    assert outsider.matches == []
    assert [m.source_name for m in insider.matches] == ["salaries.md"]


# ---------------------------------------------------------------------------------- expansion
async def test_a_compound_question_is_expanded(
    corpus: dict[str, Any], embedder: Embedder, server: FakeHTTPServer
) -> None:
    subs = ("What is the notice period to terminate the lease?", "Who signs the lease?")
    server.route("POST", "/v1/chat/completions", chat(sub_queries=split_into(*subs)))
    async with engine_for(corpus, embedder, llm=llm_settings(server)) as eng:
        result = await ask(eng, COMPOUND_Q, rerank=False, top_k=4)
    (request,) = server.requests
    assert first_user(request.json()) == COMPOUND_Q
    assert result.trace.queries == [COMPOUND_Q, *subs] and result.trace.tokens_used == 50
    text = " ".join(contents(result))
    assert "six months' notice" in text and "signed by the managing director" in text


@pytest.mark.parametrize(
    ("query", "expand"),
    [("What is the notice period?", True), (COMPOUND_Q, False)],
    ids=["simple-question", "expand-false"],
)
async def test_expansion_is_skipped(
    corpus: dict[str, Any], embedder: Embedder, server: FakeHTTPServer, query: str, expand: bool
) -> None:
    server.route("POST", "/v1/chat/completions", chat(sub_queries=split_into("a?", "b?")))
    async with engine_for(corpus, embedder, llm=llm_settings(server)) as eng:
        result = await ask(eng, query, expand=expand, rerank=False)
    assert server.requests == [] and result.trace.queries == [query]


async def test_a_question_the_model_keeps_whole_stays_one_query(
    corpus: dict[str, Any], embedder: Embedder, server: FakeHTTPServer
) -> None:
    server.route("POST", "/v1/chat/completions", chat(sub_queries=split_into("notice and signature?")))
    async with engine_for(corpus, embedder, llm=llm_settings(server)) as eng:
        result = await ask(eng, COMPOUND_Q, rerank=False)
    assert len(server.requests) == 1 and result.trace.queries == [COMPOUND_Q]


async def test_a_failed_expansion_searches_the_question_alone(
    corpus: dict[str, Any], embedder: Embedder, server: FakeHTTPServer
) -> None:
    server.route("POST", "/v1/chat/completions", chat(sub_queries=malformed))
    async with engine_for(corpus, embedder, llm=llm_settings(server)) as eng:
        result = await ask(eng, COMPOUND_Q, rerank=False)
    assert len(server.requests) == 1  # an enforced schema broken is not re-asked
    assert result.trace.queries == [COMPOUND_Q] and result.trace.tokens_used == 50 and result.matches


# ---------------------------------------------------------------------------------- the rerank guards
async def rerank_with(
    corpus: dict[str, Any], embedder: Embedder, server: FakeHTTPServer, judge: Any, **kwargs: Any
) -> KnowledgeResult:
    server.route("POST", "/v1/chat/completions", judge)
    settings = {"llm": llm_settings(server), "rerank": {"provider": "llm", "timeout": 1.0}}
    async with engine_for(corpus, embedder, **settings) as eng:
        kwargs.setdefault("top_k", 3)
        return await ask(eng, NOTICE_Q, expand=False, **kwargs)


async def test_a_sensible_judge_is_applied(corpus: dict[str, Any], embedder: Embedder, server: FakeHTTPServer) -> None:
    judge = chat(relevance=judge_by_words({"registered letter": 10, "managing director": 6}))
    result = await rerank_with(corpus, embedder, server, judge)
    trace = result.trace
    assert (trace.rerank_applied, trace.rerank_reason, trace.tokens_used) == (True, "applied", 50)
    assert [m.rerank_score for m in result.matches] == [1.0, 0.6, 0.1]
    assert "registered letter" in result.matches[0].content and "signed by" in result.matches[1].content
    passages = [p for p in first_user(server.requests[0].json()).split("\n\n") if p.startswith("[")]
    assert len(passages) == trace.candidate_count  # the whole (small) pool went to the judge


async def test_a_judge_finding_nothing_relevant_is_discarded(
    corpus: dict[str, Any], embedder: Embedder, server: FakeHTTPServer
) -> None:
    result = await rerank_with(corpus, embedder, server, chat(relevance=judge_all(0)), top_k=4)
    assert (result.trace.rerank_applied, result.trace.rerank_reason) == (False, "nothing_relevant")
    assert all(m.rerank_score is None for m in result.matches)
    terms = shape.content_terms(NOTICE_Q)
    shared = [shape.shared_terms(terms, m.content) for m in result.matches]
    assert shared == sorted(shared, reverse=True) and shared[0] > 0  # the deterministic order


async def test_a_judge_inverting_the_consensus_is_discarded(
    corpus: dict[str, Any], embedder: Embedder, server: FakeHTTPServer
) -> None:
    result = await rerank_with(corpus, embedder, server, chat(relevance=judge_inverted))
    assert (result.trace.rerank_applied, result.trace.rerank_reason) == (False, "contradicts_consensus")
    assert all(m.rerank_score is None for m in result.matches)
    assert "six months' notice" in result.matches[0].content  # not the passage the judge put first


async def test_a_judge_that_times_out_is_discarded(
    corpus: dict[str, Any], embedder: Embedder, server: FakeHTTPServer
) -> None:
    started = time.perf_counter()
    judge = slow(3.0, chat(relevance=judge_by_words({"registered": 10})))
    result = await rerank_with(corpus, embedder, server, judge)
    assert (result.trace.rerank_applied, result.trace.rerank_reason) == (False, "timeout")
    assert 900 <= result.trace.timings.rerank_ms < 2500 and time.perf_counter() - started < 10
    assert result.matches and all(m.rerank_score is None for m in result.matches)


async def test_a_judge_answering_malformed_json_is_discarded(
    corpus: dict[str, Any], embedder: Embedder, server: FakeHTTPServer
) -> None:
    result = await rerank_with(corpus, embedder, server, chat(relevance=malformed))
    assert (result.trace.rerank_applied, result.trace.rerank_reason) == (False, "error")
    assert len(server.requests) == 1 and result.trace.tokens_used == 50  # enforced: not re-asked
    assert result.matches and all(m.rerank_score is None for m in result.matches)


async def test_no_rerank_when_the_pool_is_not_larger_than_top_k(
    corpus: dict[str, Any], embedder: Embedder, server: FakeHTTPServer
) -> None:
    judge = chat(relevance=judge_all(9))
    result = await rerank_with(corpus, embedder, server, judge, top_k=5, source_ids=["facilities"])
    assert server.requests == []
    assert (result.trace.rerank_applied, result.trace.rerank_reason) == (False, "pool_not_larger_than_top_k")
    assert result.trace.candidate_count <= 5 and result.trace.timings.rerank_ms == 0


async def test_an_http_reranker_in_the_pipeline(
    corpus: dict[str, Any], embedder: Embedder, server: FakeHTTPServer
) -> None:
    def score(_query: str, doc: str) -> float:
        return 0.95 if "signed" in doc else 0.3

    server.route("POST", "/v2/rerank", rerank_api(score))
    rerank = {"provider": "cohere", "base_url": server.url(), "api_key": "k", "timeout": 2}
    async with engine_for(corpus, embedder, rerank=rerank) as eng:
        result = await ask(eng, NOTICE_Q, top_k=2)
    assert result.trace.rerank_applied is True and result.trace.queries == [NOTICE_Q]
    assert "signed by" in result.matches[0].content and result.matches[0].rerank_score == 0.95
    assert server.requests[0].json()["query"] == NOTICE_Q


# ---------------------------------------------------------------------------------- enumerations
async def test_an_enumeration_widens_the_pool_and_prefers_the_table(corpus: dict[str, Any], embedder: Embedder) -> None:
    knowledge = {"candidates": 2, "enumeration_candidates": 8}
    async with engine_for(corpus, embedder, knowledge=knowledge) as eng:
        plain = await ask(eng, "When is the insurance renewal deadline?", top_k=5)
        listing = await ask(eng, "List all the deadlines", top_k=5)
    assert not shape.is_enumeration("When is the insurance renewal deadline?")
    assert shape.is_enumeration("List all the deadlines") and shape.is_enumeration("every client we have")
    assert plain.trace.candidate_count <= 4  # two per channel
    assert listing.trace.candidate_count > 4
    top = listing.matches[0]
    assert top.source_name == "deadlines.md" and "| Insurance renewal | 30 June |" in top.content
    # the list-shaped ranking added to the fusion: more than both channels alone could give
    assert top.score > 2 / (eng.config.fusion.k + 1)


# ---------------------------------------------------------------------------------- redaction
async def test_output_redaction_covers_the_matches_and_the_judge(
    database_url: str, embedder: Embedder, server: FakeHTTPServer
) -> None:
    from context_engine.redaction import RedactionPolicy, RedactionRule

    email = "dana.scully@fbi.example.com"
    server.route("POST", "/v1/chat/completions", chat(relevance=judge_by_words({"registered": 9})))
    policy = RedactionPolicy(rules=[RedactionRule(name="email", detector="email")])
    config = make_config(database_url, llm=llm_settings(server), redaction=policy)
    async with ContextEngine(config, embedder=embedder) as eng:
        for name, body in (
            (f"notes {email}.md", f"# Contact {email}\n\nWrite to {email} about the lease notice."),
            ("notice.md", "The lease notice goes by registered letter."),
            ("parking.md", "The parking garage opens at seven."),
        ):
            await eng.ingest(text=body, name=name, principals=TRUSTED)
        result = await ask(eng, "lease notice", top_k=2, expand=False)
    assert result.trace.rerank_applied is True and len(result.matches) == 2
    assert "registered letter" in result.matches[0].content
    assert email not in result.model_dump_json() and "[EMAIL]" in result.model_dump_json()
    judged = server.requests[0].body.decode()
    assert email not in judged and "[EMAIL]" in judged  # the judge saw the redacted passage

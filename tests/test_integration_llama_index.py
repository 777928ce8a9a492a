"""The LlamaIndex retriever: ``NodeWithScore``s from ``engine.search`` under an explicit caller,
driven by llama-index-core's own ``RetrieverQueryEngine`` with a scripted OpenAI-compatible model
on 127.0.0.1, and permissions held through the query engine (asserted on what reached the model)."""

from __future__ import annotations

from typing import Any

import pytest
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode, NodeRelationship, NodeWithScore, TextNode

from context_engine import TRUSTED, ContextEngine
from context_engine.integrations.llama_index import ContextEngineRetriever
from context_engine.models import search_wire
from examples.llama_index_query import OpenAICompatibleLLM, build_query_engine
from tests.fakes import FakeHTTPServer, Target
from tests.integration_corpus import ENG, ENG_MARKERS, HR, HR_MARKERS, OTHER_SOURCE, QUESTION, names_for, seed
from tests.knowledge_fakes import completion

ANSWER = "Twenty-five days, per the handbook."


def scripted_answer(body: Any, _headers: dict[str, str], _target: Target) -> tuple[int, dict[str, str], Any]:
    return 200, {}, completion(ANSWER)


def _prompt_of(request: Any) -> str:
    return "\n".join(m["content"] for m in request.json()["messages"])


def _names(nodes: list[NodeWithScore]) -> set[str]:
    return {n.node.metadata["document_name"] for n in nodes}


@pytest.mark.parametrize("bad", [None, "group:hr", [1]])
async def test_a_retriever_without_a_usable_caller_is_refused(engine: ContextEngine, bad: Any) -> None:
    with pytest.raises(TypeError):
        ContextEngineRetriever(engine, principals=bad)
    with pytest.raises(TypeError):
        ContextEngineRetriever(engine)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        ContextEngineRetriever(engine, principals=HR).for_caller(bad)


async def test_nodes_carry_the_routes_fields_and_our_scores(engine: ContextEngine) -> None:
    await seed(engine)
    retriever = ContextEngineRetriever(engine, principals=HR, top_k=3)
    nodes = await retriever.aretrieve(QUESTION)
    wire = search_wire(await engine.search(QUESTION, principals=HR, top_k=3))["hits"]
    assert len(nodes) == len(wire) == 3
    for scored, hit in zip(nodes, wire, strict=True):
        assert isinstance(scored, NodeWithScore) and isinstance(scored.node, TextNode)
        assert scored.score == hit["score"] and scored.node.text == hit.pop("chunk_text")
        assert scored.node.metadata == hit
        assert scored.node.node_id == f"{hit['document_id']}:{hit['chunk_id']}"
        assert scored.node.relationships[NodeRelationship.SOURCE].node_id == hit["document_id"]
        shown = scored.node.get_content(metadata_mode=MetadataMode.LLM)
        assert hit["document_name"] in shown and hit["document_id"] not in shown  # ids stay with the app
        assert "None" not in shown  # a passage without a page says nothing about pages
    assert _names(retriever.retrieve(QUESTION)) == _names(nodes)  # the sync path, on the library's loop


async def test_filters_group_by_and_as_of(engine: ContextEngine) -> None:
    ids = await seed(engine)
    wiki = ContextEngineRetriever(engine, principals=HR, top_k=10, source_ids=[OTHER_SOURCE])
    assert _names(await wiki.aretrieve(QUESTION)) == {"hr-sick"}
    before = await engine.revision(principals=HR)  # the revision of the retriever's view (a handle)
    await engine.delete_document(ids["hr-carry"], principals=TRUSTED)
    by_document = ContextEngineRetriever(engine, principals=HR, top_k=10, group_by="document")
    now = await by_document.aretrieve(QUESTION)
    assert _names(now) == names_for(HR) - {"hr-carry"}
    assert all(n.node.node_id == n.node.metadata["document_id"] for n in now)
    old = ContextEngineRetriever(engine, principals=HR, top_k=10, group_by="document", as_of=before)
    assert _names(await old.aretrieve(QUESTION)) == names_for(HR)


@pytest.mark.parametrize("sync", [False, True])
async def test_the_query_engine_runs_over_the_retriever(engine: ContextEngine, sync: bool) -> None:
    await seed(engine)
    with FakeHTTPServer() as server:
        server.route("POST", "/v1/chat/completions", scripted_answer)
        query_engine = RetrieverQueryEngine.from_args(
            ContextEngineRetriever(engine, principals=HR, top_k=3),
            llm=OpenAICompatibleLLM(base_url=server.url("/v1"), model="fake"),
        )
        response = query_engine.query(QUESTION) if sync else await query_engine.aquery(QUESTION)
    assert str(response) == ANSWER
    assert len(response.source_nodes) == 3 and all(n.score is not None for n in response.source_nodes)
    assert len(server.requests) == 1
    prompt = _prompt_of(server.requests[0])
    assert QUESTION in prompt
    for node in response.source_nodes:
        assert node.node.get_content() in prompt and node.node.metadata["document_name"] in prompt


async def test_two_callers_same_query_engine_see_only_their_own_documents(engine: ContextEngine) -> None:
    await seed(engine)
    shared = ContextEngineRetriever(engine, principals=[], top_k=4)
    with FakeHTTPServer() as server:
        server.route("POST", "/v1/chat/completions", scripted_answer)
        llm = OpenAICompatibleLLM(base_url=server.url("/v1"), model="fake")
        for principals, own, forbidden in ((HR, HR_MARKERS, ENG_MARKERS), (ENG, ENG_MARKERS, HR_MARKERS)):
            response = await build_query_engine(shared.for_caller(principals), llm).aquery(QUESTION)
            assert _names(response.source_nodes) <= names_for(principals)
            prompt = _prompt_of(server.requests[-1])
            assert any(marker in prompt for marker in own)
            assert not any(marker in prompt for marker in forbidden), prompt  # never reached the model
        nothing = await build_query_engine(shared, llm).aquery(QUESTION)  # anonymous: no document matches
    assert nothing.source_nodes == []
    assert all(not any(m in _prompt_of(r) for m in HR_MARKERS + ENG_MARKERS) for r in server.requests[2:])

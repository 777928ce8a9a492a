"""The LangChain retriever: LangChain's own standard retriever tests, then what ours adds on top
(an explicit caller, our metadata redacted as the routes redact, filters, and permissions held
through a whole chain whose model is a scripted OpenAI-compatible server on 127.0.0.1)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_tests.integration_tests import RetrieversIntegrationTests
from pydantic import ValidationError

from context_engine import TRUSTED, ContextEngine, InvalidRequest
from context_engine.integrations.langchain import ContextEngineRetriever
from context_engine.redaction import RedactionPolicy, RedactionRule
from examples.langchain_chain import OpenAICompatibleChat, build_chain
from tests.conftest import make_config
from tests.fakes import FakeHTTPServer, Target
from tests.integration_corpus import ENG, ENG_MARKERS, HR, HR_MARKERS, OTHER_SOURCE, QUESTION, SOURCE, names_for, seed
from tests.knowledge_fakes import completion


class TestStandardRetrieverSuite(RetrieversIntegrationTests):
    """``langchain-tests``' retriever suite, unchanged, over a real database and the local model."""

    engine: ContextEngine

    @pytest.fixture(autouse=True)
    async def corpus(self, engine: ContextEngine) -> None:
        await seed(engine)
        self.engine = engine

    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        return ContextEngineRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"engine": self.engine, "principals": HR}

    @property
    def retriever_query_example(self) -> str:
        return QUESTION

    @property
    def num_results_arg_name(self) -> str:
        return "top_k"


# --- the caller is never implicit --------------------------------------------------------------------
@pytest.mark.parametrize("bad", [None, "group:hr", [1], 7])
async def test_a_retriever_without_a_usable_caller_is_refused(engine: ContextEngine, bad: Any) -> None:
    with pytest.raises(ValidationError):
        ContextEngineRetriever(engine=engine, principals=bad)
    retriever = ContextEngineRetriever(engine=engine, principals=[])
    with pytest.raises(TypeError):
        await retriever.ainvoke(QUESTION, principals=bad)


async def test_no_principals_at_all_is_refused(engine: ContextEngine) -> None:
    with pytest.raises(ValidationError, match="principals"):
        ContextEngineRetriever(engine=engine)  # type: ignore[call-arg]


async def test_an_unknown_argument_is_refused(engine: ContextEngine) -> None:
    with pytest.raises(TypeError, match="scope"):
        await ContextEngineRetriever(engine=engine, principals=HR).ainvoke(QUESTION, scope=None)


@pytest.mark.parametrize("bad", [{"source_ids": "handbook"}, {"top_k": 0}, {"group_by": "page"}, {"as_of": -1}])
async def test_bad_search_values_are_refused_as_every_door_refuses_them(engine: ContextEngine, bad: Any) -> None:
    await seed(engine)
    retriever = ContextEngineRetriever(engine=engine, principals=HR)
    with pytest.raises(InvalidRequest):
        await retriever.ainvoke(QUESTION, **bad)
    with pytest.raises(InvalidRequest):
        retriever.invoke(QUESTION, **bad)


# --- what a caller gets -------------------------------------------------------------------------------
def _names(documents: list[Document]) -> set[str]:
    return {d.metadata["document_name"] for d in documents}


async def test_each_caller_gets_only_their_documents_sync_and_async(engine: ContextEngine) -> None:
    await seed(engine)
    for principals in (HR, ENG, [], TRUSTED):
        retriever = ContextEngineRetriever(engine=engine, principals=principals, top_k=20)
        expected = names_for(principals) if principals is not TRUSTED else names_for(HR + ENG)
        assert _names(await retriever.ainvoke(QUESTION)) == expected
        assert _names(retriever.invoke(QUESTION)) == expected  # the sync path, on the library's loop


async def test_a_call_may_name_its_own_caller_and_filters(engine: ContextEngine) -> None:
    await seed(engine)
    shared = ContextEngineRetriever(engine=engine, principals=[], top_k=20)
    assert await shared.ainvoke(QUESTION) == []  # anonymous: nothing here has an empty ACL
    assert _names(await shared.ainvoke(QUESTION, principals=ENG)) == names_for(ENG)
    in_wiki = await shared.ainvoke(QUESTION, principals=HR, source_ids=[OTHER_SOURCE])
    assert _names(in_wiki) == {"hr-sick"}
    assert {d.metadata["source_id"] for d in in_wiki} == {OTHER_SOURCE}
    assert len(await shared.ainvoke(QUESTION, principals=HR, top_k=2)) == 2


async def test_metadata_is_what_the_search_route_returns_redacted(database_url: str) -> None:
    from context_engine import create_router

    email = "dana.scully@fbi.example.com"
    policy = RedactionPolicy(rules=[RedactionRule(name="email", detector="email")])
    async with ContextEngine(make_config(database_url, redaction=policy)) as engine:
        await engine.ingest(text=f"# Leave\n\n## Requests\n\nSend annual leave requests to {email} by Friday.",
                            name=f"leave for {email}", source_id=SOURCE, acl=HR)
        documents = await ContextEngineRetriever(engine=engine, principals=HR, top_k=5).ainvoke("annual leave requests")
        app = FastAPI()
        app.include_router(create_router(engine, auth=lambda request: True, principals=lambda request: HR))
        with TestClient(app) as client:
            wire = client.post("/search", json={"query": "annual leave requests", "top_k": 5}).json()
    assert documents and len(documents) == len(wire["hits"])
    for document, hit in zip(documents, wire["hits"], strict=True):
        assert document.page_content == hit.pop("chunk_text")
        assert document.metadata == hit  # the same fields, the same redaction, the same score
        assert document.id == f"{hit['document_id']}:{hit['chunk_id']}"
    dumped = json.dumps([d.model_dump() for d in documents])
    assert email not in dumped and "[EMAIL]" in dumped
    first = documents[0].metadata
    assert first["section"] and first["score"] > 0 and first["matched_by"] and first["chunk_idx"] is not None


async def test_group_by_document_and_as_of(engine: ContextEngine) -> None:
    ids = await seed(engine)
    before = await engine.revision(principals=HR)  # the revision of the retriever's view (a handle)
    await engine.delete_document(ids["hr-leave"], principals=TRUSTED)
    retriever = ContextEngineRetriever(engine=engine, principals=HR, top_k=10, group_by="document")
    now = await retriever.ainvoke(QUESTION)
    assert _names(now) == names_for(HR) - {"hr-leave"}
    assert [d.id for d in now] == [d.metadata["document_id"] for d in now]
    assert all(d.metadata["passages"] and "chunk_text" not in d.metadata["passages"][0] for d in now)
    then = await retriever.ainvoke(QUESTION, as_of=before)
    assert _names(then) == names_for(HR)  # the store as it was before the delete
    assert "HR-SECRET-ALPHA" in next(d.page_content for d in then if d.metadata["document_name"] == "hr-leave")


# --- permissions through a whole chain ------------------------------------------------------------------
def scripted_answer(body: Any, _headers: dict[str, str], _target: Target) -> tuple[int, dict[str, str], Any]:
    return 200, {}, completion("Answered from the context.")


def _prompt_of(request: Any) -> str:
    return "\n".join(m["content"] for m in request.json()["messages"])


@pytest.mark.parametrize("sync", [False, True])
async def test_two_callers_same_chain_see_only_their_own_documents(engine: ContextEngine, sync: bool) -> None:
    await seed(engine)
    with FakeHTTPServer() as server:
        server.route("POST", "/v1/chat/completions", scripted_answer)
        chain = build_chain(engine, OpenAICompatibleChat(base_url=server.url("/v1"), model="fake"))
        prompts = {}
        for caller, principals, own, forbidden in (("hr", HR, HR_MARKERS, ENG_MARKERS),
                                                   ("eng", ENG, ENG_MARKERS, HR_MARKERS)):
            config: Any = {"configurable": {"principals": principals}}
            answer = chain.invoke(QUESTION, config=config) if sync else await chain.ainvoke(QUESTION, config=config)
            assert answer == "Answered from the context."
            prompts[caller] = prompt = _prompt_of(server.requests[-1])
            assert QUESTION in prompt
            assert any(marker in prompt for marker in own if marker != "HR-SECRET-DELTA")
            assert not any(marker in prompt for marker in forbidden), prompt  # never reached the model
        anonymous = chain.invoke(QUESTION) if sync else await chain.ainvoke(QUESTION)
        assert anonymous and not any(m in _prompt_of(server.requests[-1]) for m in HR_MARKERS + ENG_MARKERS)
    assert len(server.requests) == 3 and prompts["hr"] != prompts["eng"]

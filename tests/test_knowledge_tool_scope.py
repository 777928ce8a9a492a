"""Scope ceilings: the helpers, and a property test that no model argument widens the host's ceiling.

The property test runs the real tool on a real database with a TRUSTED caller (so the ceiling is
the only thing standing between the model and every document) and random model arguments built
from real ids, ids outside the ceiling, and made-up ones.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_engine import TRUSTED, UNSCOPED, ContextEngine, Scope
from context_engine.knowledge.tool import narrow_to_ceiling, resolve_scope
from tests.conftest import make_config
from tests.test_knowledge_tool_doors import Corpus, build_corpus

T = TypeVar("T")
SOURCES = ["hr", "finance", "sheets", "legal"]


def test_narrow_to_ceiling() -> None:
    assert narrow_to_ceiling(["hr", "legal"], ("hr", "finance")) == ["hr"]
    assert narrow_to_ceiling(["legal"], ("hr", "finance")) == []
    assert narrow_to_ceiling(None, ("hr", "finance")) == ["hr", "finance"]
    assert narrow_to_ceiling(None, None) is None
    assert narrow_to_ceiling(["a", "a", "b"], None) == ["a", "b"]


def test_resolve_scope() -> None:
    assert resolve_scope(["hr", "finance"]) == Scope(source_ids=("hr", "finance"))
    assert resolve_scope(UNSCOPED) is UNSCOPED
    doc = str(uuid.uuid4())
    pinned = Scope(source_ids=["hr"], document_ids=[doc.upper()])
    assert resolve_scope(pinned) == Scope(source_ids=("hr",), document_ids=(doc,))
    with pytest.raises(ValueError, match="scope is required"):
        resolve_scope(None)
    with pytest.raises(TypeError):
        resolve_scope("hr")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a document id"):
        Scope(document_ids=("INV-2525",))
    with pytest.raises(AttributeError):
        pinned.source_ids = None  # type: ignore[misc]


class LoopThread:
    """An event loop of its own, so hypothesis (synchronous) can drive the async engine."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=900)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@pytest.fixture(scope="module")
def world(pg_base_url: str) -> Iterator[tuple[LoopThread, ContextEngine, Corpus, dict[str, str]]]:
    name = f"kts_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_base_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    head, _, query = pg_base_url.partition("?")
    url = head.rsplit("/", 1)[0] + f"/{name}" + (f"?{query}" if query else "")
    runner = LoopThread()
    engine = ContextEngine(make_config(url))
    try:
        corpus = runner.run(build_corpus(engine))
        listed = runner.run(engine.search_knowledge_base(action="list", limit=100, principals=TRUSTED, scope=UNSCOPED))
        source_of = {d["id"]: d["source_id"] for d in listed["documents"]}
        yield runner, engine, corpus, source_of
    finally:
        runner.run(engine.aclose())
        runner.close()
        with psycopg.connect(pg_base_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def returned_documents(answer: dict[str, Any]) -> set[str]:
    """Every document id an answer hands back as content (not the ids the model itself sent)."""
    found: set[str] = set()
    for doc in answer.get("documents", []):
        found.add(doc["id"])
    for hit in answer.get("hits", []):
        found.add(hit["document_id"])
    if "document" in answer:
        found.add(answer["document"]["id"])
    if answer.get("success") and "chunks" in answer and "document_id" in answer:
        found.add(answer["document_id"])
    found.update(answer.get("remaining_document_ids", []))
    return found


@st.composite
def calls(draw: st.DrawFn, ids: list[str]) -> tuple[Scope, dict[str, Any]]:
    real_or_fake = st.one_of(st.sampled_from(ids), st.uuids().map(str))
    ceiling_sources = draw(st.one_of(st.none(), st.lists(st.sampled_from(SOURCES), max_size=3, unique=True)))
    ceiling_docs = draw(st.one_of(st.none(), st.lists(st.sampled_from(ids), max_size=4, unique=True)))
    ceiling = Scope(source_ids=ceiling_sources, document_ids=ceiling_docs)
    action = draw(st.sampled_from(["discover", "search", "list", "get_doc", "get_docs", "get_chunks"]))
    args: dict[str, Any] = {"action": action}
    if action in ("discover", "search", "list"):
        if draw(st.booleans()):
            args["source_ids"] = draw(st.lists(st.sampled_from([*SOURCES, "nowhere"]), max_size=4))
        if draw(st.booleans()):
            args["document_ids"] = draw(st.lists(real_or_fake, max_size=5))
    if action == "search":
        args["query"] = draw(st.sampled_from(["annual leave", "invoice 2525", "region amount", "contract term",
                                              "what is in costs.csv", "total amount by region"]))
    if action in ("get_doc", "get_chunks"):
        args["document_id"] = draw(real_or_fake)
    if action == "get_chunks" and draw(st.booleans()):
        args["start"] = draw(st.integers(0, 3))
    if action == "get_docs":
        args["document_ids"] = draw(st.lists(real_or_fake, min_size=1, max_size=6))
    return ceiling, args


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=st.data())
def test_no_model_argument_widens_the_ceiling(world: tuple[LoopThread, ContextEngine, Corpus, dict[str, str]],
                                              data: st.DataObject) -> None:
    runner, engine, corpus, source_of = world
    ceiling, args = data.draw(calls(sorted(corpus.values())))
    answer = runner.run(engine.search_knowledge_base(principals=TRUSTED, scope=ceiling, **args))
    assert isinstance(answer["success"], bool)
    if not answer["success"]:
        assert isinstance(answer["error"], str) and answer["error"]
    for doc_id in returned_documents(answer):
        assert ceiling.source_ids is None or source_of[doc_id] in ceiling.source_ids, (ceiling, args, doc_id)
        assert ceiling.document_ids is None or doc_id in ceiling.document_ids, (ceiling, args, doc_id)

"""Normalisation, batching and reply parsing of graph extraction, and Louvain community detection.

Extraction talks real HTTP to a scripted model on 127.0.0.1; the rest are pure functions.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from context_engine.config import LLMConfig
from context_engine.graph.communities import detect
from context_engine.graph.entities import BATCH_CHARS, BATCH_CHUNKS, ChunkText, batches, extract, parse_reply
from context_engine.graph.errors import GraphExtractionFailed
from context_engine.graph.normalize import name_key, normalise_name, normalise_type, query_keys
from context_engine.llm import build_llm
from tests.fakes import FakeHTTPServer, json_reply
from tests.graph_fakes import GraphModel, serve_graph_model
from tests.knowledge_fakes import completion


@pytest.fixture
def server() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer() as fake:
        yield fake


def llm_config(server: FakeHTTPServer) -> LLMConfig:
    return LLMConfig(provider="custom", base_url=server.url("/v1"), model="fake-chat", max_retries=0, timeout=10.0)


@pytest.mark.parametrize(
    ("raw", "name", "key"),
    [
        ("  Apple   Inc. ", "apple inc.", "apple inc"),
        ('"ACME Corp"', "acme corp", "acme corp"),
        ("Ｗｉｄｇｅｔ\tPro", "widget pro", "widget pro"),  # NFKC folds full-width letters
        ("(Team Atlas),", "team atlas", "team atlas"),
        ("O'Neil & Sons", "o'neil & sons", "o neil sons"),
    ],
)
def test_names_are_normalised_and_keyed(raw: str, name: str, key: str) -> None:
    assert normalise_name(raw) == name
    assert name_key(raw) == key


def test_types_and_query_keys() -> None:
    assert normalise_type(" org ") == "ORG" and normalise_type("cost centre") == "COST_CENTRE"
    assert normalise_type("  ") == "OTHER"
    keys = query_keys("Who supplies Apple, Inc.?")
    assert {"apple inc", "supplies apple", "who"} <= keys
    assert "a" not in query_keys("a b c")  # single letters never match


def test_batches_close_on_count_or_characters() -> None:
    small = [ChunkText(i, "x" * 10) for i in range(BATCH_CHUNKS * 2 + 1)]
    assert [len(b) for b in batches(small)] == [BATCH_CHUNKS, BATCH_CHUNKS, 1]
    large = [ChunkText(i, "y" * (BATCH_CHARS // 2 + 1)) for i in range(3)]
    assert [len(b) for b in batches(large)] == [1, 1, 1]


def test_reply_parsing_cleans_what_the_model_said() -> None:
    batch = [ChunkText(10, "a"), ChunkText(11, "b")]
    value: dict[str, Any] = {
        "chunks": [
            {
                "index": 0,
                "entities": [{"name": " Acme  Corp ", "type": "org"}, {"name": "...", "type": "x"}],
                "relationships": [
                    {"source": "ACME CORP", "target": "Widget Pro", "category": "SUPPLY", "label": "Supplies To",
                     "evidence": "Acme   supplies\nWidget Pro."},
                    {"source": "Acme Corp", "target": "acme corp", "category": "SUPPLY", "label": "x",
                     "evidence": ""},
                ],
            },
            {"index": 7, "entities": [{"name": "Ghost", "type": "ORG"}], "relationships": []},
        ]
    }
    first, second = parse_reply(value, batch)
    assert first.chunk_id == 10 and first.entities == {"acme corp": "ORG", "widget pro": "OTHER"}
    assert [(r.source, r.target, r.label, r.evidence) for r in first.relations] == [
        ("acme corp", "widget pro", "supplies_to", "Acme supplies Widget Pro.")]
    assert second.chunk_id == 11 and second.entities == {} and second.relations == []


async def test_one_model_call_per_batch(server: FakeHTTPServer) -> None:
    model: GraphModel = serve_graph_model(server)
    chunks = [ChunkText(i, f"Team T{i} owns Part P{i}.") for i in range(BATCH_CHUNKS * 2 + 3)]
    llm = build_llm(llm_config(server))
    try:
        result = await extract(llm, chunks)
    finally:
        await llm.aclose()
    assert result.batches == 3 and result.llm_calls == 3
    assert model.calls == {"graph_facts": 3} and len(server.requests_to("/v1/chat/completions")) == 3
    assert [f.chunk_id for f in result.facts] == list(range(len(chunks)))
    assert result.facts[5].entities == {"team t5": "TEAM", "part p5": "PRODUCT"}
    assert result.tokens > 0


async def test_an_invalid_reply_is_not_re_asked(server: FakeHTTPServer) -> None:
    server.route("POST", "/v1/chat/completions", json_reply(200, completion(json.dumps({"chunks": "nope"}))))
    llm = build_llm(llm_config(server))
    try:
        with pytest.raises(GraphExtractionFailed) as failed:
            await extract(llm, [ChunkText(1, "Acme Corp supplies Widget Pro.")])
    finally:
        await llm.aclose()
    assert failed.value.status == 502 and "no graph facts were written" in failed.value.message
    assert len(server.requests_to("/v1/chat/completions")) == 1


def test_louvain_finds_the_two_dense_groups() -> None:
    left = [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d"), ("a", "d")]
    right = [("x", "y"), ("y", "z"), ("x", "z"), ("z", "w"), ("x", "w")]
    edges = [(s, t, 1.0) for s, t in [*left, *right, ("d", "w")]]
    found = detect("abcdxyzw" + "q", edges)
    assert found == [{"a", "b", "c", "d"}, {"w", "x", "y", "z"}]  # the isolated "q" is not a community
    assert detect("ab", []) == []


def test_the_search_path_loads_neither_networkx_nor_extraction() -> None:
    """A bare install (no ``graph`` extra) can import the engine and register the graph leg."""
    probe = (
        "import sys; from context_engine import ContextEngineConfig; from context_engine.retrieval import registry; "
        "ContextEngineConfig(); assert 'graph' in registry.names(); "
        "print(sorted(m for m in ('networkx', 'context_engine.graph.entities', 'context_engine.graph.communities') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"

"""A scripted model for graph mode, served over real HTTP by ``tests.fakes.FakeHTTPServer``.

The extraction reply is computed from the passages the client sent, by a small rule: a sentence
``<Name> <verb> <Name>.`` (names are runs of capitalised words) states a relationship, and both
names are entities. Types follow the name (``Team ...`` is a TEAM, ``... Inc``/``Corp``/``Ltd`` an
ORG, else a PRODUCT). The summary reply lists each community's entity names, so a test can see
exactly which facts a summary was built from.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tests.fakes import FakeHTTPServer, Target, fake_openai_embeddings
from tests.knowledge_fakes import completion, first_user, schema_name

VERBS = {
    "supplies": ("SUPPLY", "supplies"),
    "owns": ("OWNERSHIP", "owns"),
    "manages": ("HIERARCHICAL", "manages"),
    "builds": ("CREATION", "builds"),
    "partners with": ("PARTNERSHIP", "partners_with"),
}
_NAME = r"[A-Z][\w]*(?: [A-Z][\w]*)*"
_FACT = re.compile(rf"({_NAME}) ({'|'.join(VERBS)}) ({_NAME})\.")
_PASSAGE = re.compile(r"^\[(\d+)\] ", re.MULTILINE)
_MEMBER = re.compile(r"^- (.+?) \(([A-Z_]+), in \d+ passages\)$", re.MULTILINE)
_COMMUNITY = re.compile(r"^\[(\d+)\]\n", re.MULTILINE)


def entity_type(name: str) -> str:
    if name.startswith("Team "):
        return "TEAM"
    if name.split()[-1] in {"Inc", "Corp", "Ltd"}:
        return "ORG"
    return "PRODUCT"


def numbered(text: str, marker: re.Pattern[str]) -> list[tuple[int, str]]:
    """``[(index, body)]`` of a prompt made of ``[i] ...`` sections."""
    found = list(marker.finditer(text))
    return [
        (int(m.group(1)), text[m.end() : found[k + 1].start() if k + 1 < len(found) else len(text)])
        for k, m in enumerate(found)
    ]


def facts_reply(body: Any) -> str:
    chunks = []
    for index, passage in numbered(first_user(body), _PASSAGE):
        entities: dict[str, str] = {}
        relationships = []
        for source, verb, target in _FACT.findall(passage):
            entities.setdefault(source, entity_type(source))
            entities.setdefault(target, entity_type(target))
            category, label = VERBS[verb]
            relationships.append(
                {"source": source, "target": target, "category": category, "label": label,
                 "evidence": f"{source} {verb} {target}."}
            )
        chunks.append(
            {"index": index, "entities": [{"name": n, "type": t} for n, t in entities.items()],
             "relationships": relationships}
        )
    return json.dumps({"chunks": chunks})


def summaries_reply(body: Any) -> str:
    summaries = []
    for index, facts in numbered(first_user(body), _COMMUNITY):
        members = sorted(name for name, _ in _MEMBER.findall(facts))
        summaries.append({"index": index, "summary": "Connected: " + ", ".join(members)})
    return json.dumps({"summaries": summaries})


class GraphModel:
    """The chat route: counts requests per schema name; ``broken`` makes extraction replies invalid."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.broken = False

    def __call__(self, body: Any, _headers: dict[str, str], _target: Target) -> tuple[int, dict[str, str], Any]:
        name = schema_name(body) or "?"
        self.calls[name] = self.calls.get(name, 0) + 1
        if name == "graph_facts":
            return 200, {}, completion('{"chunks": [{"index": 0}]}' if self.broken else facts_reply(body))
        if name == "community_summaries":
            return 200, {}, completion(summaries_reply(body))
        return 400, {}, {"error": {"message": f"unexpected schema {name!r}"}}


def serve_graph_model(server: FakeHTTPServer, dim: int = 16) -> GraphModel:
    """Route chat completions to a ``GraphModel`` and embeddings to hashed vectors of width ``dim``."""
    model = GraphModel()
    server.route("POST", "/v1/chat/completions", model)
    server.route("POST", "/v1/embeddings", fake_openai_embeddings(dim))
    return model


def graph_config(server: FakeHTTPServer, dim: int = 16, *, with_llm: bool = True) -> dict[str, Any]:
    """Config overrides: the custom embedding provider and (optionally) the custom LLM on ``server``."""
    data: dict[str, Any] = {
        "embedding": {"provider": "custom", "base_url": server.url("/v1"), "model": "fake-embed", "dim": dim,
                      "max_retries": 0, "tokenizer": "estimate"},
    }
    if with_llm:
        data["llm"] = {"provider": "custom", "base_url": server.url("/v1"), "model": "fake-chat",
                       "max_retries": 0, "timeout": 10.0}
    return data

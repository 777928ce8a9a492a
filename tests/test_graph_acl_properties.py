"""Property: over random corpora and principals, no graph answer reaches past the caller's ACL.

An entity seen only in documents the caller may not see does not exist for them; every neighbour,
traversal step and relationship comes from a visible document; every community summary names only
entities of visible documents; the graph leg reports only visible entities. The expected answers
are computed here from the generated corpus alone, then compared with what the engine returns
over the real database, with the model played by a scripted server over HTTP.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from context_engine import TRUSTED, ContextEngine
from context_engine.graph.errors import EntityNotFound
from tests.conftest import make_config
from tests.fakes import FakeHTTPServer
from tests.graph_fakes import VERBS, graph_config, serve_graph_model

NAMES = ["Acme Corp", "Globex Inc", "Widget Pro", "Team Atlas", "Hover Board", "Jet Pack"]
GROUPS = ["group:a", "group:b", "group:c"]
KEEP = {"ce_meta", "ce_schema_migrations", "ce_store_revision", "ce_agent_links"}


@dataclass(frozen=True)
class Doc:
    acl: tuple[str, ...]
    source: str
    facts: tuple[tuple[str, str, str], ...]


facts = st.tuples(st.sampled_from(NAMES), st.sampled_from(sorted(VERBS)), st.sampled_from(NAMES)).filter(
    lambda f: f[0] != f[2]
)
docs = st.builds(
    Doc,
    acl=st.lists(st.sampled_from(GROUPS[:2]), max_size=2, unique=True).map(lambda a: tuple(sorted(a))),
    source=st.sampled_from(["s1", "s2"]),
    facts=st.lists(facts, min_size=1, max_size=4, unique=True).map(tuple),
)
corpora = st.lists(docs, min_size=1, max_size=5)
principal_sets = st.lists(st.sampled_from(GROUPS), max_size=3, unique=True)


@pytest.fixture(scope="module")
def server() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer() as fake:
        serve_graph_model(fake)
        yield fake


def expected(corpus: list[Doc], principals: list[str]) -> tuple[set[str], set[tuple[str, str, str]]]:
    """Visible entity names and (source, label, target) relationships, in stored (lower-case) form."""
    visible = [d for d in corpus if not d.acl or set(d.acl) & set(principals)]
    rels = {(s.lower(), VERBS[v][1], t.lower()) for d in visible for s, v, t in d.facts}
    return {n for s, _, t in rels for n in (s, t)}, rels


async def reset(engine: ContextEngine) -> None:
    db = await engine.services.db()
    async with db.begin() as conn:
        tables = (
            await conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"))
        ).scalars()
        wiped = sorted(t for t in tables if t.startswith("ce_") and t not in KEEP)
        await conn.execute(text(f"TRUNCATE {', '.join(wiped)}"))


async def check(url: str, server: FakeHTTPServer, corpus: list[Doc], principals: list[str]) -> None:
    async with ContextEngine(make_config(url, **graph_config(server))) as engine:
        await engine.migrate_graph()
        await reset(engine)
        for n, doc in enumerate(corpus):
            body = " ".join(f"{s} {v} {t}." for s, v, t in doc.facts)
            report = await engine.ingest(text=body, name=f"doc{n}", source_id=doc.source, acl=list(doc.acl))
            await engine.extract_graph(report.documents[0].document_id)
        names, rels = expected(corpus, principals)
        ask = {"principals": principals}

        related = await engine.graph_query("find_related", limit=500, **ask)
        assert {(r["source"], r["label"], r["target"]) for r in related["relationships"]} == rels

        for raw in NAMES:
            name = raw.lower()
            if name not in names:
                with pytest.raises(EntityNotFound):
                    await engine.graph_query("get_neighbors", entity=raw, **ask)
                continue
            near = await engine.graph_query("get_neighbors", entity=raw, limit=500, **ask)
            got = {(n["name"], n["label"], n["direction"]) for n in near["neighbors"]}
            want = {(t, label, "outgoing") for s, label, t in rels if s == name}
            want |= {(s, label, "incoming") for s, label, t in rels if t == name}
            assert got == want
            far = await engine.graph_query("traverse", entity=near["entity"]["id"], depth=3, **ask)
            assert {p["target"] for p in far["paths"]} <= names - {name}

        themes = await engine.graph_query("community_summary", limit=500, **ask)
        for community in themes["communities"]:
            summarised = set(community["summary"].removeprefix("Connected: ").split(", "))
            assert summarised <= names
            assert {e["name"] for e in community["entities"]} <= names

        usage = (await engine.search(" and ".join(NAMES), principals=principals)).usage["graph"]
        assert set(usage["entities"]) == names
        everything = await engine.graph_query("find_related", limit=500, principals=TRUSTED)
        assert len(everything["relationships"]) >= len(rels)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(corpus=corpora, principals=principal_sets)
def test_no_graph_answer_reaches_past_the_acl(
    database_url: str, server: FakeHTTPServer, corpus: list[Doc], principals: list[str]
) -> None:
    asyncio.run(check(database_url, server, corpus, principals))

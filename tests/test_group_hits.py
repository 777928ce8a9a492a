"""Grouping candidates by document in the server (``repository.group_hits``) answers what grouping the
caller-visible rows in Python answers: the same documents in the same order, the same passages of
each, the same count of documents found, for random candidate orders and callers."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from context_engine import ContextEngine
from context_engine.storage import repository as repo
from context_engine.storage.predicates import ReadScope
from tests.conftest import make_config
from tests.test_bm25_pruning import WordEmbedder

GROUPS = ("g1", "g2", "g3")


@pytest.fixture(scope="module")
async def grouped_engine(pg_base_url: str) -> AsyncIterator[tuple[ContextEngine, list[int]]]:
    """24 documents of 1-6 chunks each, a third public, the rest under one or two groups; one of them
    without a name (no version row, no live row), whose chunks no read returns."""
    from tests.test_conformance import fresh_database

    rng = random.Random(5)
    with fresh_database(pg_base_url) as url:
        config = make_config(url, ingest={"chunk_tokens": 16})
        async with ContextEngine(config, embedder=WordEmbedder()) as engine:
            for i in range(24):
                parts = [f"## Part {k}\n\nfield notes {i} {k} " + "word " * rng.randint(2, 8) for k in range(6)]
                acl = [] if i % 3 == 0 else sorted(set(rng.sample(GROUPS, rng.randint(1, 2))))
                await engine.ingest(text="\n\n".join(parts[: rng.randint(1, 6)]), name=f"d{i}.md", acl=acl)
            db = await engine.database()
            async with db.begin() as conn:  # d1.md loses its name: its chunks are passed over, as fetch_hits does
                doc = "(SELECT id FROM ce_documents WHERE name = 'd1.md')"
                await conn.execute(text(f"DELETE FROM ce_document_versions WHERE document_id = {doc}"))
                await conn.execute(text("DELETE FROM ce_documents WHERE name = 'd1.md'"))
            async with db.connect() as conn:
                ids = [int(r[0]) for r in await conn.execute(text("SELECT id FROM ce_chunks ORDER BY id"))]
            yield engine, ids


def _python_grouping(
    rows: dict[int, dict[str, object]], ranked: list[int], documents: int, per_document: int
) -> tuple[list[int], int]:
    """The grouping ``search`` did in Python before it moved into the statement."""
    order: dict[str, list[int]] = {}
    for cid in ranked:
        if cid in rows:
            order.setdefault(str(rows[cid]["document_id"]), []).append(cid)
    chosen = list(order.values())[:documents]
    return [cid for passages in chosen for cid in passages[:per_document]], len(order)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(
    seed=st.integers(0, 10_000),
    share=st.floats(0.05, 1.0),
    principals=st.one_of(st.none(), st.frozensets(st.sampled_from(GROUPS), max_size=3)),
    documents=st.integers(1, 30),
    per_document=st.integers(1, 4),
)
async def test_grouping_in_the_server_equals_grouping_in_python(
    grouped_engine: tuple[ContextEngine, list[int]],
    seed: int,
    share: float,
    principals: frozenset[str] | None,
    documents: int,
    per_document: int,
) -> None:
    engine, ids = grouped_engine
    rng = random.Random(seed)
    ranked = [*rng.sample(ids, max(1, int(share * len(ids)))), 10**12]  # 10**12: an id that does not exist
    scope = ReadScope(None if principals is None else tuple(sorted(principals)))
    db = await engine.database()
    rows, found = await repo.group_hits(db, ranked, scope, documents=documents, per_document=per_document)
    visible = await repo.fetch_hits(db, ranked, scope)
    expected, expected_found = _python_grouping(visible, ranked, documents, per_document)
    assert list(rows) == expected
    assert found == min(expected_found, documents)  # counted up to the documents asked for
    for cid, row in rows.items():
        assert row == visible[cid]  # the same columns and values as the rows read whole

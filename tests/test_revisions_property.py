"""Property: a read as of revision r answers what a fresh store built from the operations up to r
answers, less the documents the reader may no longer read today.

Random sequences of ingest (new documents and new versions), ACL changes, renames and deletes run on
one store, recording the revision after each step. Then, for every recorded revision, a second store
is rebuilt from the operations up to that step, and search, list, get and stats as of the revision
on the first store must equal the same calls on the rebuilt one: same documents, same chunks, same
scores, same ACL outcome for each principal. Revocation reaches history: for each reader, the rebuilt
store first drops every document whose ACL of today (its last ACL, once deleted) the reader does not
hold, so what a later restriction hides is hidden from every past revision too, BM25 statistics
included.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_engine import ContextEngine
from context_engine.errors import NotFound
from context_engine.principals import TRUSTED, resolve
from context_engine.retrieval.legs.fts import fts_leg
from context_engine.revisions import handles
from context_engine.storage.predicates import ReadScope
from tests.conftest import make_config
from tests.fakes.word_embedder import WordEmbedder
from tests.revisions_support import fresh_database, sibling_url

NAMES = ["alpha.md", "beta.md", "gamma.md"]
TEXTS = [
    "Kinase signalling controls the cell cycle.",
    "Ribosomes assemble proteins in the cell.",
    "Kinase inhibitors slow tumour growth in mice.\n\nA second paragraph about protein folding.",
    "Mitochondria produce energy for the cell.",
    "Protein folding errors cause disease.",
]
ACLS: list[list[str]] = [[], ["a"], ["b"]]
READERS: list[Any] = [TRUSTED, ["a"], ["b"], []]
QUERIES = ["kinase cell", "protein folding cell"]

_ingest = st.tuples(st.just("ingest"), st.integers(0, 2), st.integers(0, 4), st.integers(0, 2))
operation = st.one_of(
    _ingest,
    _ingest,  # twice: half the steps write text, so later steps have documents to change
    st.tuples(st.just("acl"), st.integers(0, 2), st.integers(0, 2)),
    st.tuples(st.just("rename"), st.integers(0, 2)),
    st.tuples(st.just("delete"), st.integers(0, 2)),
)

_RESET = (
    "TRUNCATE ce_documents, ce_document_versions, ce_chunks, ce_bm25_terms, ce_bm25_groups, ce_bm25_postings, "
    "ce_vector_counts, "
    "ce_idempotency_keys, ce_agent_links, ce_document_fields, ce_embedding_batches RESTART IDENTITY; "
    "UPDATE ce_store_revision SET revision = 0; "
    "DELETE FROM ce_meta WHERE key = 'revision_horizon'"
)


def _reset(url: str) -> None:
    """Empty a migrated store and restart its counters, so a rebuild assigns the same ids and revisions."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_RESET)


async def _current_id(eng: ContextEngine, name: str) -> str | None:
    for doc in (await eng.list_documents(principals=TRUSTED, limit=500)).documents:
        if doc.name == name:
            return doc.id
    return None


async def _apply(eng: ContextEngine, op: tuple[Any, ...], names: list[str]) -> None:
    """One operation; ``names`` is the name each slot's document has now (renames change it)."""
    kind, slot = op[0], op[1]
    if kind == "ingest":
        await eng.ingest(text=TEXTS[op[2]], name=names[slot], acl=ACLS[op[3]], principals=TRUSTED)
        return
    doc = await _current_id(eng, names[slot])
    if doc is None:
        return
    if kind == "acl":
        await eng.update_document(doc, acl=ACLS[op[2]], principals=TRUSTED)
    elif kind == "rename":
        names[slot] = names[slot].replace(".md", "-renamed.md")
        await eng.update_document(doc, name=names[slot], principals=TRUSTED)
    else:
        await eng.delete_document(doc, principals=TRUSTED)


async def _bm25(eng: ContextEngine, query: str, reader: Any, as_of: int | None) -> list[tuple[int, float]]:
    """The full-text leg's own BM25 scores (fusion normalises them away): chunk ids are the same in
    both stores, which ran the same writes from the same empty tables."""
    cfg = eng.config.search
    return await fts_leg(
        await eng.database(),
        query,
        ReadScope(resolve(reader), as_of=as_of),
        limit=50,
        config=eng.text_search_config,
        match=cfg.lexical_match,
        rank="bm25",
        normalization=cfg.lexical_normalization,
        stopwords=cfg.lexical_stopwords,
        bm25_k1=cfg.bm25.k1,
        bm25_b=cfg.bm25.b,
    )


async def _observe(
    eng: ContextEngine,
    as_of: int | None,
    doc_ids: list[str],
    readers: list[int] | None = None,
) -> dict[str, Any]:
    """Everything the read paths answer, in a form that does not depend on document ids. A
    non-trusted reader passes and is told revision handles (each store has its own key), so the
    revisions it is told are compared as the store revisions they stand for. A non-trusted reader's
    ``stats.revision`` (the last change of its view) is left out: in history it counts the closing of
    a version the reader could read then and can read now, which a store rebuilt up to then (where
    the reader may not read the document yet) cannot show; test_cross_tenant_signals covers it."""
    seen: dict[str, Any] = {}
    keys = await handles.for_db(await eng.database())
    for i, reader in enumerate(READERS):
        if readers is not None and i not in readers:
            continue
        trusted = reader is TRUSTED

        def store(told: int, trusted: bool = trusted) -> int | None:
            return told if trusted else keys.decode(told)

        at = as_of if as_of is None or trusted else keys.encode(as_of)
        for query in QUERIES:
            seen[f"bm25 {i} {query}"] = await _bm25(eng, query, reader, as_of)
            result = await eng.search(query, principals=reader, top_k=20, as_of=at)
            seen[f"search {i} {query}"] = [
                (h.document_name, h.chunk_idx, h.chunk_text, h.score, h.matched_by, h.similarity) for h in result.hits
            ]
        listed = (await eng.list_documents(principals=reader, limit=500, as_of=at)).documents
        seen[f"list {i}"] = sorted(
            (d.name, d.source_id, d.acl, d.version, store(d.revision), d.chunk_count, d.status) for d in listed
        )
        got = []
        for doc in doc_ids:
            try:
                found = await eng.get_document(doc, principals=reader, as_of=at)
            except NotFound:
                continue
            got.append((found.name, found.text, found.acl, found.version, store(found.revision), found.attributes))
        seen[f"get {i}"] = sorted(got)
        stats = await eng.stats(principals=reader, as_of=at)
        revision = stats.revision if trusted else None
        seen[f"stats {i}"] = (stats.documents, stats.chunks, stats.by_status, stats.sources, revision)
    return seen


async def _all_ids(eng: ContextEngine) -> list[str]:
    async with (await eng.database()).connect() as conn:
        from sqlalchemy import text

        rows = await conn.execute(text("SELECT DISTINCT CAST(document_id AS text) FROM ce_document_versions"))
        return [str(r[0]) for r in rows]


async def _acl_today(eng: ContextEngine) -> list[list[str]]:
    """Each document's ACL of today (the last one it had, once deleted), in the order the documents
    were created: the same order in a store rebuilt from a prefix of the operations."""
    async with (await eng.database()).connect() as conn:
        from sqlalchemy import text

        rows = await conn.execute(
            text(
                "SELECT coalesce(d.acl, (SELECT l.acl FROM ce_document_versions l WHERE l.document_id = f.document_id "
                "ORDER BY l.version DESC LIMIT 1)) FROM ce_document_versions f "
                "LEFT JOIN ce_documents d ON d.id = f.document_id WHERE f.version = 1 ORDER BY f.valid_from"
            )
        )
        return [list(r[0]) for r in rows]


async def _created(eng: ContextEngine) -> list[str]:
    """The rebuilt store's document ids in creation order."""
    async with (await eng.database()).connect() as conn:
        from sqlalchemy import text

        rows = await conn.execute(
            text("SELECT CAST(document_id AS text) FROM ce_document_versions WHERE version = 1 ORDER BY valid_from")
        )
        return [str(r[0]) for r in rows]


def _revoked_for(reader: Any, today: list[list[str]]) -> frozenset[int]:
    """Creation indexes of the documents ``reader`` may not read today."""
    if reader is TRUSTED:
        return frozenset()
    held = set(reader)
    return frozenset(i for i, acl in enumerate(today) if acl and not held & set(acl))


async def _check(history_url: str, fresh_url: str, ops: list[tuple[Any, ...]]) -> None:
    embedder = WordEmbedder()
    async with ContextEngine(make_config(history_url), embedder=embedder) as history:
        await history.revision()  # migrate before the reset
        _reset(history_url)
        names = list(NAMES)
        recorded: list[tuple[int, int]] = []  # (revision, steps applied)
        for step, op in enumerate(ops):
            await _apply(history, op, names)
            recorded.append((await history.revision(), step + 1))
        history_ids = await _all_ids(history)
        today = await _acl_today(history)
        checked: set[int] = set()
        async with ContextEngine(make_config(fresh_url), embedder=embedder) as fresh:
            await fresh.revision()
            for revision, steps in recorded:
                if revision in checked:
                    continue
                checked.add(revision)
                groups: dict[frozenset[int], list[int]] = {}
                for i, reader in enumerate(READERS):
                    groups.setdefault(_revoked_for(reader, today), []).append(i)
                for revoked, readers in groups.items():
                    _reset(fresh_url)
                    fresh_names = list(NAMES)
                    for op in ops[:steps]:
                        await _apply(fresh, op, fresh_names)
                    assert await fresh.revision() == revision
                    ids = await _all_ids(fresh)
                    created = await _created(fresh)
                    live_ids = {d.id for d in (await fresh.list_documents(principals=TRUSTED, limit=500)).documents}
                    for index in revoked:
                        if index < len(created) and created[index] in live_ids:
                            await fresh.delete_document(created[index], principals=TRUSTED)
                    expected = await _observe(fresh, None, ids, readers)
                    actual = await _observe(history, revision, history_ids, readers)
                    assert actual == expected, f"as of revision {revision} after {ops[:steps]}, readers {readers}"


@pytest.fixture
def stores(database_url: str) -> Iterator[tuple[str, str]]:
    with fresh_database(sibling_url(database_url, "_rebuilt")) as fresh_url:
        yield database_url, fresh_url


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(operation, min_size=2, max_size=7))
@pytest.mark.filterwarnings("ignore:principals=None:DeprecationWarning")
def test_reads_as_of_each_revision_equal_a_store_rebuilt_up_to_it(stores: tuple[str, str], ops: list[Any]) -> None:
    history_url, fresh_url = stores
    asyncio.run(_check(history_url, fresh_url, [tuple(op) for op in ops]))

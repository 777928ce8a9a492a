"""Bulk ingest against the real embedded PostgreSQL: the same stored state as the ordinary ingest,
the search indexes rebuilt as the migrations declare them, bad input refused, the CLI flag."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import text

from context_engine import TRUSTED, ContextEngine
from context_engine.cli import main
from context_engine.embeddings.base import InputKind
from context_engine.errors import ContextEngineError, Forbidden, IngestTooLarge, InvalidRequest, ProviderError
from context_engine.ingest.bulk import REBUILT_INDEXES, BulkDocument
from tests.conftest import make_config
from tests.fakes.word_embedder import WordEmbedder
from tests.test_conformance import fresh_database

WORDS = (
    "protein cell membrane receptor signal pathway enzyme binding gene expression tumour growth factor "
    "immune response cytokine mutation sequence structure fold kinase inhibitor dose trial patient "
    "outcome risk cohort vitamin deficiency bone density fracture muscle insulin glucose"
).split()


def corpus(count: int, seed: int = 3) -> list[dict[str, Any]]:
    """Documents of a few sections each (about 300 chunks for 40 documents), varied ACLs."""
    rng = random.Random(seed)
    acls: list[list[str]] = [[], ["team-a"], ["team-b"], ["team-a", "team-b"]]
    docs = []
    for i in range(count):
        sections = []
        for s in range(rng.randint(5, 10)):
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 60)))
            sections.append(f"## Part {s} {rng.choice(WORDS)}\n\n{words.capitalize()}.")
        docs.append(
            {
                "text": "\n\n".join(sections),
                "name": None if i % 13 == 0 else f"doc-{i:03d}.md",
                "source_id": "s1" if i % 2 else "s2",
                "acl": acls[i % len(acls)],
                "attributes": {"n": i},
            }
        )
    return docs


@pytest.fixture
def second_database_url(pg_base_url: str) -> Iterator[str]:
    with fresh_database(pg_base_url) as url:
        yield url


@pytest.fixture
async def words_engine(database_url: str) -> AsyncIterator[ContextEngine]:
    async with ContextEngine(make_config(database_url), embedder=WordEmbedder(16)) as eng:
        yield eng


def rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()


#: the stored state, without the ids and timestamps that differ between any two runs
STATE = {
    "documents": "SELECT source_id, name, mime, text, acl, attributes, status, failure_reason, content_hash, meta, "
    "version, chunk_count, created_revision, updated_revision, lease_holder FROM ce_documents ORDER BY 1, 2",
    "versions": "SELECT source_id, name, version, content_hash, valid_from, valid_to, acl, attributes, mime, meta, "
    "chunk_count FROM ce_document_versions ORDER BY 1, 2, 3",
    "chunks": "SELECT d.name, c.version, c.position, c.source_id, c.acl, c.text, c.text_hash, c.section, c.page, "
    "c.kind, c.tsv::text, c.tsv_tokens, c.embedding_key, c.meta, c.valid_from, c.valid_to "
    "FROM ce_chunks c JOIN ce_documents d ON d.id = c.document_id ORDER BY 1, 2, 3",
    # the ordinary path sends a vector as text with 7 significant digits, the bulk path sends the
    # embedder's float32 values in binary: equal to within the 7th digit
    "vectors": "SELECT c.embedding::real[] FROM ce_chunks c JOIN ce_documents d ON d.id = c.document_id "
    "ORDER BY d.name, c.version, c.position",
    # by (source, ACL), not by group id: the two paths may number the groups in another order
    "bm25_terms": "SELECT t.lexeme, g.source_id, g.acl, t.df FROM ce_bm25_terms t "
    "LEFT JOIN ce_bm25_groups g USING (group_id) ORDER BY 1, 2, 3",
    "bm25_groups": "SELECT source_id, acl, chunks, tokens FROM ce_bm25_groups ORDER BY 1, 2",
    # running float32 sums: the same vectors added in another order (per document, per batch) may
    # differ in the last bits, so the sums are compared within a tolerance below
    "vector_counts": "SELECT source_id, kind, principal, chunks, embedding_sum::real[] FROM ce_vector_counts "
    "WHERE chunks <> 0 ORDER BY 1, 2, 3",
    "revision": "SELECT revision FROM ce_store_revision",
}


def state(url: str) -> dict[str, list[tuple[Any, ...]]]:
    return {table: rows(url, sql) for table, sql in STATE.items()}


async def hits(engine: ContextEngine, query: str, principals: Any) -> list[tuple[str, int, float]]:
    result = await engine.search(query, top_k=20, principals=principals)
    return [(h.document_name, h.chunk_idx, h.score) for h in result.hits]


async def test_bulk_leaves_the_store_as_the_ordinary_ingest_does(database_url: str, second_database_url: str) -> None:
    docs = corpus(40)
    async with ContextEngine(make_config(database_url), embedder=WordEmbedder(16)) as ordinary:
        for doc in docs:
            report = await ordinary.ingest(**doc)
            assert report.documents[0].status == "completed"
        async with ContextEngine(make_config(second_database_url), embedder=WordEmbedder(16)) as bulk:
            report = await bulk.bulk_ingest(docs, batch_chunks=64)
            assert report.documents == 40 and report.ordinary == [] and report.batches > 2
            first, second = state(database_url), state(second_database_url)
            assert sum(1 for _ in first["chunks"]) > 250
            for table in STATE:
                if table == "vectors":
                    pairs = zip(first[table], second[table], strict=True)
                    assert max(abs(x - y) for (a,), (b,) in pairs for x, y in zip(a, b, strict=True)) < 1e-6
                elif table == "vector_counts":
                    assert [r[:4] for r in first[table]] == [r[:4] for r in second[table]], table
                    for r1, r2 in zip(first[table], second[table], strict=True):
                        assert all(abs(x - y) <= 1e-4 * max(1.0, abs(x)) for x, y in zip(r1[4], r2[4], strict=True))
                else:
                    assert first[table] == second[table], table
            for query in ("protein kinase inhibitor", "bone fracture risk", "insulin"):
                for principals in (TRUSTED, ["team-a"], ["team-b"], []):
                    expected, got = await hits(ordinary, query, principals), await hits(bulk, query, principals)
                    assert [h[:2] for h in expected] == [h[:2] for h in got] and expected
                    assert all(abs(a[2] - b[2]) < 1e-5 for a, b in zip(expected, got, strict=True))


def index_state(url: str) -> dict[str, tuple[str, bool, int]]:
    found = rows(
        url,
        "SELECT c.relname, pg_get_indexdef(i.indexrelid), i.indisvalid, i.indexrelid::int FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'ce_chunks'::regclass",
    )
    return {name: (definition, valid, oid) for name, definition, valid, oid in found}


async def test_the_indexes_are_rebuilt_as_the_migrations_declare_them(
    words_engine: ContextEngine, database_url: str
) -> None:
    await words_engine.stats(principals=TRUSTED)  # migrates
    before = index_state(database_url)
    report = await words_engine.bulk_ingest(corpus(12))
    after = index_state(database_url)
    # the trigram leg is off and the vectors' index is the half-precision one: the others are not built
    rebuilt = set(REBUILT_INDEXES) - {"ix_ce_chunks_trgm", "ix_ce_chunks_embedding"}
    assert "ix_ce_chunks_trgm" not in before and "ix_ce_chunks_trgm" not in after
    assert "ix_ce_chunks_embedding" not in before and "ix_ce_chunks_embedding" not in after
    assert report.index_rebuilt and set(report.index_seconds) == rebuilt
    assert {n: d for n, (d, _, _) in before.items()} == {n: d for n, (d, _, _) in after.items()}
    assert all(valid for _, valid, _ in after.values())
    for name in rebuilt:  # a new index, defined as before
        assert before[name][2] != after[name][2]
    untouched = set(before) - rebuilt
    assert untouched and all(before[n][2] == after[n][2] for n in untouched)


async def test_the_trigram_index_is_rebuilt_when_the_trigram_leg_is_on(database_url: str) -> None:
    config = make_config(database_url, fusion={"weights": {"trigram": 0.5}})
    async with ContextEngine(config, embedder=WordEmbedder(16)) as eng:
        await eng.stats(principals=TRUSTED)  # migrates, with the optional trigram revision
        before = index_state(database_url)
        report = await eng.bulk_ingest(corpus(12))
        after = index_state(database_url)
        found = await eng.search("protien", top_k=3, principals=TRUSTED)  # a typo only trigrams match
    assert set(report.index_seconds) == set(REBUILT_INDEXES) - {"ix_ce_chunks_embedding"}
    assert before["ix_ce_chunks_trgm"][0] == after["ix_ce_chunks_trgm"][0] and after["ix_ce_chunks_trgm"][1]
    assert before["ix_ce_chunks_trgm"][2] != after["ix_ce_chunks_trgm"][2]
    assert any("trigram" in hit.matched_by for hit in found.hits)


async def test_build_index_false_keeps_the_indexes_and_writes_through_them(
    words_engine: ContextEngine, database_url: str
) -> None:
    await words_engine.stats(principals=TRUSTED)
    before = index_state(database_url)
    report = await words_engine.bulk_ingest(corpus(8), build_index=False)
    assert not report.index_rebuilt and report.index_seconds == {}
    assert index_state(database_url) == before
    result = await words_engine.search("protein", top_k=5, principals=TRUSTED)
    assert result.hits and "vector" in {leg for h in result.hits for leg in h.matched_by}


async def test_taken_identities_and_unstorable_documents_go_the_ordinary_way(
    words_engine: ContextEngine, database_url: str
) -> None:
    await words_engine.ingest(text="an earlier protein version", name="taken.md", source_id="s1")
    docs = [
        {"text": "the new protein version", "name": "taken.md", "source_id": "s1"},
        {"text": "first copy of a name", "name": "twice.md"},
        {"text": "second copy of the name", "name": "twice.md"},
        {"text": "   ", "name": "blank.md"},
        BulkDocument(text="a plain bulk document about kinase", name="plain.md"),
    ]
    report = await words_engine.bulk_ingest(docs, build_index=False)
    assert report.documents == 2  # twice.md (first) and plain.md
    outcome = {(r.name, r.status, r.version) for r in report.ordinary}
    assert outcome == {("taken.md", "completed", 2), ("twice.md", "completed", 2), ("blank.md", "failed", None)}
    texts = dict(rows(database_url, "SELECT name, text FROM ce_documents WHERE status = 'completed'"))
    assert texts == {
        "taken.md": "the new protein version",
        "twice.md": "second copy of the name",
        "plain.md": "a plain bulk document about kinase",
    }


async def test_searches_keep_answering_while_the_indexes_are_away(words_engine: ContextEngine) -> None:
    await words_engine.ingest(text="Herons wait motionless at the river bank.", name="anchor.md", acl=["team-a"])
    db = await words_engine.database()
    load = asyncio.create_task(words_engine.bulk_ingest(corpus(150), batch_chunks=100))
    answered_without_index = 0
    while not load.done():
        async with db.connect() as conn:
            present = await conn.scalar(
                text("SELECT count(*) FROM pg_indexes WHERE indexname = 'ix_ce_chunks_embedding_half'")
            )
        result = await words_engine.search("herons river bank", top_k=3, principals=["team-a"])
        assert result.hits and result.hits[0].document_name == "anchor.md"
        answered_without_index += present == 0
        await asyncio.sleep(0.05)
    report = await load
    assert report.documents == 150 and report.index_rebuilt
    assert answered_without_index > 0


@pytest.mark.parametrize(
    ("documents", "error", "code"),
    [
        ("not a list", InvalidRequest, "invalid_request"),
        ([{"name": "no-text.md"}], InvalidRequest, "invalid_request"),
        ([{"text": "x", "file": b"y"}], InvalidRequest, "invalid_request"),
        ([{"text": 42}], InvalidRequest, "invalid_request"),
        ([{"text": "x", "acl": "team-a"}], InvalidRequest, "invalid_request"),
        ([{"text": "x", "acl": [""]}], InvalidRequest, "invalid_request"),
        ([{"text": "x", "source_id": " "}], InvalidRequest, "invalid_request"),
        ([{"text": "x", "colour": "red"}], InvalidRequest, "invalid_request"),
        ([{"text": "x", "attributes": ["a"]}], InvalidRequest, "invalid_request"),
        ([7], InvalidRequest, "invalid_request"),
    ],
)
async def test_bad_input_is_refused_with_a_code_and_nothing_is_written(
    words_engine: ContextEngine, database_url: str, documents: Any, error: type[ContextEngineError], code: str
) -> None:
    await words_engine.stats(principals=TRUSTED)
    before = index_state(database_url)
    good = [{"text": "a good document first", "name": "good.md"}]
    with pytest.raises(error) as caught:
        await words_engine.bulk_ingest(good + documents if isinstance(documents, list) else documents)
    assert caught.value.code == code and caught.value.status == 400
    assert rows(database_url, "SELECT count(*) FROM ce_documents") == [(0,)]
    assert {n: d for n, (d, _, _) in index_state(database_url).items()} == {n: d for n, (d, _, _) in before.items()}


async def test_an_acl_the_caller_does_not_hold_is_forbidden(words_engine: ContextEngine, database_url: str) -> None:
    with pytest.raises(Forbidden) as caught:
        await words_engine.bulk_ingest([{"text": "secret", "acl": ["team-b"]}], principals=["team-a"])
    assert caught.value.status == 403
    assert rows(database_url, "SELECT count(*) FROM ce_documents") == [(0,)]
    report = await words_engine.bulk_ingest([{"text": "mine", "acl": ["team-a"]}], principals=["team-a"])
    assert report.documents == 1


async def test_a_text_over_the_file_cap_is_refused_and_an_acl_not_held_is_checked_before_it(
    database_url: str,
) -> None:
    config = make_config(database_url, ingest={"max_file_bytes": 64})
    async with ContextEngine(config, embedder=WordEmbedder(16)) as eng:
        over = {"text": "protein " * 20, "name": "over.md", "acl": ["team-b"]}
        with pytest.raises(Forbidden):  # the ACL is checked before the text is read
            await eng.bulk_ingest([{"text": "a short one", "acl": ["team-a"]}, over], principals=["team-a"])
        with pytest.raises(IngestTooLarge) as caught:
            await eng.bulk_ingest([{"text": "a short one", "name": "short.md"}, {**over, "acl": []}])
        assert caught.value.code == "too_large" and caught.value.status == 413
        assert caught.value.details == {"knob": "ingest.max_file_bytes", "limit": 64, "actual": 160}
        assert rows(database_url, "SELECT count(*) FROM ce_documents") == [(0,)]
        report = await eng.bulk_ingest([{"text": "a short one", "name": "short.md"}])
        assert report.documents == 1


@pytest.mark.parametrize(
    "options",
    [{"batch_chunks": 0}, {"parallel_workers": -1}, {"maintenance_work_mem": "1GB; DROP TABLE ce_chunks"}],
)
async def test_bad_options_are_refused(words_engine: ContextEngine, options: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest):
        await words_engine.bulk_ingest([{"text": "x"}], **options)


def test_cli_ingest_bulk_loads_a_folder(database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.md").write_text("# Cranes\n\nCranes migrate in autumn.")
    (folder / "sub" / "b.txt").write_text("Herons wait at the river.")
    (folder / "empty.md").write_text("   ")
    assert main(["migrate", "--database-url", database_url, "--dim", "384"]) == 0
    code = main(["ingest", str(folder), "--bulk", "--database-url", database_url, "--acl", "team-a"])
    out = capsys.readouterr().out
    assert code == 1  # the empty file failed, the others were written
    assert "2 written in bulk" in out and "1 failed" in out and "failed empty.md" in out
    assert "ix_ce_chunks_embedding_half" in out
    stored = rows(database_url, "SELECT name, status, acl FROM ce_documents ORDER BY name")
    assert stored == [
        ("a.md", "completed", ["team-a"]),
        ("empty.md", "failed", ["team-a"]),
        ("sub/b.txt", "completed", ["team-a"]),
    ]


class FailingOnWordEmbedder(WordEmbedder):
    """The word embedder, whose provider fails for any text holding ``word`` (as an outage would)."""

    def __init__(self, word: str) -> None:
        super().__init__(16)
        self.word = word

    async def embed(self, texts: list[str], *, kind: InputKind = "document") -> list[list[float]]:
        if any(self.word in t for t in texts):
            raise ProviderError("the embedding provider is unavailable")
        return await super().embed(texts, kind=kind)


async def test_a_failed_batch_stops_the_load_and_the_batch_staged_after_it_is_not_written(database_url: str) -> None:
    docs = corpus(30)
    docs[14]["text"] += "\n\nzeppelin"  # in the second of about four batches
    async with ContextEngine(make_config(database_url), embedder=FailingOnWordEmbedder("zeppelin")) as engine:
        with pytest.raises(ProviderError):
            await engine.bulk_ingest(docs, batch_chunks=64, build_index=False)
        stored = sorted(n for (n,) in rows(database_url, "SELECT (attributes->>'n')::int FROM ce_documents"))
        # whole batches from the start of the input, none from the failed one (which holds document
        # 14) or after it, though the batch after it was already under way
        assert 0 < len(stored) <= 14 and stored == list(range(len(stored)))
        # the statistics agree with the chunks that were committed
        kept = rows(
            database_url,
            "SELECT t.lexeme, g.source_id, g.acl, t.df FROM ce_bm25_terms t "
            "LEFT JOIN ce_bm25_groups g USING (group_id) ORDER BY 1, 2, 3",
        )
        recount = rows(
            database_url,
            "SELECT u.lexeme, c.source_id, c.acl, count(*) FROM ce_chunks c, unnest(c.tsv) u "
            "WHERE c.valid_to IS NULL GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
        )
        assert kept == recount and kept
        assert rows(database_url, "SELECT revision FROM ce_store_revision") == [(len(stored),)]

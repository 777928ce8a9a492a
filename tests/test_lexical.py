"""The full-text leg: query parsing, and Okapi BM25 whose statistics follow the visible corpus."""

from __future__ import annotations

import math
from typing import Any

import pytest
from sqlalchemy import text

from context_engine import ContextEngine
from context_engine.principals import TRUSTED
from context_engine.retrieval import bm25, legs, lexical
from context_engine.storage.migrate import migrate
from context_engine.storage.predicates import ReadScope
from tests.conftest import make_config
from tests.test_bm25_pruning import _postings_drift

# ------------------------------------------------------------------------------------------- parsing


def test_any_drops_stopwords_but_keeps_phrases_and_negations() -> None:
    parsed = lexical.parse('what is the "notice period" for contractors -draft')
    assert parsed.positive == ["what", "is", "the", '"notice period"', "for", "contractors"]
    assert parsed.negative == ["draft"]
    english = lexical.stopword_set("english")
    assert lexical.searchable(parsed, match="any", stopwords=english) == ['"notice period"', "contractors"]
    # ``all`` keeps every word: the caller asked for each of them
    assert lexical.searchable(parsed, match="all", stopwords=english) == parsed.positive
    # a query of nothing but stop words keeps them rather than searching for nothing
    only = lexical.parse("to be or not to be")
    assert lexical.searchable(only, match="any", stopwords=english) == only.positive
    assert lexical.searchable(parsed, match="any", stopwords=lexical.stopword_set(None)) == parsed.positive
    with pytest.raises(ValueError, match="stop-word list"):
        lexical.stopword_set("klingon")


def test_query_text_is_bound_never_spliced() -> None:
    params: dict[str, Any] = {}
    sql = lexical.tsquery_sql("x'); DROP TABLE ce_chunks; -- -y", match="any", params=params)
    assert sql is not None and "DROP" not in sql and "DROP" in params["lx_p0"] + params["lx_p1"] + params["lx_p2"]
    assert "DROP" not in lexical.terms_sql(params)


# ---------------------------------------------------------------------------------------------- BM25

_EXPECTED_TERMS = (
    "SELECT u.lexeme, c.source_id, c.acl, count(*) FROM ce_chunks c, unnest(c.tsv) u "
    "WHERE c.valid_to IS NULL GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
)
#: the kept statistics by (source, ACL); a term row whose group is gone shows with a NULL source
_KEPT_TERMS = (
    "SELECT t.lexeme, g.source_id, g.acl, t.df FROM ce_bm25_terms t "
    "LEFT JOIN ce_bm25_groups g USING (group_id) ORDER BY 1, 2, 3"
)
_KEPT_GROUPS = "SELECT source_id, acl, chunks, tokens FROM ce_bm25_groups ORDER BY 1, 2"
_EXPECTED_GROUPS = (
    "SELECT c.source_id, c.acl, count(*), sum(c.tsv_tokens) FROM ce_chunks c "
    "WHERE c.valid_to IS NULL GROUP BY 1, 2 ORDER BY 1, 2"
)


async def _assert_stats_current(engine: ContextEngine) -> None:
    """The maintained tables equal a recount from the current chunks."""
    sql = await engine.database()
    async with sql.connect() as conn:
        kept = (await conn.execute(text(_KEPT_TERMS))).all()
        recount = (await conn.execute(text(_EXPECTED_TERMS))).all()
        assert [tuple(r) for r in kept] == [(r[0], r[1], r[2], r[3]) for r in recount]
        kept_groups = (await conn.execute(text(_KEPT_GROUPS))).all()
        recount_groups = (await conn.execute(text(_EXPECTED_GROUPS))).all()
        assert [tuple(r) for r in kept_groups] == [tuple(r) for r in recount_groups]
    assert await _postings_drift(sql) == (0, 0)  # the postings (migration 0020) too


async def test_bm25_statistics_follow_ingest_replace_acl_change_and_delete(database_url: str) -> None:
    async with ContextEngine(make_config(database_url)) as engine:
        first = await engine.ingest(text="Cats chase mice. Cats sleep.", name="a")
        await engine.ingest(text="Dogs chase cats in the park.", name="b", acl=["group:x"])
        await engine.ingest(text="A quiet park with old trees.", name="c", source_id="other")
        await _assert_stats_current(engine)
        await engine.ingest(text="Cats chase mice and birds.", name="a")  # a new version replaces the old
        await _assert_stats_current(engine)
        await engine.update_document(first.documents[0].document_id, acl=["group:y"], principals=TRUSTED)
        await _assert_stats_current(engine)
        await engine.delete_document(first.documents[0].document_id, principals=TRUSTED)
        await _assert_stats_current(engine)
        sql = await engine.database()
        async with sql.connect() as conn:
            # nothing of the deleted document is left behind, not even zero rows
            assert (await conn.scalar(text("SELECT count(*) FROM ce_bm25_groups WHERE acl = '{group:y}'"))) == 0
            orphans = (
                "SELECT count(*) FROM ce_bm25_terms t LEFT JOIN ce_bm25_groups g USING (group_id) "
                "WHERE g.group_id IS NULL"
            )
            assert (await conn.scalar(text(orphans))) == 0
            assert (await conn.scalar(text("SELECT min(df) FROM ce_bm25_terms"))) >= 1


async def _bm25(engine: ContextEngine, query: str, principals: tuple[str, ...] | None) -> dict[str, float]:
    sql = await engine.database()
    found = await legs.fts_leg(
        sql,
        query,
        ReadScope(principals),
        limit=10,
        config="english",
        match="any",
        rank="bm25",
        normalization=0,
    )
    async with sql.connect() as conn:
        names = dict(
            (
                await conn.execute(
                    text("SELECT c.id, d.name FROM ce_chunks c JOIN ce_documents d ON d.id = c.document_id")
                )
            ).all()
        )
    return {names[cid]: score for cid, score in found}


async def test_hidden_documents_change_neither_results_nor_scores(database_url: str) -> None:
    async with ContextEngine(make_config(database_url)) as engine:
        await engine.ingest(text="Rotating the database credentials every quarter.", name="public-1")
        await engine.ingest(text="Backups of the database run nightly; credentials live in the vault.", name="public-2")
        before = await _bm25(engine, "database credentials rotation", ())
        assert set(before) == {"public-1", "public-2"} and all(s > 0 for s in before.values())
        # a restricted document full of the query's words
        await engine.ingest(
            text="Credentials credentials credentials: the database root credentials. " * 3,
            name="secret",
            acl=["group:sec"],
        )
        after_anonymous = await _bm25(engine, "database credentials rotation", ())
        assert after_anonymous == before  # same hits, same scores: IDF and lengths ignore what you cannot see
        insider = await _bm25(engine, "database credentials rotation", ("group:sec",))
        assert "secret" in insider and insider["public-1"] != before["public-1"]
        trusted = await _bm25(engine, "database credentials rotation", None)
        assert trusted == insider


async def test_bm25_ranks_rare_terms_above_common_ones(database_url: str) -> None:
    config = make_config(
        database_url,
        search={"lexical_rank": "bm25"},
        fusion={"weights": {"fts": 1.0, "trigram": 0.0, "vector": 0.0, "graph": 0.0}},
    )
    async with ContextEngine(config) as engine:
        for i in range(6):
            await engine.ingest(text=f"Report number {i} about the weather and the harvest.", name=f"common-{i}")
        await engine.ingest(text="The weather station recorded a tornado.", name="rare")
        result = await engine.search("weather tornado", principals=TRUSTED)
        assert result.hits[0].document_name == "rare"
        assert result.usage["legs"] == ["fts"]
        # eight postings (seven chunks hold "weather", one of them "tornado" too), far fewer than the
        # bounded pass would score: all scored directly
        assert result.usage["lexical_pass"] == {"candidates": 8, "scored": 8, "pass": "direct"}
        negated = await engine.search("weather -tornado", principals=TRUSTED)
        assert "rare" not in {h.document_name for h in negated.hits} and len(negated.hits) == 6


async def test_migration_backfills_statistics_for_existing_chunks(database_url: str) -> None:
    async with ContextEngine(make_config(database_url)) as engine:
        await engine.ingest(text="Cats chase mice.", name="a")
        await engine.ingest(text="Dogs chase cats.", name="b", acl=["group:x"])
        sql = await engine.database()
        revisions = ("0002_bm25", "0015_bm25_group_ids", "0019_bm25_term_bounds", "0020_bm25_postings")
        async with sql.begin() as conn:  # as if the database predated revisions 0002, 0015, 0019 and 0020
            await conn.execute(text("DROP TABLE ce_bm25_terms, ce_bm25_groups, ce_bm25_postings"))
            await conn.execute(text("DELETE FROM ce_schema_migrations WHERE id = ANY(:ids)"), {"ids": list(revisions)})
        report = await migrate(sql, dim=engine.embedder.dim)
        assert report.applied == list(revisions)
        await _assert_stats_current(engine)
        async with sql.begin() as conn:  # 0015, 0019 and 0020 run again (their statements are idempotent)
            await conn.execute(
                text("DELETE FROM ce_schema_migrations WHERE id = ANY(:ids)"), {"ids": list(revisions[1:])}
            )
        report = await migrate(sql, dim=engine.embedder.dim)
        assert report.applied == list(revisions[1:])
        await _assert_stats_current(engine)
        await engine.ingest(text="Birds chase cats.", name="c", acl=["group:x"])
        await _assert_stats_current(engine)
        assert (await _bm25(engine, "cats chase", None)).keys() == {"a", "b", "c"}


async def test_a_section_heading_is_indexed_with_every_chunk_under_it(database_url: str) -> None:
    config = make_config(database_url, fusion={"weights": {"fts": 1.0, "trigram": 0.0, "vector": 0.0}})
    text = "# Volcanology\n\nMagma rises through the crust.\n\n## Eruptions\n\nAsh clouds form."
    async with ContextEngine(config) as engine:
        await engine.ingest(text=text, name="v")
        await engine.ingest(text="Ash is also what remains of a fire.", name="fire")
        # the nearest heading's words find the chunk under it, though the chunk's text never says them
        hits = (await engine.search("eruptions", principals=TRUSTED)).hits
        assert [(h.document_name, h.section) for h in hits] == [("v", "Eruptions")]
        hits = (await engine.search("eruption ash", principals=TRUSTED)).hits
        assert (hits[0].document_name, hits[0].section) == ("v", "Eruptions") and hits[1].document_name == "fire"


async def test_chunk_rows_stay_whole_in_their_page(database_url: str) -> None:
    """The tsvector and vector of a typical chunk are stored inline, not in the TOAST table."""
    async with ContextEngine(make_config(database_url)) as engine:
        await engine.ingest(text="A chunk of ordinary length. " * 40, name="a")
        sql = await engine.database()
        async with sql.connect() as conn:
            options = await conn.scalar(text("SELECT reloptions FROM pg_class WHERE relname = 'ce_chunks'"))
            assert "toast_tuple_target=8160" in options
            external = await conn.scalar(
                text(
                    "SELECT count(pg_column_toast_chunk_id(tsv)) + count(pg_column_toast_chunk_id(embedding)) "
                    "FROM ce_chunks"
                )
            )
            assert external == 0


async def test_bounded_bm25_returns_exactly_what_scoring_every_candidate_returns(database_url: str) -> None:
    """The bound pass against a BM25 computed here in Python from the stored ``tsvector``s, for
    depths that prove the short pass exact and depths that force the full pass, for a caller who
    sees part of the corpus and for a trusted one."""
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "lambda", "theta", "zeta"]
    async with ContextEngine(make_config(database_url)) as engine:
        for i in range(48):
            # word j appears in every (j+1)-th document, repeated by position: frequent words are common
            body = " ".join(w for j, w in enumerate(words) for _ in range(1 + (i + j) % 3) if i % (j + 1) == 0)
            acl = ["group:x"] if i % 4 == 0 else []
            await engine.ingest(text=f"Note {i}: {body} filler words here.", name=f"n{i}", acl=acl)
        sql = await engine.database()
        async with sql.connect() as conn:
            rows = (
                await conn.execute(
                    text(
                        "SELECT c.id, c.acl, c.tsv_tokens, u.lexeme, coalesce(array_length(u.positions, 1), 1) "
                        "FROM ce_chunks c, unnest(c.tsv) u WHERE c.valid_to IS NULL"
                    )
                )
            ).all()

        def reference(query_terms: list[str], principals: tuple[str, ...] | None, limit: int) -> list[int]:
            docs: dict[int, tuple[int, dict[str, int]]] = {}
            for cid, acl, length, lexeme, tf in rows:
                if principals is None or not acl or set(acl) & set(principals):
                    docs.setdefault(cid, (length, {}))[1][lexeme] = tf
            n = len(docs)
            avgdl = max(sum(length for length, _ in docs.values()) / max(n, 1), 1)
            scores: dict[int, float] = {}
            for term in query_terms:
                df = sum(1 for _, tfs in docs.values() if term in tfs)
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                for cid, (length, tfs) in docs.items():
                    if term in tfs:
                        tf = tfs[term]
                        norm = 1.2 * (0.25 + 0.75 * length / avgdl)
                        scores[cid] = scores.get(cid, 0.0) + idf * tf * 2.2 / (tf + norm)
            return [cid for cid, _ in sorted(scores.items(), key=lambda p: (-p[1], p[0]))][:limit]

        passes: set[str] = set()
        for query in ("alpha zeta", "beta gamma theta", "omega kappa lambda sigma", "alpha beta gamma delta"):
            async with sql.connect() as conn:
                terms = list(
                    await conn.scalar(text("SELECT tsvector_to_array(to_tsvector('english', :q))"), {"q": query})
                )
            for principals in ((), None):
                expected = reference(terms, principals, 5)
                for depth in (1, 2, 1000):
                    params: dict[str, Any] = {"lx_cfg": "english", "limit": 5}
                    tsq = lexical.tsquery_sql(query, match="any", params=params)
                    assert tsq is not None
                    report: dict[str, Any] = {}
                    scope = ReadScope(principals)
                    async with sql.connect() as conn:
                        found = await bm25.rank(
                            conn,
                            tsquery=tsq,
                            terms=lexical.terms_sql(params),
                            chunk_predicate=scope.predicate("c", params),
                            stats_scope={"principals": principals, "source_ids": None},
                            params=params,
                            k1=1.2,
                            b=0.75,
                            limit=5,
                            bound_depth=depth,
                            report=report,
                            direct_factor=0.0,  # bound even these few candidates
                            strategy="bounded",  # the pass under test (pruning has its own tests)
                        )
                    assert [cid for cid, _ in found] == expected, (query, principals, depth, report)
                    passes.add(report["pass"])
                    if depth == 1000:
                        assert report["scored"] == report["candidates"]
        assert passes == {"bounded", "full"}

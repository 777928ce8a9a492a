"""The pruned BM25 pass answers exactly what scoring every candidate answers (ids, scores, order),
for random queries, callers and depths, and it says which pass it took when its shortcuts fail."""

from __future__ import annotations

import hashlib
import random
import string
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine import TRUSTED, ContextEngine
from context_engine.embeddings.base import Embedder, InputKind
from context_engine.retrieval import bm25, bm25_gate, lexical
from context_engine.storage.predicates import ReadScope
from tests.conftest import make_config

GROUPS = ("g1", "g2", "g3", "g4")
#: a Zipf-like corpus: the first words are in most chunks, the last in a few
WORDS = (
    "cell protein gene expression tumor patient receptor signal pathway mouse brain insulin "
    "kinase neuron plasma vaccine zebrafish telomere prion ribosome"
).split()


class WordEmbedder(Embedder):
    """Hashed bag-of-words vectors: the ingest path runs whole, with no model to load."""

    provider, model, dim, max_input_tokens = "test", "words", 16, 512

    async def embed(self, texts: list[str], *, kind: InputKind = "document") -> list[list[float]]:
        out = []
        for body in texts:
            vec = [0.0] * self.dim
            for word in body.lower().split():
                vec[int(hashlib.sha256(word.encode()).hexdigest(), 16) % self.dim] += 1.0
            out.append(vec)
        return out

    async def aclose(self) -> None:
        return None


@pytest.fixture(scope="module")
async def corpus_engine(pg_base_url: str) -> AsyncIterator[ContextEngine]:
    """160 documents of Zipf-drawn words, a quarter public, the rest under one or two groups."""
    from tests.test_conformance import fresh_database

    rng = random.Random(19)
    weights = [1 / (rank + 1) for rank in range(len(WORDS))]
    with fresh_database(pg_base_url) as url:
        async with ContextEngine(make_config(url), embedder=WordEmbedder()) as engine:
            for i in range(160):
                body = " ".join(rng.choices(WORDS, weights, k=rng.randint(3, 30)))
                acl = [] if i % 4 == 0 else sorted(set(rng.sample(GROUPS, rng.randint(1, 2))))
                await engine.ingest(text=f"{body}.", name=f"d{i}.md", acl=acl)
            yield engine


async def ranked(
    db: AsyncEngine,
    query: str,
    principals: tuple[str, ...] | None,
    limit: int,
    strategy: str,
    *,
    bound_depth: int = bm25.BOUND_DEPTH,
    match: str = "any",
    visible_first_share: float = 0.0,
    direct_factor: float | None = 0.0,
    kept_bounds: bool = True,
    postings: bool = True,
    plain: bool | None = None,
) -> tuple[list[tuple[int, float]], dict[str, Any]]:
    """``plain`` (None: as the full-text leg decides it) skips the direct pass's per-row check."""
    params: dict[str, Any] = {"lx_cfg": "english", "limit": limit}
    tsquery = lexical.tsquery_sql(query, match=match, params=params)
    assert tsquery is not None
    scope = ReadScope(principals)
    if plain is None:
        plain = scope.groups_decide and lexical.plain_disjunction(query, match=match, config="english")
    report: dict[str, Any] = {}
    async with db.connect() as conn:
        rows = await bm25.rank(
            conn,
            tsquery=tsquery,
            terms=lexical.terms_sql(params),
            chunk_predicate=scope.predicate("c", params),
            stats_scope={"principals": principals, "source_ids": None},
            params=params,
            k1=1.2,
            b=0.75,
            limit=limit,
            bound_depth=bound_depth,
            report=report,
            strategy=strategy,
            prune_from=0,  # prune however small the corpus
            visible_first_share=visible_first_share,
            direct_factor=direct_factor,  # 0: bound and prune even the few candidates of a small corpus
            kept_bounds=kept_bounds,
            postings=postings,
            plain=plain,
        )
    return rows, report


def assert_same(found: list[tuple[int, float]], expected: list[tuple[int, float]]) -> None:
    """The same scores in the same order, and the same chunks at each score. Two chunks whose scores
    tie exactly can come back in either order (a pass may sum their terms in another order, which
    moves the last bit), and at the cut either may be the one kept, so ids are compared per score."""
    assert [score for _, score in found] == pytest.approx([score for _, score in expected], rel=1e-9)

    def by_score(pairs: list[tuple[int, float]]) -> dict[float, set[int]]:
        grouped: dict[float, set[int]] = {}
        for cid, score in pairs:
            grouped.setdefault(round(score, 9), set()).add(cid)
        return grouped

    cut = round(expected[-1][1], 9) if expected else None
    mine, theirs = by_score(found), by_score(expected)
    assert {k: v for k, v in mine.items() if k != cut} == {k: v for k, v in theirs.items() if k != cut}
    if cut is not None:
        assert len(mine[cut]) == len(theirs[cut])


async def postings_seen(db: AsyncEngine, query: str, principals: tuple[str, ...] | None, match: str = "any") -> int:
    """What the direct pass over the postings reports as its candidates: each current chunk the caller
    may see counted once per query lexeme it holds (counted here from the chunks' own ``tsvector``)."""
    params: dict[str, Any] = {"lx_cfg": "english"}
    lexical.tsquery_sql(query, match=match, params=params)  # binds the positive pieces the terms are read from
    terms = lexical.terms_sql(params)
    visible = ReadScope(principals).predicate("c", params)
    sql = (
        "SELECT count(*) FROM ce_chunks c CROSS JOIN LATERAL unnest(tsvector_to_array(c.tsv)) x(l) "
        f"WHERE x.l IN (SELECT DISTINCT unnest({terms})) AND {visible}"
    )
    async with db.connect() as conn:
        return int(await conn.scalar(text(sql), params) or 0)


PASSES_SEEN: set[str] = set()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(
    words=st.lists(st.sampled_from([*WORDS, "absentword"]), min_size=1, max_size=7),
    negated=st.one_of(st.none(), st.sampled_from(WORDS)),
    principals=st.one_of(st.none(), st.frozensets(st.sampled_from(GROUPS), max_size=3)),
    limit=st.sampled_from([1, 3, 10, 40]),
    depth=st.sampled_from([1, 2, bm25.BOUND_DEPTH]),
    match=st.sampled_from(["any", "all"]),
    visible_first=st.booleans(),
)
async def test_pruned_answer_equals_scoring_every_candidate(
    corpus_engine: ContextEngine,
    words: list[str],
    negated: str | None,
    principals: frozenset[str] | None,
    limit: int,
    depth: int,
    match: str,
    visible_first: bool,
) -> None:
    db = await corpus_engine.database()
    query = " ".join(words) + (f" -{negated}" if negated else "")
    caller = None if principals is None else tuple(sorted(principals))
    expected, full = await ranked(db, query, caller, limit, "full", match=match)
    # a share of 1.0 reads every caller's candidates from their own rows first, 0.0 from the postings
    share = 1.0 if visible_first else 0.0
    found, report = await ranked(
        db, query, caller, limit, "pruned", bound_depth=depth, match=match, visible_first_share=share
    )
    assert_same(found, expected)
    # the loose bound alone (before migration 0019) gives the same answer
    loose, _ = await ranked(
        db, query, caller, limit, "pruned", bound_depth=depth, match=match, visible_first_share=share, kept_bounds=False
    )
    assert_same(loose, expected)
    assert full["pass"] == "full" and full["scored"] == full["candidates"] >= len(expected)
    assert report["pass"] in {"pruned", "bounded", "full", "direct"}  # direct: only a query with no postings
    assert report["scored"] <= report["candidates"]
    PASSES_SEEN.add(report["pass"])


@pytest.mark.database  # reads what the database property above recorded: deselected with it
def test_every_pass_was_taken_by_the_random_queries() -> None:
    """The property above exercised each branch (it runs first in this module)."""
    assert {"pruned", "bounded", "full"} <= PASSES_SEEN, PASSES_SEEN


PLAIN_SEEN: set[bool] = set()
#: pieces the plain-disjunction shortcut must see through or refuse: a phrase by hyphen, websearch's
#: ``or``, edge punctuation, capitals, a digit, an accent (unaccent folds it), an apostrophe, a bracket
#: before a minus (websearch's negation) and a float that splits a token
EDGE_PIECES = [
    "cell-protein",
    "or",
    "OR",
    "signal.",
    "(kinase",
    "Protein",
    "gene2",
    "prïon",
    "mouse's",
    "(-cell",
    "3e14a6",
]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(
    words=st.lists(st.sampled_from([*WORDS, "absentword", *EDGE_PIECES]), min_size=1, max_size=7),
    negated=st.one_of(st.none(), st.sampled_from(WORDS)),
    principals=st.one_of(st.none(), st.frozensets(st.sampled_from(GROUPS), max_size=3)),
    limit=st.sampled_from([1, 3, 10, 40, 200]),
    match=st.sampled_from(["any", "all"]),
)
async def test_direct_pass_over_the_postings_equals_scoring_every_tsvector(
    corpus_engine: ContextEngine,
    words: list[str],
    negated: str | None,
    principals: frozenset[str] | None,
    limit: int,
    match: str,
) -> None:
    """The direct pass reads term frequencies and lengths from the postings (migration 0020) and
    tests only the best-scored rows against the chunk; the answer is the one scoring every
    candidate's ``tsvector`` gives, for phrases (``cell-protein``), negations, both matching modes
    and every caller, and its candidate count is the same: only chunks the caller may see."""
    db = await corpus_engine.database()
    query = " ".join(words) + (f" -{negated}" if negated else "")
    caller = None if principals is None else tuple(sorted(principals))
    expected, full = await ranked(db, query, caller, limit, "full", match=match)
    found, report = await ranked(db, query, caller, limit, "pruned", match=match, direct_factor=1e9)
    assert_same(found, expected)
    PLAIN_SEEN.add(lexical.plain_disjunction(query, match=match, config="english"))
    assert report["pass"] == "direct" or not expected
    checked, _ = await ranked(db, query, caller, limit, "pruned", match=match, direct_factor=1e9, plain=False)
    assert_same(checked, expected)  # the shortcut's answer is the checked pass's
    # a phrase by hyphen or by a split token, and a negation websearch reads after a bracket
    phrases = {"cell-protein", "3e14a6", "(-cell"}
    simple = negated is None and match == "any" and not phrases.intersection(words)
    if report["pass"] == "direct" and expected:  # the postings scored: the caller's, once per lexeme held
        assert report["candidates"] == await postings_seen(db, query, caller, match)
        if simple:  # every chunk holding a term matches: at least one posting each
            assert report["candidates"] >= full["candidates"]
    old, _ = await ranked(db, query, caller, limit, "pruned", match=match, direct_factor=1e9, postings=False)
    assert_same(old, expected)


@pytest.mark.database  # reads what the database property above recorded: deselected with it
def test_the_random_queries_took_the_shortcut_and_its_refusal() -> None:
    assert PLAIN_SEEN == {True, False}


def test_a_plain_disjunction_is_single_ascii_words_or_ed() -> None:
    plain = ["cell protein", "Cell, protein.", "(kinase) signal!", "the cell", "cell of the mouse", "gene2 (p53) 2009"]
    refused = ["cell-protein", '"cell protein"', "cell -protein", "prïon", "mouse's", "(-cell", "(~cell", "cell.."]
    refused += ["3e14a6"]
    assert all(lexical.plain_disjunction(q, match="any", config="english") for q in plain)
    assert not any(lexical.plain_disjunction(q, match="any", config="english") for q in refused)
    assert not lexical.plain_disjunction("cell protein", match="all", config="english")
    assert not lexical.plain_disjunction("cell protein", match="any", config="my_thesaurus")
    assert lexical.plain_disjunction("cell protein", match="any", config="simple", stopwords=None)
    # "or" is dropped as a stop word in any-matching; kept, it is websearch's operator, not a lexeme
    assert lexical.plain_disjunction("cell or protein", match="any", config="english")
    assert not lexical.plain_disjunction("cell or protein", match="any", config="simple", stopwords=None)


def test_a_piece_taken_as_plain_is_one_lexeme_to_the_server(database_url: str) -> None:
    """Every piece the shortcut takes is, to the server's own parser, the same single lexeme (or none)
    for the tsquery and for the terms, under both configurations; random pieces of letters, digits,
    an exponent's ``e`` and any punctuation on either edge, and the edges that fooled a looser rule."""
    rng = random.Random(11)
    cores = ["cell", "Cell", "p53", "gene2", "5", "2009", "e", "E", "IL6", "0", "3e14a6", "x" * 3000]
    edges = string.punctuation
    pieces = ["(-cell", "(~cell", "{cell..", "cell..", "%{69..", "<~fe4>", "(kinase", "signal.", "cell),"]
    for _ in range(1500):
        core = "".join(rng.choice(string.ascii_letters + string.digits + "eE") for _ in range(rng.randint(1, 8)))
        core = rng.choice([core, rng.choice(cores)])
        before = "".join(rng.choice(edges) for _ in range(rng.choice([0, 0, 1, 2])))
        after = "".join(rng.choice(edges) for _ in range(rng.choice([0, 0, 1, 2])))
        pieces.append(before + core + after)
    taken = 0
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SET client_min_messages = error")  # a too-long word's notice
        conn.execute("CREATE EXTENSION IF NOT EXISTS unaccent")
        for config in ("english", "simple"):
            for piece in pieces:
                if not lexical.plain_disjunction(piece, match="any", config=config, stopwords=None):
                    continue
                taken += 1
                query, lexemes = conn.execute(
                    "SELECT websearch_to_tsquery(CAST(%s AS regconfig), unaccent(%s))::text, "
                    "tsvector_to_array(to_tsvector(CAST(%s AS regconfig), unaccent(%s)))",
                    (config, piece, config, piece),
                ).fetchone()
                assert len(lexemes) <= 1, (config, piece, lexemes)
                expected = "'" + lexemes[0].replace("'", "''") + "'" if lexemes else ""
                assert query == expected, (config, piece, query, lexemes)
    assert taken > 400  # hundreds of pieces were taken, not only the easy ones


async def test_postings_follow_every_write_path(database_url: str) -> None:
    """After ingests, a bulk load, new versions, ACL moves and deletes, the postings are exactly one
    row per (lexeme, current chunk) with its frequency, length and group, and nothing else."""
    rng = random.Random(5)
    async with ContextEngine(make_config(database_url), embedder=WordEmbedder()) as engine:

        def body() -> str:
            return " ".join(rng.choices(WORDS, k=rng.randint(2, 25))) + "."

        ids = []
        for i in range(20):
            report = await engine.ingest(text=body(), name=f"d{i}.md", acl=["g1"] if i % 2 else [])
            ids.append(report.documents[0].document_id)
        await engine.bulk_ingest(
            [{"text": body(), "name": f"b{i}.md", "acl": ["g2"]} for i in range(15)], principals=TRUSTED
        )
        db = await engine.database()
        assert await _postings_drift(db) == (0, 0)
        for i in range(0, 20, 3):
            await engine.ingest(text=body(), name=f"d{i}.md", acl=["g1"] if i % 2 else [])
        for doc_id in ids[1:12:4]:
            await engine.update_document(doc_id, principals=TRUSTED, acl=["g3"])
        for doc_id in ids[2:14:5]:
            await engine.delete_document(doc_id, principals=TRUSTED)
        missing, extra = await _postings_drift(db)
        assert (missing, extra) == (0, 0)
        async with db.connect() as conn:
            assert await conn.scalar(text("SELECT count(*) FROM ce_bm25_postings")) > 0


async def _postings_drift(db: AsyncEngine) -> tuple[int, int]:
    """(postings missing or different, postings that should not be there) against the current chunks."""
    truth = (
        "SELECT u.lexeme, c.id AS chunk_id, g.group_id, coalesce(array_length(u.positions, 1), 1) AS tf, "
        "c.tsv_tokens AS tokens FROM ce_chunks c JOIN ce_bm25_groups g ON g.source_id = c.source_id "
        "AND g.acl = c.acl, unnest(c.tsv) u WHERE c.valid_to IS NULL"
    )
    kept = "SELECT lexeme, chunk_id, group_id, tf::integer, tokens FROM ce_bm25_postings"
    async with db.connect() as conn:
        missing = await conn.scalar(text(f"SELECT count(*) FROM ({truth} EXCEPT {kept}) x"))
        extra = await conn.scalar(text(f"SELECT count(*) FROM ({kept} EXCEPT {truth}) x"))
    return int(missing), int(extra)


async def test_few_postings_are_scored_directly_with_the_same_answer(corpus_engine: ContextEngine) -> None:
    """When the query's postings are within ``DIRECT_FACTOR`` times the bounded pass's depth, every
    candidate is scored in one pass, without bounds; above it the bounded pass runs. Same answer."""
    db = await corpus_engine.database()
    query = "cell protein gene"
    expected, full = await ranked(db, query, None, 40, "full")
    assert full["candidates"] > 2 * bm25.DIRECT_FACTOR  # more than a depth of 1 over 2 rows allows
    found, report = await ranked(db, query, None, 40, "bounded", direct_factor=bm25.DIRECT_FACTOR)
    assert_same(found, expected)
    postings = await postings_seen(db, query, None)  # chunks holding two or three of the words count so often
    assert postings > full["candidates"]
    assert report == {"candidates": postings, "scored": postings, "pass": "direct"}
    top, _ = await ranked(db, query, None, 2, "full")
    shallow, report = await ranked(db, query, None, 2, "bounded", bound_depth=1, direct_factor=bm25.DIRECT_FACTOR)
    assert_same(shallow, top)
    assert report["pass"] in {"bounded", "full"}


async def test_the_pass_reported_does_not_tell_how_the_candidates_were_read(corpus_engine: ContextEngine) -> None:
    """A caller who sees few of all chunks has their own rows read first; who sees many, the
    postings. That choice counts chunks the caller cannot see, so the pass and its counts must not
    follow it: the same query, caller and defaults report the same whichever way was taken."""
    db = await corpus_engine.database()
    for principals in (("g1",), ("g2", "g3"), None):
        for query in ("cell protein gene", "gene expression tumor", "cell mouse brain insulin"):
            limit = 1  # the bounded pass scores 16 rows, the direct one is taken to twice that
            seen = await postings_seen(db, query, principals)
            assert seen > 2 * bm25.BOUND_DEPTH * limit
            reports = []
            for share in (0.0, 1.0):  # never / always the caller's own rows first
                found, report = await ranked(
                    db, query, principals, limit, "pruned", visible_first_share=share, direct_factor=None
                )
                expected, _ = await ranked(db, query, principals, limit, "full")
                assert_same(found, expected)
                reports.append(report)
            assert reports[0] == reports[1]
            assert reports[0] == {"candidates": seen, "scored": seen, "pass": "direct"}


async def test_gate_reads_fewer_candidates_and_keeps_the_answer(corpus_engine: ContextEngine) -> None:
    db = await corpus_engine.database()
    query = "cell protein gene telomere prion"
    expected, full = await ranked(db, query, None, 3, "full")
    found, report = await ranked(db, query, None, 3, "pruned")
    assert_same(found, expected)
    assert report["pass"] == "pruned" and report["scored"] == report["candidates"]
    assert report["candidates"] < full["candidates"]  # the gate kept chunks out


async def test_kept_bounds_gate_fewer_chunks_than_the_loose_bound(corpus_engine: ContextEngine) -> None:
    """The bounds the write path keeps are tighter than ``idf * (k1 + 1)``: the same floor lets fewer
    chunks through the gate, and the answer holds."""
    db = await corpus_engine.database()
    query = "cell protein gene telomere prion"
    expected, _ = await ranked(db, query, None, 3, "full")
    tight, tight_report = await ranked(db, query, None, 3, "pruned")
    loose, loose_report = await ranked(db, query, None, 3, "pruned", kept_bounds=False)
    assert_same(tight, expected)
    assert_same(loose, expected)
    assert tight_report["pass"] == loose_report["pass"] == "pruned"
    assert tight_report["candidates"] < loose_report["candidates"]


async def test_no_floor_falls_back_to_the_bounded_pass_then_to_the_full_one(corpus_engine: ContextEngine) -> None:
    """Without a floor (the rarest term the caller can see is the only one, so a seed would read
    everything) nothing is gated: the bounded pass runs, and when its proof fails (one row scored
    cannot prove a top 10) every candidate is scored. Each step says so, and the answer holds."""
    db = await corpus_engine.database()
    query = "cell absentword"
    expected, _ = await ranked(db, query, None, 10, "full")
    found, report = await ranked(db, query, None, 10, "pruned")
    assert_same(found, expected)
    assert report["pass"] == "bounded"
    found, report = await ranked(db, query, None, 10, "pruned", bound_depth=0)
    assert_same(found, expected)
    assert report["pass"] == "full" and report["scored"] == report["candidates"] > 10


def test_gate_spells_which_term_sets_reach_the_floor() -> None:
    bounds = [("rare", 5.0), ("mid", 3.0), ("common", 1.0)]
    assert bm25_gate.reaching(bounds, 4.0) == "('rare' | 'mid' & 'common')"
    assert bm25_gate.reaching(bounds, 5.0) == "'rare'"  # mid + common = 4 cannot reach 5
    assert bm25_gate.reaching(bounds, 6.0) == "'rare' & ('mid' | 'common')"
    assert bm25_gate.reaching(bounds, 0.0) is None  # no floor: no gate
    assert bm25_gate.reaching(bounds, 100.0) is None  # unreachable: prune nothing rather than everything
    assert bm25_gate.reaching([("it's", 2.0), ("a\\b", 2.0)], 3.0) == "'a\\\\b' & 'it''s'"


async def test_capped_gate_only_widens(corpus_engine: ContextEngine) -> None:
    """Past the leaf cap a branch becomes "any remaining term": every set of terms that reaches the
    floor still matches the gate, checked by PostgreSQL for all 16,384 subsets of 14 terms."""
    rng = random.Random(3)
    lexemes = [f"t{i}" for i in range(14)]
    bounds = [(lex, rng.uniform(0.5, 6.0)) for lex in lexemes]
    floor = sum(b for _, b in bounds) / 3
    gate = bm25_gate.reaching(bounds, floor)
    assert gate is not None and gate.count("'") // 2 > bm25_gate.MAX_LEAVES
    reaching, short = [], []
    for mask in range(1, 1 << len(lexemes)):
        held = [lex for i, (lex, _) in enumerate(bounds) if mask >> i & 1]
        total = sum(b for i, (_, b) in enumerate(bounds) if mask >> i & 1)
        (reaching if total >= floor else short).append(" ".join(held))
    db = await corpus_engine.database()
    async with db.connect() as conn:
        missed = await conn.scalar(
            text(
                "SELECT count(*) FROM unnest(CAST(:held AS text[])) h "
                "WHERE NOT (CAST(h AS tsvector) @@ CAST(:gate AS tsquery))"
            ),
            {"held": reaching, "gate": gate},
        )
        widened = await conn.scalar(
            text(
                "SELECT count(*) FROM unnest(CAST(:held AS text[])) h "
                "WHERE CAST(h AS tsvector) @@ CAST(:gate AS tsquery)"
            ),
            {"held": short, "gate": gate},
        )
    assert missed == 0
    assert 0 < widened < len(short)  # the cap lets some short sets through, not all of them

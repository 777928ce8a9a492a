"""Okapi BM25 over the chunks' ``tsvector``, computed in SQL, with statistics the caller may see.

Why BM25 and not ``ts_rank``: ``ts_rank``/``ts_rank_cd`` weigh every query word alike, so a word
found in half the corpus counts as much as a rare one, and their length normalisation is a fixed
division. BM25 weighs each term by its inverse document frequency and saturates repeated terms
against the chunk's length relative to the average; on SciFact that is the difference between
ranking below and ranking level with a dedicated BM25 library (benchmarks/README.md).

Statistics are kept per (source, ACL) group in ``ce_bm25_groups`` (chunk count and token total,
under a small integer ``group_id``) and ``ce_bm25_terms`` (document frequency of each lexeme per
``group_id``), updated inside the same transaction
that opens or closes chunks. At query time the groups are summed under the same visibility
predicate as the chunks, so the IDF and average length a caller's ranking uses are computed from
exactly the chunks that caller may see in the sources they searched: a document they may not see
changes neither their results nor their scores. (A ``document_ids`` pin narrows the candidates, not
the statistics, which stay those of the visible sources.)

A chunk's length (``tsv_tokens``) is its count of indexed tokens, stop words excluded, stored by
migration 0002 as a generated column so a query never recounts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from context_engine.retrieval import bm25_gate
from context_engine.retrieval.bm25_gate import lexeme_query
from context_engine.storage import driver_reads, layout
from context_engine.storage.predicates import live, readable_now, visibility

#: chunks fully scored per result row asked for, ranked first by their upper bound (see :func:`rank`).
#: On SciFact (``limit`` 50, a claim-length query matching ~3,250 of 9,198 chunks at the median)
#: 16 x ``limit`` proved the top 50 exact for 292 of the 300 test queries; the rest take the full pass.
BOUND_DEPTH = 16

#: the bounded and pruned strategies score every candidate directly when the query terms' postings
#: (summed document frequencies the caller may see, at least the candidate count) are at most this
#: many times the rows the bounded pass would score: bounding a candidate costs about half of scoring
#: it, and the bounded pass reads the rows it scores twice, so below about 2.6 times the depth the
#: direct pass does less work (SciFact, limit 200: 20 ms direct against 24 ms bounded at the median).
DIRECT_FACTOR = 2.0

#: the direct pass over the postings table (migration 0020) is taken up to this many postings (summed
#: document frequencies the caller may see), whatever the depth: it costs about a microsecond a
#: posting where the bounded and gated passes read each candidate's ``tsvector``. Chosen at a million
#: chunks on 60 queries the benchmark does not report (benchmarks/README.md, "Full-text (BM25) leg at a
#: million chunks"): between 40,000 and 60,000 postings the direct pass's median equalled the pruned
#: pass's and its total was 42% of it (the floor is sometimes poor); above 60,000 the pruned pass was faster.
POSTINGS_DIRECT = 60_000

#: how :func:`rank` may find the top rows; the first is the default.
STRATEGIES = ("pruned", "bounded", "full")

#: the ``pruned`` strategy is tried when the query terms' postings (summed document frequencies
#: the caller may see) reach this many. 0: whenever the direct pass does not apply, the floor pays for
#: its extra statement. Against the earlier 20,000, same answers: SciFact's full-text leg at limit 50
#: 13.8 -> 9.8 ms at the median (100 claims), a million chunks' 30% caller 343 -> 220 ms, where
#: short queries had taken the bounded pass and, its proof failing, then scored every candidate.
PRUNE_FROM = 0

#: the floor of the ``pruned`` strategy reads the rarest terms' postings up to this many, and at
#: most this share of all the query's postings ...
SEED_POSTINGS = 2_000
SEED_SHARE = 0.25

#: ... and scores exactly the best-bounded ``SEED_DEPTH * limit`` of them.
SEED_DEPTH = 2


async def rank(
    conn: AsyncConnection,
    *,
    tsquery: str,
    terms: str,
    chunk_predicate: str,
    stats_scope: dict[str, Any],
    params: dict[str, Any],
    k1: float,
    b: float,
    limit: int,
    bound_depth: int = BOUND_DEPTH,
    report: dict[str, Any] | None = None,
    as_of: int | None = None,
    strategy: str = "pruned",
    prune_from: int | None = None,
    visible_first_share: float | None = None,
    direct_factor: float | None = None,
    kept_bounds: bool = True,
    postings: bool = True,
    plain: bool = False,
) -> list[tuple[int, float]]:
    """The ``limit`` best chunks by BM25, ``(id, score)`` best first: the same rows and order as
    scoring every candidate, with most of the per-chunk work skipped.

    ``tsquery`` selects the candidates (matching mode, phrases, -terms); ``terms`` is the SQL
    ``text[]`` of positive lexemes that are scored. The lexemes' IDF and the average chunk length
    come from statistics the caller may see. A term's contribution to a chunk's score is never above
    its bound (:func:`term_bound`: the term at its largest frequency in the shortest chunk holding
    it, over the groups the caller may see, kept by the write path), and the strategies build on that:

    * ``full``: every candidate is scored.
    * ``bounded``: every candidate gets an upper bound, the sum of the bounds of the query terms it
      contains (one ``@@`` test per term, no copy of its ``tsvector``); the ``bound_depth * limit``
      best-bounded are scored exactly. If the best bound left out is below the ``limit``-th exact
      score, nothing left out can enter the top ``limit``; otherwise every candidate is scored.
    * ``direct`` (taken by ``bounded`` and ``pruned`` when the query's postings are at most
      ``direct_factor``, by default :data:`DIRECT_FACTOR`, times the rows the bounded pass would
      score, or, with ``postings``, at most :data:`POSTINGS_DIRECT` unless ``direct_factor`` is
      given, whichever way the candidates are read): every candidate is scored, as bounding them
      first would cost more than it saves.
      With ``postings`` (the default) and the caller's candidates read from the postings, the
      scores come from the postings table (migration 0020, see :func:`_postings_sql`), and only the
      best-scored chunks are read; otherwise from each candidate's ``tsvector``.
    * ``pruned`` (the default; the ``bounded`` pass when the query's postings total less than
      ``prune_from``, by default :data:`PRUNE_FROM`): first a floor, the ``limit``-th exact score
      among chunks holding the rarest terms (any ``limit`` candidates' scores give a floor under the true ``limit``-th
      score); then only candidates whose bound reaches that floor are read, selected by the GIN
      index itself through a tsquery that spells out which sets of terms can reach it (see
      :mod:`context_engine.retrieval.bm25_gate`), and scored. A chunk kept out has a bound, hence
      a score, below the floor, so it cannot be in the top ``limit``: the answer is exact. A common
      term alone reaches no floor, so its long postings are only probed where a rarer term matched,
      never walked chunk by chunk.

    Whichever the strategy, a caller who may see at most ``visible_first_share`` (by default
    :data:`VISIBLE_FIRST_SHARE`) of the current chunks has the candidates read from their own rows
    first (see :class:`Candidates`).

    ``report``, when given, receives ``candidates`` (rows bounded, at most one past the depth, or
    rows gated), ``scored`` (rows scored exactly) and ``pass``: ``pruned`` (gated by a floor, every
    gated chunk scored), ``direct`` (few candidates: every one scored without bounds), ``bounded`` /
    ``full`` (no floor: the bound proof held / failed, so every candidate was scored).
    ``as_of`` (a past revision) takes the statistics from the chunks visible then: see :func:`_weights_as_of`.
    ``plain`` says the tsquery is an OR of the scored lexemes and nothing else, and the predicate
    is the one the postings' groups already apply (:func:`lexical.plain_disjunction` and
    :meth:`ReadScope.groups_decide`): the direct pass over the postings then skips testing its best
    rows against their chunks, since every chunk it scored matches.
    ``kept_bounds=False`` bounds each term by ``idf * (k1 + 1)`` alone (the bound before migration
    0019; for measuring what the kept bounds save, the answer is the same).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown BM25 strategy {strategy!r}; use one of {STRATEGIES}")
    params["bm25_k1"] = float(k1)
    params["bm25_b"] = float(b)
    share = VISIBLE_FIRST_SHARE if visible_first_share is None else visible_first_share
    factor = DIRECT_FACTOR if direct_factor is None else direct_factor
    direct_cap = factor * max(1, bound_depth * limit)
    if report is not None:
        report.update({"candidates": 0, "scored": 0, "pass": "bounded"})
    by_postings = postings and strategy != "full" and as_of is None
    # one cap whichever way the candidates are read: which pass ran must not tell how many chunks
    # there are in all (a caller who sees few of them reads their own rows first)
    cap = max(direct_cap, POSTINGS_DIRECT) if by_postings and direct_factor is None else direct_cap
    if as_of is None:
        # one round trip for the common case: the weights, and the direct pass when they call for it
        params["bm25_share"] = float(share)
        params["bm25_cap"] = float("inf") if strategy == "full" else float(cap)
        statement = _weights_then_direct_sql(
            terms,
            stats_scope,
            params,
            tsquery,
            chunk_predicate,
            postings=by_postings,
            distributed=by_postings and await layout.distributed(conn),
            checked=not plain,
        )
        _, found = await driver_reads.read(conn, statement, params)  # the statement of nearly every search
        weights = [r[1:9] for r in found if r[0] == 0]
        if weights and found[0][9]:  # the direct pass ran: its rows are the answer
            scored = [r[10:] for r in found if r[0] == 1]
            if report is not None:
                if strategy == "full":
                    candidates = int(scored[0][2]) if scored else 0
                    report.update({"candidates": candidates, "scored": candidates, "pass": "full"})
                else:
                    _report_direct(report, weights, bool(scored))
            return [(int(r[0]), float(r[1])) for r in scored]
    else:
        weights = await _weights_as_of(conn, terms, stats_scope, params, as_of)
    if not weights:
        return []
    params["bm25_lex"] = [str(w[0]) for w in weights]
    params["bm25_idf"] = [float(w[1]) for w in weights]
    params["bm25_avgdl"] = float(weights[0][2])
    chunks = Candidates(chunk_predicate, float(weights[0][4]) <= share * float(weights[0][5]))
    total_postings = sum(float(w[3]) for w in weights)
    direct = strategy != "full" and total_postings <= cap
    if strategy == "full" or direct:
        rows = (await conn.execute(text(_full_sql(tsquery, chunks)), params)).all()
        if report is not None and direct:
            _report_direct(report, weights, bool(rows))
        elif report is not None:
            candidates = int(rows[0][2]) if rows else 0
            report.update({"candidates": candidates, "scored": candidates, "pass": "full"})
        return [(int(r[0]), float(r[1])) for r in rows]
    kept = weights if kept_bounds else [tuple(w[:6]) for w in weights]  # without: the loose bound alone
    term_bounds = [term_bound(w, float(k1), float(b), params["bm25_avgdl"]) for w in kept]
    bounds = []
    for i, (lexeme, bound) in enumerate(zip(params["bm25_lex"], term_bounds, strict=True)):
        params[f"bm25_t{i}"] = lexeme_query(lexeme)
        params[f"bm25_u{i}"] = bound
        bounds.append(f"CASE WHEN c.tsv @@ CAST(:bm25_t{i} AS tsquery) THEN CAST(:bm25_u{i} AS float8) ELSE 0 END")
    bound_sql = " + ".join(bounds)
    gate = None
    prune_at = PRUNE_FROM if prune_from is None else prune_from
    if strategy == "pruned" and len(weights) > 1 and total_postings >= prune_at:
        floor = await _floor(conn, tsquery, chunks, bound_sql, params, weights, term_bounds, limit)
        if floor > 0:
            gate = bm25_gate.reaching(list(zip(params["bm25_lex"], term_bounds, strict=True)), floor)
    if gate is not None:
        # every gated chunk's bound reaches the floor, so the bound order would prove little: score them all
        params["bm25_gate"] = gate
        gated = f"({tsquery}) && CAST(:bm25_gate AS tsquery)"
        gated_rows = (await conn.execute(text(_full_sql(gated, chunks)), params)).all()
        if report is not None:
            candidates = int(gated_rows[0][2]) if gated_rows else 0
            report.update({"candidates": candidates, "scored": candidates, "pass": "pruned"})
        return [(int(r[0]), float(r[1])) for r in gated_rows]
    scored, candidates, exact = await _bounded(conn, tsquery, chunks, bound_sql, params, limit, bound_depth)
    if report is not None:
        depth = max(1, bound_depth * limit)
        report.update({"candidates": candidates, "scored": min(candidates, depth) if exact else candidates})
        report["pass"] = "bounded" if exact else "full"
    return scored


def term_bound(weight: Sequence[Any], k1: float, b: float, avgdl: float) -> float:
    """The most a query term adds to any chunk's score the caller may see: its BM25 term score at
    the lexeme's largest term frequency in the shortest chunk holding it, over the groups they may
    see (the score grows with the frequency and falls with the length); ``idf * (k1 + 1)``, the limit
    of an endless term in an empty chunk, when those bounds are unknown. Widened by
    :data:`bm25_gate.SLACK` so rounding can only loosen it."""
    idf = float(weight[1])
    max_tf, min_len = (weight[6], weight[7]) if len(weight) > 7 else (None, None)
    if max_tf is None or min_len is None:
        return idf * (k1 + 1)
    tf = float(max_tf)
    tight = idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * float(min_len) / avgdl))
    return min(idf * (k1 + 1), tight * (1 + bm25_gate.SLACK))


async def _bounded(
    conn: AsyncConnection,
    tsquery: str,
    chunks: Candidates,
    bound_sql: str,
    params: dict[str, Any],
    limit: int,
    bound_depth: int,
) -> tuple[list[tuple[int, float]], int, bool]:
    """The ``bounded`` pass over the candidates of ``tsquery``: rows, candidates bounded, and
    whether the bound proof held (when it did not, every candidate was scored)."""
    depth = max(1, bound_depth * limit)
    params["bm25_depth"], params["bm25_depth1"] = depth, depth + 1
    rows = (await conn.execute(text(_bounded_sql(tsquery, chunks, bound_sql)), params)).all()
    if not rows:
        return [], 0, True
    candidates, best_left_out = int(rows[0][2]), float(rows[0][3])
    exact = candidates <= depth or (len(rows) >= limit and best_left_out * (1 + 1e-9) < float(rows[limit - 1][1]))
    if not exact:
        rows = (await conn.execute(text(_full_sql(tsquery, chunks)), params)).all()
        candidates = int(rows[0][2]) if rows else candidates  # all of them, not the bounded pass's cap
    return [(int(r[0]), float(r[1])) for r in rows], candidates, exact


async def _floor(
    conn: AsyncConnection,
    tsquery: str,
    chunks: Candidates,
    bound_sql: str,
    params: dict[str, Any],
    weights: Sequence[Any],
    term_bounds: list[float],
    limit: int,
) -> float:
    """A score the true ``limit``-th best reaches: the ``limit``-th exact score among candidates
    holding one of the rarest terms (postings up to ``SEED_POSTINGS`` or ``SEED_SHARE`` of the
    query's, whichever is less, and at least the rarest term's own),
    the best-bounded ``SEED_DEPTH * limit`` of them scored. 0 when fewer than ``limit`` are found.

    Any ``limit`` candidates' scores are a floor, so no proof is needed here: a better floor only
    lets fewer candidates through the gate afterwards.
    """
    rarest = sorted(range(len(weights)), key=lambda i: (-term_bounds[i], str(weights[i][0])))
    budget = min(SEED_POSTINGS, SEED_SHARE * sum(float(w[3]) for w in weights))
    seed: list[int] = []
    total = 0.0
    for i in rarest:
        if float(weights[i][3]) <= 0:
            continue  # in no chunk the caller may see: it finds no seed
        if seed and total + float(weights[i][3]) > budget:
            break
        seed.append(i)
        total += float(weights[i][3])
    if not seed or len(seed) == sum(1 for w in weights if float(w[3]) > 0):
        return 0.0  # the seed would be every term: no cheaper than the bounded pass itself
    depth = max(1, SEED_DEPTH * limit)
    seed_params = {
        **params,
        "bm25_seed": " | ".join(lexeme_query(str(weights[i][0])) for i in seed),
        "bm25_depth": depth,
        "bm25_depth1": depth + 1,
    }
    seeded = f"({tsquery}) && CAST(:bm25_seed AS tsquery)"
    rows = (await conn.execute(text(_bounded_sql(seeded, chunks, bound_sql)), seed_params)).all()
    if len(rows) < limit:
        return 0.0
    return float(rows[limit - 1][1])


def _report_direct(report: dict[str, Any], weights: list[Any], answered: bool) -> None:
    """A direct pass reports the postings it scored (the weights' document frequencies, over what
    the caller may see), whichever route ran it: over the postings nothing counts the chunks (at a
    million chunks that count was 40% of the pass), and the route taken depends on how many chunks
    there are in all, which a caller's report must not tell."""
    candidates = int(sum(float(w[3]) for w in weights)) if answered else 0
    report.update({"candidates": candidates, "scored": candidates, "pass": "direct"})


def _weights_then_direct_sql(
    terms: str,
    stats_scope: dict[str, Any],
    params: dict[str, Any],
    tsquery: str,
    chunk_predicate: str,
    *,
    postings: bool = True,
    distributed: bool = False,
    checked: bool = True,
) -> str:
    """The weights (rows ``(0, lexeme, idf, avgdl, df, n, n_all, NULL, ...)``) and, in the same
    statement, the direct pass (rows ``(1, NULL x 6, id, score, candidates)``, the ``limit`` best)
    when the postings are at most ``:bm25_cap`` and the caller's candidates come from the postings
    (not from their own rows first). Otherwise the scoring half is skipped by the server (its guard
    is a one-time filter) and the caller goes on from the weights. The scores are those of
    :func:`_full_sql`: the same expression over the same idf and average length.
    """
    weights = _weights_sql(terms, stats_scope, params).removeprefix("WITH ")
    cut = weights.rindex(" ORDER BY qt.lexeme")
    ctes, body = weights[:cut].split(" SELECT qt.lexeme", 1)
    head = (
        f"WITH {ctes}, w AS MATERIALIZED (SELECT qt.lexeme{body}), "
        "k AS MATERIALIZED (SELECT array_agg(w.lexeme) AS lex, max(w.avgdl) AS avgdl FROM w), "
        "dec AS MATERIALIZED (SELECT coalesce(sum(w.df), 0) <= :bm25_cap AND NOT coalesce(bool_or(w.n <= "
        ":bm25_share * w.n_all), FALSE) AND count(*) > 0 AS go FROM w), "
        f"q AS MATERIALIZED (SELECT {tsquery} AS q), "
    )
    weight_rows = (
        "(SELECT 0, w.lexeme, w.idf, w.avgdl, w.df, w.n, w.n_all, w.max_tf, w.min_len, (SELECT go FROM dec), "
        "NULL::bigint, NULL::float8, NULL::bigint FROM w ORDER BY w.lexeme) UNION ALL "
    )
    if postings:
        restricted = stats_scope.get("principals") is not None or stats_scope.get("source_ids") is not None
        walked = (
            "(SELECT 1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, o.id, o.r, NULL::bigint "
            "FROM o ORDER BY o.r DESC, o.id)"
        )
        direct = _postings_sql(chunk_predicate, visible_groups=restricted, distributed=distributed, checked=checked)
        return f"{head}{direct} {weight_rows}{walked}"
    scored = _SCORE.format(
        source="ce_chunks c CROSS JOIN q CROSS JOIN k",
        where=f"WHERE c.tsv @@ q.q AND {chunk_predicate} AND (SELECT go FROM dec)",
        lex="k.lex",
        idf="w",
        avgdl="k.avgdl",
    )
    return (
        f"{head}s AS ({scored}) {weight_rows}"
        "(SELECT 1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, s.id, s.r, count(*) OVER () "
        "FROM s ORDER BY s.r DESC, s.id LIMIT :limit)"
    )


def _postings_sql(
    chunk_predicate: str, *, visible_groups: bool, distributed: bool = False, checked: bool = True
) -> str:
    """The direct pass over the postings (migration 0020), as CTEs ``s`` (every chunk holding a query
    term in a group the caller may see, with its score) and ``o`` (the ``limit`` best of them that
    match the tsquery and the caller's predicate), after the weights' CTEs ``w``, ``vis``, ``dec``, ``q``.

    A chunk's term frequencies and length come from the postings' key (an index-only range per
    term), not from its ``tsvector``. The scored chunks are then walked best first and each is tested
    against its own row (the tsquery, which may hold phrases or negations, and the whole predicate)
    until ``limit`` pass: the ``OFFSET 0`` keeps the test above the sort, so rows below the answer
    are never read. The score is :data:`_SCORE`'s expression over the same idf and average length.
    Without ``checked`` (a plain disjunction under a predicate the groups decide, see :func:`rank`)
    no row is read but those the caller loads later: every posting is of a current chunk the groups
    let the caller see, holding a term of the OR.
    """
    groups = "JOIN vis ON vis.group_id = p.group_id " if visible_groups else ""
    if distributed:
        return _postings_sql_distributed(chunk_predicate, groups)
    if checked:
        best = (
            "o AS (SELECT b.id, b.r FROM (SELECT s.id, s.r FROM s ORDER BY s.r DESC, s.id OFFSET 0) b "
            "WHERE (SELECT TRUE FROM ce_chunks c WHERE c.id = b.id AND c.tsv @@ (SELECT q.q FROM q) "
            f"AND {chunk_predicate}) "
            "ORDER BY b.r DESC, b.id LIMIT :limit)"
        )
    else:
        best = "o AS (SELECT s.id, s.r FROM s ORDER BY s.r DESC, s.id LIMIT :limit)"
    return (
        "s AS (SELECT p.chunk_id AS id, sum(w.idf * p.tf * (:bm25_k1 + 1) / (p.tf + :bm25_k1 * "
        "(1 - :bm25_b + :bm25_b * p.tokens / w.avgdl))) AS r "
        f"FROM w JOIN ce_bm25_postings p ON p.lexeme = w.lexeme {groups}"
        "WHERE (SELECT go FROM dec) GROUP BY p.chunk_id), " + best
    )


def _postings_sql_distributed(chunk_predicate: str, groups: str) -> str:
    """:func:`_postings_sql` in the form a Citus coordinator plans (``distributed``): the postings sit
    beside their chunks (co-located by ``document_id``, ``migrations/citus/0002_postings_oauth.sql``), so
    each chunk is scored on its own shard, and the scored chunks are joined back to their rows
    instead of tested by a correlated subquery, which Citus does not plan over a CTE. Every scored
    chunk's row is read (no early stop); the answer is the same: the ``limit`` best that pass."""
    return (
        "s AS MATERIALIZED (SELECT p.document_id, p.chunk_id AS id, sum(w.idf * p.tf * (:bm25_k1 + 1) / "
        "(p.tf + :bm25_k1 * (1 - :bm25_b + :bm25_b * p.tokens / w.avgdl))) AS r "
        f"FROM w JOIN ce_bm25_postings p ON p.lexeme = w.lexeme {groups}"
        "WHERE (SELECT go FROM dec) GROUP BY p.document_id, p.chunk_id), "
        "o AS (SELECT b.id, b.r FROM s b JOIN ce_chunks c ON c.document_id = b.document_id AND c.id = b.id "
        f"WHERE c.tsv @@ (SELECT q.q FROM q) AND {chunk_predicate} ORDER BY b.r DESC, b.id LIMIT :limit)"
    )


def _weights_sql(terms: str, stats_scope: dict[str, Any], params: dict[str, Any]) -> str:
    """``(lexeme, idf, avgdl, df, n, n_all, max_tf, min_len)`` per distinct query lexeme, over the
    statistics the caller may see (``n``: chunks they may see in the searched sources; ``n_all``: all
    current chunks; ``max_tf``/``min_len``: the lexeme's bounds over the groups they may see, NULL
    when some such group's are unknown).

    The caller's predicate is tested once per (source, ACL) group, on ``ce_bm25_groups``, and the
    lexemes' rows are matched to the visible groups by key: with many groups and a caller holding
    hundreds of principals, testing the ACL overlap on every lexeme's row of every group cost more
    than the rest of the query. The lexemes' rows carry the group's integer id (migration 0015),
    so the match is on one integer. (A group row exists while any of its chunks is current, so
    every lexeme row with a count has one.)
    """
    groups = visibility("g", params, **stats_scope)
    everyone = "tot.n" if groups == "TRUE" else "(SELECT coalesce(sum(a.chunks), 0)::float8 FROM ce_bm25_groups a)"
    # the per-lexeme bounds over the visible groups: known only when every such group's are
    bounds = (
        "coalesce(sum(s.df), 0)::float8 AS df, max(s.max_tf) AS max_tf, min(s.min_len) AS min_len, "
        "coalesce(bool_and(s.max_tf IS NOT NULL AND s.min_len IS NOT NULL), FALSE) AS known"
    )
    if groups == "TRUE":  # a trusted caller over every source: nothing to match
        counted = f"SELECT {bounds} FROM ce_bm25_terms s WHERE s.lexeme = qt.lexeme"
    else:
        counted = (
            f"SELECT {bounds} FROM ce_bm25_terms s JOIN vis ON vis.group_id = s.group_id WHERE s.lexeme = qt.lexeme"
        )
    return (
        f"WITH qt AS (SELECT DISTINCT x AS lexeme FROM unnest({terms}) x), "
        f"vis AS MATERIALIZED (SELECT g.group_id, g.chunks, g.tokens FROM ce_bm25_groups g WHERE {groups}), "
        "tot AS (SELECT coalesce(sum(vis.chunks), 0)::float8 AS n, "
        "greatest(coalesce(sum(vis.tokens), 0)::float8 / greatest(coalesce(sum(vis.chunks), 0), 1), 1) AS avgdl "
        "FROM vis) "
        "SELECT qt.lexeme, ln(1 + (tot.n - d.df + 0.5) / (d.df + 0.5)) AS idf, tot.avgdl, d.df, tot.n, "
        f"{everyone} AS n_all, CASE WHEN d.known THEN d.max_tf END AS max_tf, "
        "CASE WHEN d.known THEN d.min_len END AS min_len "
        f"FROM qt CROSS JOIN tot CROSS JOIN LATERAL ({counted}) d ORDER BY qt.lexeme"
    )


async def _weights_as_of(
    conn: AsyncConnection, terms: str, stats_scope: dict[str, Any], params: dict[str, Any], as_of: int
) -> list[tuple[str, float, float, float, float, float]]:
    """``(lexeme, idf, avgdl, df, n, n)`` as of revision ``as_of``, counted exactly from the chunks visible then.

    The kept statistics describe the current revision only, so a past read counts: one scan of the
    chunks the caller could see in the searched sources at ``as_of`` (the same slice the kept
    groups sum for a current read), one ``@@`` test per query lexeme. It costs a scan of the
    caller's history slice, and it gives the IDF and average length a store holding only that
    revision would have given, so a past ranking is the ranking of then.
    """
    lexemes = [str(r[0]) for r in await conn.execute(text(f"SELECT DISTINCT x FROM unnest({terms}) x"), params)]
    if not lexemes:
        return []
    stats: dict[str, Any] = {}
    counts, values = [], []
    for i, lexeme in enumerate(lexemes):
        stats[f"bm25_l{i}"], stats[f"bm25_q{i}"] = lexeme, lexeme_query(lexeme)
        counts.append(f"count(*) FILTER (WHERE c.tsv @@ CAST(:bm25_q{i} AS tsquery))::float8 AS df{i}")
        values.append(f"(CAST(:bm25_l{i} AS text), v.df{i})")
    visible = f"{live('c', stats, as_of)} AND {visibility('c', stats, **stats_scope)}"
    if stats_scope.get("principals") is not None:  # a revoked document counts for nobody's past statistics
        visible += " AND " + readable_now("c", stats, tuple(stats_scope["principals"]))
    statement = (
        "WITH v AS (SELECT count(*)::float8 AS n, coalesce(sum(c.tsv_tokens), 0)::float8 AS tokens, "
        f"{', '.join(counts)} FROM ce_chunks c WHERE {visible}) "
        "SELECT t.lexeme, ln(1 + (v.n - t.df + 0.5) / (t.df + 0.5)), greatest(v.tokens / greatest(v.n, 1), 1), t.df, "
        "v.n, v.n "
        f"FROM v CROSS JOIN LATERAL (VALUES {', '.join(values)}) AS t(lexeme, df) ORDER BY t.lexeme"
    )
    rows = await conn.execute(text(statement), stats)
    return [(str(r[0]), float(r[1]), float(r[2]), float(r[3]), float(r[4]), float(r[5])) for r in rows]


# Term frequencies come from the chunk's own ``tsvector``: the query terms are marked with weight A
# and filtered out, so only those few entries are unnested per chunk, not the whole vector (a lexeme
# that already carried weight A is dropped again by the join with the query terms).
_SCORE = (
    "SELECT c.id, sum(w.idf * u.tf * (:bm25_k1 + 1) / (u.tf + :bm25_k1 * "
    "(1 - :bm25_b + :bm25_b * c.tsv_tokens / {avgdl}))) AS r "
    "FROM {source} "
    "CROSS JOIN LATERAL (SELECT x.lexeme, coalesce(array_length(x.positions, 1), 1) AS tf "
    "FROM unnest(ts_filter(setweight(c.tsv, 'A', {lex}), '{{a}}')) x) u "
    "JOIN {idf} ON w.lexeme = u.lexeme "
    "{where} GROUP BY c.id"
)
#: the query's lexemes, their idf and the average length as bound parameters (a pass after the weights)
_BOUND = {
    "lex": "CAST(:bm25_lex AS text[])",
    "idf": "unnest(CAST(:bm25_lex AS text[]), CAST(:bm25_idf AS float8[])) AS w(lexeme, idf)",
    "avgdl": ":bm25_avgdl",
}


def _bounded_sql(tsquery: str, chunks: Candidates, bound: str) -> str:
    """Bound every candidate, score the best-bounded ones; each row also carries the candidate
    count and the lowest bound kept (the best bound of anything left out, when there is more).

    The tsquery is MATERIALIZED so it is built once, not re-parsed (``unaccent`` is only stable)
    for every candidate row.
    """
    scored = _SCORE.format(source="top JOIN ce_chunks c ON c.id = top.id", where="", **_BOUND)
    return (
        f"WITH q AS MATERIALIZED (SELECT {tsquery} AS q), "
        f"b AS MATERIALIZED (SELECT c.id, {bound} AS ub FROM {chunks.source()} CROSS JOIN q "
        f"WHERE c.tsv @@ q.q AND {chunks.where()} ORDER BY ub DESC LIMIT :bm25_depth1), "
        "top AS (SELECT id FROM b ORDER BY ub DESC LIMIT :bm25_depth), "
        f"s AS ({scored}) "
        "SELECT s.id, s.r, (SELECT count(*) FROM b), (SELECT min(ub) FROM b) FROM s "
        "ORDER BY s.r DESC, s.id LIMIT :limit"
    )


def _full_sql(tsquery: str, chunks: Candidates) -> str:
    """Every candidate scored: the answer when the bounds could not prove the short pass exact.
    Each row also carries the candidate count."""
    scored = _SCORE.format(
        source=f"{chunks.source()} CROSS JOIN q",
        where=f"WHERE c.tsv @@ q.q AND {chunks.where()}",
        **_BOUND,
    )
    return (
        f"WITH q AS MATERIALIZED (SELECT {tsquery} AS q), s AS ({scored}) "
        "SELECT s.id, s.r, count(*) OVER () FROM s ORDER BY s.r DESC, s.id LIMIT :limit"
    )


#: a caller who may see at most this share of the current chunks has their candidates read from
#: their own rows (through the ACL index) and tested against the tsquery, instead of from the
#: tsquery's postings and tested against the ACL: at a million chunks a caller holding 1% of them
#: read 72k heap pages the first way and 9k the second for one claim-length query.
VISIBLE_FIRST_SHARE = 0.05


@dataclass(frozen=True)
class Candidates:
    """Where the candidate rows come from: the caller's predicate, and whether their own rows are
    read first (``visible_first``) rather than the tsquery's postings."""

    predicate: str
    visible_first: bool = False

    def source(self) -> str:
        """The FROM item: the whole table, or the caller's rows behind an ``OFFSET 0`` fence, which
        keeps the planner from pushing the tsquery test into an index scan."""
        if not self.visible_first:
            return "ce_chunks c"
        return f"(SELECT c.id, c.tsv, c.tsv_tokens FROM ce_chunks c WHERE {self.predicate} OFFSET 0) c"

    def where(self) -> str:
        """The predicate left for the outer query (none when the fence already applied it)."""
        return "TRUE" if self.visible_first else self.predicate

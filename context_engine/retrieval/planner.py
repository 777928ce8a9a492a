"""The vector leg's plan: an exact scan of the rows the caller may see, a probe of the HNSW index
proven exact or replaced by that scan, or (for a caller who filters nothing) the index alone.

Why a planner at all: an approximate index under a ``WHERE`` clause is a post-filter. The index
walks toward the query, discards the rows the caller may not see, and stops when its budget is
spent, so a caller who sees a small slice of the corpus (worse: a topically clustered one, which
is what real permissions are) gets short, empty or wrong answers and no error. pgvector 0.8's
iterative scan narrows that gap but does not close it (benchmarks/README.md, "ACL recall": recall
0.2-0.7 on clustered slices of every size). Below ``storage.ann_exact_threshold`` eligible rows an
exact scan of just those rows is both correct and cheap. For larger or spread slices the *probe*
(:func:`plan_vector`) reads the index's nearest rows unfiltered and keeps the caller's: holding
``limit`` of them proves they are the caller's true nearest, and when it does not, the exact scan
answers. So, under the default ``storage.ann_priority``, a filtered caller's answer is exact up to
the index's own unfiltered recall (an agent-scoped search above the threshold still takes the
iterative scan: its links are not in the counts).

Why the estimate comes from ``ce_vector_counts`` (migration 0004): counting the eligible rows at
query time (even capped) costs about as much as the exact scan it decides on, and Postgres's own
row estimate for ``acl && principals`` comes from sampled, possibly stale array statistics (a
principal that arrived after the last ANALYZE is guessed at 0.5% of the table). The counts are kept
current by triggers in the same transaction as every write, so reading them is one index lookup per
principal. A ``document_ids`` pin is not in those counts, so it is counted directly (capped), which
is cheap because it narrows by the document index first.

Why the plan is forced: Postgres's choice between the GIN bitmap on ``acl`` and the HNSW index is a
cost estimate that flips with statistics; ``exact`` orders by an expression the index cannot serve,
``ann`` and ``probe`` disable the alternatives to the index scan for their own transaction only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import ProgrammingError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from context_engine.storage import driver_reads
from context_engine.storage.predicates import ReadScope

EXACT = "exact"
ANN = "ann"
PROBE = "probe"

#: ``storage.ann_priority``: what the planner gives up when no plan is both exact and fast
RECALL = "recall"
LATENCY = "latency"

#: pgvector's default ``hnsw.max_scan_tuples``; the budget is only ever raised above it
DEFAULT_MAX_SCAN_TUPLES = 20_000
#: headroom over the tuples a uniformly spread slice would need before ``limit`` rows are found
SCAN_HEADROOM = 4
#: the most tuples one iterative scan may visit before the leg falls back to an exact scan
MAX_SCAN_TUPLES_CAP = 1_000_000
#: the default of ``storage.ann_unfiltered_min_rows``
UNFILTERED_ANN_MIN_ROWS = 1_000
#: the default of ``storage.ann_spread_min_share``
SPREAD_MIN_SHARE = 0.05
#: a slice counts as spread when its centroid is at most this much longer than the scope's: a slice
#: drawn at random has the corpus's centroid; one confined to a region has a longer one (1.4-1.6 for
#: the benchmark's clustered 10% slices, 1.00 for its random ones)
SPREAD_MAX_CONCENTRATION = 1.1
#: ``ef_search`` of an iterative index scan chosen for latency over recall
SPREAD_EF_SEARCH = 200
#: below this many eligible rows an exact scan costs a few milliseconds: no slice is sent to the index
SPREAD_MIN_ROWS = 1_000
#: the probe reads this many times the nearest rows a randomly spread slice needs to hold ``limit``
#: eligible ones (a slice of share s holds about s of them; 1.5x makes a short probe on such a slice rare)
PROBE_FACTOR = 1.5
#: the fewest nearest rows a probe reads (pgvector's default ``ef_search`` is 40)
PROBE_MIN_ROWS = 40
#: the narrowest search list a probe's index scan uses: its proof is only as good as the index's own
#: recall of the rows it reads. At 1,000,000 rows, 0.71-0.80 of the nearest ten at ``ef_search`` 40;
#: at 400, 0.973-0.978 for 25% clustered and scattered and 10% random slices over 50 queries each;
#: at 1,000 (pgvector's largest), 1.000 for those three and 0.996 for 50% scattered, no slower
#: (benchmarks/README.md, "Scale")
PROBE_MIN_EF_SEARCH = 1000
#: the search list of a caller who filters nothing: every row the index returns is theirs, so the
#: index's recall of the nearest ``limit`` is the answer's. It grows with the index, geometrically
#: from ``UNFILTERED_SMALL_EF_SEARCH`` at ``UNFILTERED_SMALL_ROWS`` rows to ``UNFILTERED_EF_SEARCH``
#: at ``UNFILTERED_LARGE_ROWS``. At 1,000,000 rows recall@10 was 0.94 at 100 and 0.996 at 400 over 50
#: queries; on a second build of the same rows one query of 17 found none of its ten at 400 (the walk
#: stayed in another cluster) and all 57 queries found all ten at 600 (benchmarks/README.md, "Scale").
#: On SciFact's 12,921 chunks recall@50 is 0.992 at 100, and search's nDCG@10 and R@100 are the same
#: at 100 as at 400 (benchmarks/README.md, "The vector leg's search list on a small index")
UNFILTERED_EF_SEARCH = 600
UNFILTERED_LARGE_ROWS = 1_000_000
UNFILTERED_SMALL_EF_SEARCH = 100
UNFILTERED_SMALL_ROWS = 20_000
#: an index scan's search list is at least this many times the rows asked for: twice for a caller
#: whose rows the scan filters, once for one who filters nothing (the relaxed iterative scan goes
#: on past it; on SciFact half of it gave the same answers)
FILTERED_EF_PER_ROW = 2
UNFILTERED_EF_PER_ROW: float = 1
#: the most nearest rows a probe reads; a slice too thin for that goes to the exact scan (or, under
#: ``latency``, to the iterative scan when it is above the threshold)
PROBE_MAX_ROWS = 2_000


@dataclass
class VectorPlan:
    """The decision for one vector search, reported in ``usage["vector_plan"]``.

    ``eligible`` is the estimated number of rows the caller's ACL and scope admit (``None`` when
    not estimated), ``total`` the rows in the whole index (sizes the ANN budget by selectivity).
    ``fallback`` is set by the leg when an ``ann`` answer came back short while the estimate said
    more rows exist, and the leg re-ran exactly. ``settings`` pins the index settings instead of
    sizing them (the benchmark's baselines and the exposure check's bare query use it, with
    ``allow_fallback=False``, to show what the index alone returns).
    """

    plan: str  # "exact" | "ann" | "probe"
    eligible: int | None
    total: int | None = None
    method: str = "given"  # "counts" | "capped_count" | "given" | "as_of"
    threshold: int | None = None
    fallback: bool = False
    ef_search: int | None = None
    max_scan_tuples: int | None = None
    settings: dict[str, str] | None = None
    allow_fallback: bool = True
    unfiltered: bool = False
    #: centroid length of the caller's slice over the scope's (measured only below the threshold)
    concentration: float | None = None
    #: nearest rows a ``probe`` reads (set by the leg, which knows ``limit``)
    probe_rows: int | None = None
    #: what a ``probe`` that proves nothing falls back to: ``exact``, or ``ann`` under ``latency``
    on_miss: str = EXACT

    def usage(self) -> dict[str, Any]:
        return {
            "plan": self.plan,
            "eligible_rows": self.eligible,
            "estimate": self.method,
            "threshold": self.threshold,
            "unfiltered": self.unfiltered,
            "concentration": None if self.concentration is None else round(self.concentration, 3),
            "fallback": self.fallback,
            "ef_search": self.ef_search,
            "max_scan_tuples": self.max_scan_tuples,
            "probe_rows": self.probe_rows,
        }


def _count_keys(scope: ReadScope, params: dict[str, Any]) -> tuple[str, str, str]:
    """SQL over ``ce_vector_counts v``: ``(in scope, visible to the caller, rows worth reading)``.

    Only the 'all' and 'public' rows (one each per source) and one primary-key probe per principal
    are read; a trusted caller sees every row.
    """
    in_scope = "TRUE"
    if scope.source_ids is not None:
        params["ps"] = list(scope.source_ids)
        in_scope = "v.source_id = ANY(CAST(:ps AS text[]))"
    if scope.principals is None:
        return in_scope, "v.kind = 'all'", "TRUE"
    params["pp"] = [p for p in scope.principals if p]
    mine = "(v.kind = 'acl' AND v.principal = ANY(CAST(:pp AS text[])))"
    return in_scope, f"(v.kind = 'public' OR {mine})", f"(v.kind IN ('all', 'public') OR {mine})"


async def count_estimate(conn: AsyncConnection, scope: ReadScope) -> tuple[int, int, bool]:
    """``(eligible, total, unfiltered)`` from ``ce_vector_counts``: one indexed read per principal and source.

    ``eligible`` is exact for a caller with one principal (or none) and an upper bound when one row
    may carry several of the caller's principals; it never exceeds the rows in the scoped sources.
    ``unfiltered`` says the caller's ACL and scope admit every indexed row for certain (a trusted
    caller, or every row public, in scope of every source): the index then filters nothing.
    """
    params: dict[str, Any] = {}
    in_scope, visible, keys = _count_keys(scope, params)
    statement = (
        "SELECT coalesce(sum(v.chunks) FILTER (WHERE v.kind = 'all'), 0) AS total, "
        f"coalesce(sum(v.chunks) FILTER (WHERE v.kind = 'all' AND {in_scope}), 0) AS scoped, "
        f"coalesce(sum(v.chunks) FILTER (WHERE {visible} AND {in_scope}), 0) AS visible, "
        "coalesce(sum(v.chunks) FILTER (WHERE v.kind = 'public'), 0) AS public "
        f"FROM ce_vector_counts v WHERE {keys}"
    )
    _, (row,) = await driver_reads.read(conn, statement, params)  # an aggregate: one row
    total, scoped, visible_rows, public = int(row[0]), int(row[1]), int(row[2]), int(row[3])
    unfiltered = scoped == total and (scope.principals is None or public == total)
    return min(visible_rows, scoped), total, unfiltered


async def concentration(conn: AsyncConnection, scope: ReadScope) -> float | None:
    """How much longer the centroid of the caller's visible vectors is than the centroid of every
    vector in scope, from the sums migration 0007 keeps in ``ce_vector_counts``; ``None`` when
    there is nothing to compare (or the sums are not there).

    Only rows the caller may see enter their side: the figure describes the caller's own slice
    and says nothing about any document they cannot read.
    """
    if scope.principals is None:
        return None
    params: dict[str, Any] = {}
    in_scope, visible, keys = _count_keys(scope, params)
    statement = (
        "SELECT sum(v.chunks) FILTER (WHERE v.kind = 'all'), vector_norm(sum(v.embedding_sum) FILTER "
        f"(WHERE v.kind = 'all')), sum(v.chunks) FILTER (WHERE {visible}), vector_norm(sum(v.embedding_sum) "
        f"FILTER (WHERE {visible})) FROM ce_vector_counts v WHERE {in_scope} AND {keys}"
    )
    row = (await conn.execute(text(statement), params)).one()
    if any(x is None for x in row) or not row[0] or not row[2] or not row[1]:
        return None
    return (float(row[3]) / float(row[2])) / (float(row[1]) / float(row[0]))


async def capped_count(conn: AsyncConnection, scope: ReadScope, cap: int) -> int:
    """Eligible rows counted under the shared predicate, stopping at ``cap``: exact, costs O(rows)."""
    params: dict[str, Any] = {"cap": cap}
    statement = (
        "SELECT count(*) FROM (SELECT 1 FROM ce_chunks c WHERE c.embedding IS NOT NULL "
        f"AND {scope.predicate('c', params)} LIMIT :cap) s"
    )
    return int(await conn.scalar(text(statement), params) or 0)


async def plan_vector(
    db: AsyncEngine,
    scope: ReadScope,
    *,
    threshold: int,
    unfiltered_min_rows: int | None = UNFILTERED_ANN_MIN_ROWS,
    spread_min_share: float | None = SPREAD_MIN_SHARE,
    spread_min_rows: int = SPREAD_MIN_ROWS,
    limit: int = 10,
    priority: str = RECALL,
) -> VectorPlan:
    """Exact, a probe of the index with an exact fallback, or (unfiltered callers) the index alone.

    A caller whose ACL and scope admit every indexed row uses the index from ``unfiltered_min_rows``
    (``storage.ann_unfiltered_min_rows``; ``None`` turns this off):
    with nothing filtered, the post-filter failure the exact scan guards against cannot happen, and
    the index answers with its ordinary recall at a fraction of the scan's cost (on SciFact's 9,198
    chunks nDCG@10 0.735 against 0.734 exact, search p50 50.5 against 71.2 ms; benchmarks/README.md).

    Every other slice is answered either by the exact scan or by a *probe* (:func:`probe_rows`): the
    index's nearest rows to the query, unfiltered, of which the caller's are kept. When the probe
    holds ``limit`` of the caller's rows, those are the caller's true nearest (any row of theirs the
    probe did not reach is farther than every row it did), so the answer is the exact one up to the
    index's unfiltered recall; when it does not, the leg runs the exact scan. No count or centroid can
    say where a slice lies relative to one query (a slice of many small regions has the corpus's
    centroid; a quarter of the index in one region is dense near some queries and absent near the
    rest), so the probe asks the index itself, per query, and the exact scan is the fallback.

    * ``spread_min_rows`` eligible rows or fewer: exact (a few milliseconds).
    * Up to ``threshold``: the probe for a slice of at least ``spread_min_share`` of the index
      (``storage.ann_spread_min_share``; ``None``: never) whose centroid is no more than
      ``SPREAD_MAX_CONCENTRATION`` times the scope's, since a probe that misses costs its own time
      on top of the scan, and a slice confined to one region misses for most queries; exact otherwise.
    * Above ``threshold``: the probe whenever the slice is thick enough for one (``PROBE_MAX_ROWS``):
      there the exact scan is the expensive plan and a hit saves most of it.

    ``priority`` (``storage.ann_priority``) settles the cells where no plan is both exact and fast:
    ``recall`` (the default) falls back to the exact scan, whose cost grows with the slice (a clustered
    25-50% slice of 100,000 rows: about 100 ms); ``latency`` falls back, above the threshold, to
    pgvector's iterative index scan (tens of milliseconds, but recall 0.5-0.6 on such slices).
    """
    if scope.historical:
        # the HNSW index holds current rows only: a past revision is answered by the exact scan
        return VectorPlan(EXACT, None, None, "as_of", threshold)
    unfiltered = False
    async with db.connect() as conn:
        if scope.agent_id is not None:
            # an agent's links are not in the counts: count its slice (exact and cheap when small,
            # where an index post-filtered down to a few linked documents would miss them)
            eligible = await capped_count(conn, scope, threshold + 1)
            return VectorPlan(EXACT if eligible <= threshold else ANN, eligible, None, "capped_count", threshold)
        total: int | None = None
        method = "counts"
        try:
            eligible, total, unfiltered = await count_estimate(conn, scope)
        except ProgrammingError:  # a schema from before migration 0004: count the slice instead
            await conn.rollback()
            eligible, method = await capped_count(conn, scope, threshold + 1), "capped_count"
        if scope.document_ids is not None:
            unfiltered = False
            if eligible > threshold:
                eligible, method = min(eligible, await capped_count(conn, scope, threshold + 1)), "capped_count"

        # only above the threshold is the exact scan the expensive answer that latency may refuse
        on_miss = ANN if priority == LATENCY and eligible > threshold else EXACT

        def decided(plan: str, spread: float | None = None) -> VectorPlan:
            return VectorPlan(
                plan, eligible, total, method, threshold, unfiltered=unfiltered, concentration=spread, on_miss=on_miss
            )

        if unfiltered and unfiltered_min_rows is not None and eligible >= unfiltered_min_rows:
            return decided(ANN)
        if not total:  # nothing to size a probe by: the threshold alone decides
            return decided(EXACT if eligible <= threshold else ANN)
        thick = probe_size(eligible, total, limit) <= PROBE_MAX_ROWS
        if eligible > threshold:
            if thick:
                return decided(PROBE)
            return decided(ANN if priority == LATENCY else EXACT)
        if (
            spread_min_share is None
            or not thick
            or eligible <= spread_min_rows
            or eligible < spread_min_share * total
            or scope.document_ids is not None
        ):
            return decided(EXACT)
        spread: float | None = None
        try:
            spread = await concentration(conn, scope)
        except ProgrammingError:  # a schema from before migration 0007
            await conn.rollback()
        if spread is not None and spread > SPREAD_MAX_CONCENTRATION:
            return decided(EXACT, spread)
        return decided(PROBE, spread)


def probe_size(eligible: int, total: int, limit: int) -> int:
    """Nearest rows a probe reads: ``PROBE_FACTOR`` times the ``limit / share`` a spread slice needs."""
    return max(PROBE_MIN_ROWS, math.ceil(PROBE_FACTOR * limit * total / max(eligible, 1)))


def probe_settings(plan: VectorPlan, limit: int) -> tuple[int, dict[str, str]]:
    """``(rows, settings)`` of one probe: an unfiltered index scan of the ``rows`` nearest rows.

    Up to 1,000 rows (pgvector's largest ``ef_search``) one plain scan returns them; beyond, the
    iterative scan in strict order goes on until ``rows`` are out, in distance order. The proof is
    only as good as the index's own recall of those rows, so the search list is never narrower than
    ``PROBE_MIN_EF_SEARCH`` (benchmarks/README.md, "Scale").
    """
    wanted = probe_size(plan.eligible, plan.total, limit) if plan.eligible and plan.total else PROBE_MIN_ROWS
    rows = min(wanted, max(PROBE_MAX_ROWS, limit))
    plan.probe_rows = rows
    plan.ef_search = min(1000, max(PROBE_MIN_EF_SEARCH, rows))
    if rows <= 1000:
        return rows, index_settings(plan.ef_search, "off")
    plan.max_scan_tuples = max(DEFAULT_MAX_SCAN_TUPLES, 4 * rows)
    return rows, index_settings(plan.ef_search, "strict_order", plan.max_scan_tuples)


def unfiltered_ef_search(total: int | None) -> int:
    """The search list of an unfiltered caller for an index of ``total`` rows (see the constants)."""
    if total is None or total >= UNFILTERED_LARGE_ROWS:
        return UNFILTERED_EF_SEARCH
    if total <= UNFILTERED_SMALL_ROWS:
        return UNFILTERED_SMALL_EF_SEARCH
    share = math.log(total / UNFILTERED_SMALL_ROWS) / math.log(UNFILTERED_LARGE_ROWS / UNFILTERED_SMALL_ROWS)
    return round(UNFILTERED_SMALL_EF_SEARCH * (UNFILTERED_EF_SEARCH / UNFILTERED_SMALL_EF_SEARCH) ** share)


def ann_settings(plan: VectorPlan, limit: int) -> dict[str, str]:
    """Session settings (transaction-local) for one forced, iterative HNSW scan.

    ``ef_search`` grows with the index and the rows asked for (from :func:`unfiltered_ef_search` for
    a caller who filters nothing; from :data:`SPREAD_EF_SEARCH` for one who filters, when latency
    was chosen over recall).
    ``max_scan_tuples`` is raised above pgvector's default when the estimate says the slice is
    small: a uniformly spread slice of selectivity s needs about ``ef_search / s`` tuples before
    ``limit`` eligible rows are met, and a clustered one more, hence the headroom; past the cap the
    leg's exact fallback is cheaper than walking on.
    """
    if plan.unfiltered:
        ef = max(unfiltered_ef_search(plan.total), math.ceil(UNFILTERED_EF_PER_ROW * limit))
    else:
        ef = max(SPREAD_EF_SEARCH, math.ceil(FILTERED_EF_PER_ROW * limit))
    ef = min(1000, ef)
    budget = DEFAULT_MAX_SCAN_TUPLES
    if plan.eligible and plan.total:
        need = math.ceil(SCAN_HEADROOM * ef * plan.total / plan.eligible)
        budget = max(budget, min(need, MAX_SCAN_TUPLES_CAP, max(plan.total, DEFAULT_MAX_SCAN_TUPLES)))
    plan.ef_search, plan.max_scan_tuples = ef, budget
    return index_settings(ef, "relaxed_order", budget)


def index_settings(ef_search: int, iterative: str = "off", max_scan_tuples: int | None = None) -> dict[str, str]:
    """Transaction-local settings that force an HNSW scan with these parameters.

    With sequential scans, bitmap scans and sorts disabled, the ordered index scan is the only plan
    without a disabled node, whatever the statistics say. ``iterative`` is ``off`` (a plain
    post-filter), ``relaxed_order`` or ``strict_order``.
    """
    settings = {"hnsw.ef_search": str(ef_search), "hnsw.iterative_scan": iterative}
    if max_scan_tuples is not None:
        settings["hnsw.max_scan_tuples"] = str(max_scan_tuples)
    return settings | {"enable_seqscan": "off", "enable_bitmapscan": "off", "enable_sort": "off"}

"""The document full-text leg: Okapi BM25 over whole documents, each the sum of its visible chunks.

Why: a chunk-level full-text leg scores each chunk of a document apart, so a query whose words are
spread over a document's two or three chunks finds no chunk that holds them all, while the
document does. This leg scores the document as one bag of words: a term's frequency is summed over
the document's chunks, its length is the sum of their lengths, and the statistics (documents, their
average length, each term's document frequency) are counted in the same statement from the chunks
the caller may read in the sources searched, at the revision read: exactly like the chunk leg's
statistics, a document the caller may not read changes neither the answers nor their scores, and a
past read counts the store as it was then (under today's ACL, like every read of history). A
``document_ids`` pin narrows the candidates, not the statistics, as for the chunk leg.

A document's score is handed to fusion on every chunk of it the caller may read, so whichever chunk
the other legs rank (the vector leg's nearest, the chunk leg's best) carries the document's
evidence; fusion takes a document's tied chunks as one rank (:mod:`context_engine.retrieval.fusion`).

Cost: one statement, no statistics of its own. A current read takes the query terms' frequencies
from the BM25 postings (migration 0020) and each posting's document, each scored document's length
and the count of visible documents from two narrow indexes over the current chunks (migration
0027, applied only for a store that weights this leg; without them the same statement reads chunk
rows instead), reading no chunk row but the answer's. Every document holding a query term is
bounded from the postings alone; only those whose bound reaches a floor taken from the best-bounded
read their length and are scored (:data:`_PRUNED_SQL`), so the answer is the one scoring every
document gives. What is still paid per search for every such document is its postings and their
chunks' document; and the count of visible documents reads every current chunk's index entry (a
restricted caller's matched to their visible groups by key). See
benchmarks/README.md ("Retrieval quality") for what it costs and what it buys.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.retrieval import lexical
from context_engine.retrieval.bm25_gate import lexeme_query
from context_engine.storage import layout
from context_engine.storage.predicates import ReadScope, visibility

if TYPE_CHECKING:
    from context_engine.config import ContextEngineConfig
    from context_engine.retrieval.retriever import Search


def statistics_scope(scope: ReadScope) -> ReadScope:
    """The slice the statistics count: the caller's ACL, sources and revision, without the
    candidate pins (``document_ids`` and the agent's links), as the chunk leg counts them."""
    return dataclasses.replace(scope, document_ids=None, agent_id=None)


_SQL = (
    "WITH qa AS MATERIALIZED (SELECT CAST(:dl_any AS tsquery) AS q), "
    "q AS MATERIALIZED (SELECT {tsquery} AS q), "
    # every chunk the statistics may count: how many documents, how many tokens
    "tot AS MATERIALIZED (SELECT count(DISTINCT c.document_id)::float8 AS n, "
    "coalesce(sum(c.tsv_tokens), 0)::float8 AS tokens FROM ce_chunks c WHERE {stats}), "
    # the query terms' frequencies in every countable chunk holding one of them, and whether the
    # chunk is a candidate (it matches the query and the caller's pins)
    "m AS MATERIALIZED (SELECT c.document_id, (c.tsv @@ q.q AND {cand}) AS cand, u.lexeme, u.tf "
    "FROM ce_chunks c CROSS JOIN qa CROSS JOIN q "
    "CROSS JOIN LATERAL (SELECT x.lexeme, coalesce(array_length(x.positions, 1), 1) AS tf "
    "FROM unnest(ts_filter(setweight(c.tsv, 'A', CAST(:dl_lex AS text[])), '{{a}}')) x) u "
    "WHERE c.tsv @@ qa.q AND {stats}), "
    "df AS (SELECT m.lexeme, count(DISTINCT m.document_id)::float8 AS df FROM m GROUP BY m.lexeme), "
    "docs AS MATERIALIZED (SELECT m.document_id FROM m GROUP BY m.document_id HAVING bool_or(m.cand)), "
    "tf AS (SELECT m.document_id, m.lexeme, sum(m.tf)::float8 AS tf FROM m "
    "JOIN docs ON docs.document_id = m.document_id GROUP BY m.document_id, m.lexeme), "
    "dl AS (SELECT c.document_id, sum(c.tsv_tokens)::float8 AS dl FROM ce_chunks c "
    "JOIN docs ON docs.document_id = c.document_id WHERE {cand} GROUP BY c.document_id), "
    "s AS (SELECT tf.document_id, sum(ln(1 + (tot.n - df.df + 0.5) / (df.df + 0.5)) * tf.tf * (:dl_k1 + 1) "
    "/ (tf.tf + :dl_k1 * (1 - :dl_b + :dl_b * dl.dl / greatest(tot.tokens / greatest(tot.n, 1), 1)))) AS r "
    "FROM tf JOIN df ON df.lexeme = tf.lexeme JOIN dl ON dl.document_id = tf.document_id CROSS JOIN tot "
    "GROUP BY tf.document_id), "
    "top AS MATERIALIZED (SELECT s.document_id, s.r FROM s ORDER BY s.r DESC, s.document_id LIMIT :limit) "
    "SELECT c.id, top.r FROM top JOIN ce_chunks c ON c.document_id = top.document_id WHERE {cand} "
    "ORDER BY top.r DESC, top.document_id, c.id"
)


#: The same ranking for a current read, from the postings (migration 0020) instead of each chunk's
#: ``tsvector``: a query term's frequency in a chunk and the chunk's group come from the postings'
#: key, so only a chunk's document id is read from its row, and the statistics' slice is the visible
#: groups (the chunk leg's: ACL and sources). The documents are ranked first and tested for a
#: candidate chunk (the tsquery and the caller's pins) best first, so rows below the answer are never read.
_POSTINGS_SQL = (
    "WITH vis AS MATERIALIZED (SELECT g.group_id, g.tokens FROM ce_bm25_groups g WHERE {groups}), "
    "q AS MATERIALIZED (SELECT {tsquery} AS q), "
    # the statistics' slice: how many documents, how many tokens
    "tot AS MATERIALIZED (SELECT (SELECT count(DISTINCT c.document_id) FROM ce_chunks c WHERE {stats})::float8 AS n, "
    "(SELECT coalesce(sum(vis.tokens), 0) FROM vis)::float8 AS tokens), "
    # every visible posting of a query term, with its chunk's document (one key lookup per posting)
    "m AS MATERIALIZED (SELECT (SELECT c.document_id FROM ce_chunks c WHERE c.id = p.chunk_id AND c.valid_to IS NULL) "
    "AS document_id, "
    "p.lexeme, p.tf FROM ce_bm25_postings p {join_vis}WHERE p.lexeme = ANY(CAST(:dl_lex AS text[]))), "
    "df AS (SELECT m.lexeme, count(DISTINCT m.document_id)::float8 AS df FROM m GROUP BY m.lexeme), "
    "tf AS (SELECT m.document_id, m.lexeme, sum(m.tf)::float8 AS tf FROM m GROUP BY m.document_id, m.lexeme), "
    # each scored document's length: its visible chunks, read through the document's index
    "dl AS (SELECT x.document_id, (SELECT sum(c.tsv_tokens) FROM ce_chunks c WHERE c.document_id = x.document_id "
    "AND {stats})::float8 AS dl FROM (SELECT DISTINCT m.document_id FROM m) x), "
    "s AS (SELECT tf.document_id, sum(ln(1 + (tot.n - df.df + 0.5) / (df.df + 0.5)) * tf.tf * (:dl_k1 + 1) "
    "/ (tf.tf + :dl_k1 * (1 - :dl_b + :dl_b * dl.dl / greatest(tot.tokens / greatest(tot.n, 1), 1)))) AS r "
    "FROM tf JOIN df ON df.lexeme = tf.lexeme JOIN dl ON dl.document_id = tf.document_id CROSS JOIN tot "
    "GROUP BY tf.document_id), "
    # best first, each tested for a candidate chunk until ``limit`` pass (OFFSET 0 keeps the test above the sort)
    "top AS MATERIALIZED (SELECT b.document_id, b.r FROM (SELECT s.document_id, s.r FROM s "
    "ORDER BY s.r DESC, s.document_id OFFSET 0) b WHERE (SELECT TRUE FROM ce_chunks c "
    "WHERE c.document_id = b.document_id AND c.tsv @@ (SELECT q.q FROM q) AND {cand} LIMIT 1) "
    "ORDER BY b.r DESC, b.document_id LIMIT :limit) "
    "SELECT c.id, top.r FROM top JOIN ce_chunks c ON c.document_id = top.document_id WHERE {cand} "
    "ORDER BY top.r DESC, top.document_id, c.id"
)


#: The postings pass again, with a bound that spares most documents their exact scoring. What needs
#: only the postings is still computed for every document holding a query term: the statistics, each
#: term's frequency in the document (summed over its visible chunks) and, from the lengths the
#: postings carry, the length of the document's chunks that hold a query term. That length is at most
#: the document's, and BM25 falls with length, so the score at it bounds the document's from above
#: (exactly, when every visible chunk holds a term). The best-bounded documents with a candidate chunk
#: are then scored exactly, ``dl_seed`` of them; the ``limit``-th of those scores is a floor under the
#: answer's last, so a document bounded below it cannot be in the answer, and only the documents that
#: reach it read their length (one index-only probe each) and are scored.
_PRUNED_SQL = (
    "WITH vis AS MATERIALIZED (SELECT g.group_id, g.tokens, g.source_id, g.acl FROM ce_bm25_groups g WHERE {groups}), "
    "q AS MATERIALIZED (SELECT {tsquery} AS q), "
    "tot AS MATERIALIZED (SELECT (SELECT count(DISTINCT c.document_id) FROM {counted})::float8 AS n, "
    "(SELECT coalesce(sum(vis.tokens), 0) FROM vis)::float8 AS tokens), "
    "m AS MATERIALIZED (SELECT (SELECT c.document_id FROM ce_chunks c WHERE c.id = p.chunk_id AND c.valid_to IS NULL) "
    "AS document_id, p.chunk_id, p.lexeme, p.tf, p.tokens FROM ce_bm25_postings p {join_vis}"
    "WHERE p.lexeme = ANY(CAST(:dl_lex AS text[]))), "
    "tf AS MATERIALIZED (SELECT m.document_id, m.lexeme, sum(m.tf)::float8 AS tf FROM m "
    "GROUP BY m.document_id, m.lexeme), "
    "w AS MATERIALIZED (SELECT d.lexeme, ln(1 + (tot.n - d.df + 0.5) / (d.df + 0.5)) AS idf, "
    "greatest(tot.tokens / greatest(tot.n, 1), 1) AS avgdl "
    "FROM (SELECT tf.lexeme, count(*)::float8 AS df FROM tf GROUP BY tf.lexeme) d CROSS JOIN tot), "
    # the length of each document's chunks that hold a query term: at most the document's length
    "lo AS (SELECT x.document_id, sum(x.tokens)::float8 AS dl FROM (SELECT DISTINCT m.document_id, m.chunk_id, "
    "m.tokens FROM m) x GROUP BY x.document_id), "
    "ub AS MATERIALIZED (SELECT tf.document_id, {score} AS ub FROM lo dl JOIN tf ON tf.document_id = dl.document_id "
    "JOIN w ON w.lexeme = tf.lexeme GROUP BY tf.document_id), "
    # the best-bounded documents with a candidate chunk, scored exactly: their limit-th score is the floor
    "seed AS MATERIALIZED (SELECT b.document_id, ({length}) AS dl FROM (SELECT ub.document_id, ub.ub FROM ub "
    "ORDER BY ub.ub DESC, ub.document_id OFFSET 0) b WHERE {candidate} ORDER BY b.ub DESC, b.document_id "
    "LIMIT :dl_seed), "
    "sx AS (SELECT tf.document_id, {score} AS r FROM seed dl JOIN tf ON tf.document_id = dl.document_id "
    "JOIN w ON w.lexeme = tf.lexeme GROUP BY tf.document_id), "
    "fl AS MATERIALIZED (SELECT coalesce((SELECT sx.r FROM sx ORDER BY sx.r DESC OFFSET :dl_floor_at LIMIT 1), "
    "CAST('-Infinity' AS float8)) AS f), "
    # only the documents whose bound reaches the floor read their length and are scored
    "reach AS MATERIALIZED (SELECT b.document_id, ({length}) AS dl FROM ub b CROSS JOIN fl "
    "WHERE b.ub * (1 + 1e-9) >= fl.f), "
    "s AS (SELECT tf.document_id, {score} AS r FROM reach dl JOIN tf ON tf.document_id = dl.document_id "
    "JOIN w ON w.lexeme = tf.lexeme GROUP BY tf.document_id), "
    "top AS MATERIALIZED (SELECT b.document_id, b.r FROM (SELECT s.document_id, s.r FROM s "
    "ORDER BY s.r DESC, s.document_id OFFSET 0) b WHERE {candidate} "
    "ORDER BY b.r DESC, b.document_id LIMIT :limit) "
    "SELECT c.id, top.r, (SELECT count(*) FROM ub), (SELECT count(*) FROM reach) FROM top "
    "JOIN ce_chunks c ON c.document_id = top.document_id WHERE {cand} ORDER BY top.r DESC, top.document_id, c.id"
)

#: the chunks the statistics count, for a caller with a visibility condition: those of the visible
#: (source, ACL) groups, matched by key (a group row exists while any of its chunks is current), where
#: testing the ACL overlap on every current chunk cost seconds at 200,000 chunks for a caller holding
#: 300 principals
_COUNTED_BY_GROUP = "ce_chunks c JOIN vis ON vis.source_id = c.source_id AND vis.acl = c.acl WHERE {live}"

#: a document's BM25 score from its rows of ``tf`` joined to ``w``, at the length ``dl.dl``
_SCORE = "sum(w.idf * tf.tf * (:dl_k1 + 1) / (tf.tf + :dl_k1 * (1 - :dl_b + :dl_b * dl.dl / w.avgdl)))"
#: a document's length over its chunks the statistics count, for ``b.document_id``
_LENGTH = "SELECT sum(c.tsv_tokens)::float8 FROM ce_chunks c WHERE c.document_id = b.document_id AND {stats}"
#: whether ``b.document_id`` has a candidate chunk: one matching the tsquery and the caller's pins.
#: The match is spelled as the function behind ``@@`` so that it is tested on the document's few chunk
#: rows: as an operator the planner may AND the text index's bitmap for the whole query into every test
#: (at 200,000 chunks, 7 ms a document for a 1% caller's query).
_CANDIDATE = (
    "(SELECT TRUE FROM ce_chunks c WHERE c.document_id = b.document_id AND ts_match_vq(c.tsv, (SELECT q.q FROM q)) "
    "AND {cand} LIMIT 1)"
)

#: documents scored exactly, per result row asked for, before the floor is read: more raise the floor
#: (fewer documents reach it) and cost their own probes
SEED_FACTOR = 1


async def document_fts_leg(
    db: AsyncEngine,
    query: str,
    scope: ReadScope,
    *,
    limit: int,
    config: str,
    match: str,
    stopwords: str | Sequence[str] | None = "english",
    k1: float = 1.2,
    b: float = 0.75,
    postings: bool = True,
    pruned: bool = True,
    report: dict[str, Any] | None = None,
) -> list[tuple[int, float]]:
    """The ``limit`` best documents by BM25 over their visible chunks, as ``(chunk_id, score)``:
    every visible chunk of each, with its document's score, best document first.

    Candidates are the documents with a chunk matching the query's tsquery (``match`` as for the
    chunk leg, negated terms included); the positive lexemes are scored. A current read on a single
    node is scored from the postings (``postings=False``: from each chunk's ``tsvector``, the same
    answer), with the bound that skips documents below the floor (``pruned=False``: every document
    scored, the same answer); a past read, or a distributed schema, from the chunks' ``tsvector``.
    ``report``, when given, receives ``documents`` (documents holding a query term) and ``scored``
    (of them, those whose bound reached the floor and were scored) from the bounded pass.
    """
    params: dict[str, Any] = {"lx_cfg": config, "limit": limit, "dl_k1": float(k1), "dl_b": float(b)}
    tsq = lexical.tsquery_sql(query, match=match, params=params, stopwords=stopwords)
    if tsq is None:
        return []
    async with db.connect() as conn:
        found = await conn.execute(text(f"SELECT DISTINCT x FROM unnest({lexical.terms_sql(params)}) x"), params)
        lexemes = sorted(str(r[0]) for r in found)
        if not lexemes:
            return []
        params["dl_lex"] = lexemes
        stats = statistics_scope(scope)
        if postings and scope.as_of is None and not await layout.distributed(conn):
            groups = visibility("g", params, principals=stats.principals, source_ids=stats.source_ids)
            stats_sql, cand_sql = stats.predicate("c", params), scope.predicate("c", params)
            parts = {
                "groups": groups,
                "join_vis": "" if groups == "TRUE" else "JOIN vis ON vis.group_id = p.group_id ",
                "tsquery": tsq,
                "stats": stats_sql,
                "cand": cand_sql,
            }
            if pruned:
                params["dl_seed"] = max(1, SEED_FACTOR * limit)
                params["dl_floor_at"] = max(0, limit - 1)
                parts["score"] = _SCORE
                parts["length"] = _LENGTH.format(stats=stats_sql)
                parts["candidate"] = _CANDIDATE.format(cand=cand_sql)
                by_group = _COUNTED_BY_GROUP.format(live=stats.live("c", params))
                parts["counted"] = f"ce_chunks c WHERE {stats_sql}" if groups == "TRUE" else by_group
                statement = _PRUNED_SQL.format(**parts)
            else:
                statement = _POSTINGS_SQL.format(**parts)
        else:
            params["dl_any"] = " | ".join(lexeme_query(x) for x in lexemes)
            statement = _SQL.format(tsquery=tsq, stats=stats.predicate("c", params), cand=scope.predicate("c", params))
        rows = (await conn.execute(text(statement), params)).all()
    if report is not None and rows and len(rows[0]) > 2:  # the bounded pass's counts
        report.update({"documents": int(rows[0][2]), "scored": int(rows[0][3])})
    return [(int(r[0]), float(r[1])) for r in rows]


class DocumentFullTextLeg:
    """``document_fts``: whole-document BM25 under ``search.lexical_*`` and ``search.bm25``."""

    name = "document_fts"
    #: off by default: half A of SciFact's test queries chooses it (with the vector leg, 0.7263 on
    #: half B against 0.7245 for the defaults; every leg at 1: 0.7373 on all 300) but it adds to every
    #: search, most of all the count of visible documents (benchmarks/README.md, "Retrieval quality")
    default_weight = 0.0
    #: every chunk of a document carries the document's score (fusion ranks them as one)
    scores_documents = True

    def applies(self, query: str, config: ContextEngineConfig) -> bool:
        return config.search.lexical_rank == "bm25"

    async def run(self, search: Search, index: int) -> list[tuple[int, float]]:
        cfg = search.services.config.search
        return await document_fts_leg(
            search.reads,
            search.queries[index],
            search.scope,
            limit=search.limit,
            config=search.services.text_search_config,
            match=cfg.lexical_match,
            stopwords=cfg.lexical_stopwords,
            k1=cfg.bm25.k1,
            b=cfg.bm25.b,
        )

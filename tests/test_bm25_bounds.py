"""The per-lexeme BM25 bounds (migration 0019) stay bounds through every write path: for each
(lexeme, group) row, ``max_tf`` is at least the lexeme's term frequency and ``min_len`` at most the
length of every current chunk of the group holding it. After inserts alone they are exact."""

from __future__ import annotations

import random

from sqlalchemy import text

from context_engine import TRUSTED, ContextEngine
from tests.conftest import make_config
from tests.test_bm25_pruning import WORDS, WordEmbedder

#: per (lexeme, group): the kept bounds beside the true ones over the current chunks
COMPARE = """
WITH truth AS (
    SELECT u.lexeme, g.group_id, max(coalesce(array_length(u.positions, 1), 1)) AS tf, min(c.tsv_tokens) AS len
    FROM ce_chunks c JOIN ce_bm25_groups g ON g.source_id = c.source_id AND g.acl = c.acl, unnest(c.tsv) u
    WHERE c.valid_to IS NULL GROUP BY 1, 2
)
SELECT t.lexeme, t.group_id, t.max_tf, t.min_len, truth.tf, truth.len
FROM ce_bm25_terms t JOIN truth ON truth.lexeme = t.lexeme AND truth.group_id = t.group_id
"""


async def _rows(engine: ContextEngine) -> list[tuple[str, int, int | None, int | None, int, int]]:
    db = await engine.database()
    async with db.connect() as conn:
        return [tuple(r) for r in await conn.execute(text(COMPARE))]  # type: ignore[misc]


def _body(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(2, 25))]
    return " ".join(words) + "."


async def test_bounds_hold_through_every_write_path(database_url: str) -> None:
    rng = random.Random(3)
    async with ContextEngine(make_config(database_url), embedder=WordEmbedder()) as engine:
        ids = []
        for i in range(30):
            report = await engine.ingest(text=_body(rng), name=f"d{i}.md", acl=["g1"] if i % 2 else [])
            ids.append(report.documents[0].document_id)
        await engine.bulk_ingest(
            [{"text": _body(rng), "name": f"b{i}.md", "acl": ["g2"]} for i in range(20)], principals=TRUSTED
        )
        fresh = await _rows(engine)
        assert fresh and all(r[2] == r[4] and r[3] == r[5] for r in fresh)  # inserts only: exact
        for i in range(0, 30, 3):  # a new version of some, a move to another ACL, a delete
            await engine.ingest(text=_body(rng), name=f"d{i}.md", acl=["g1"] if i % 2 else [])
        for doc_id in ids[1:10:4]:
            await engine.update_document(doc_id, principals=TRUSTED, acl=["g3"])
        for doc_id in ids[2:12:5]:
            await engine.delete_document(doc_id, principals=TRUSTED)
        after = await _rows(engine)
    assert after
    for lexeme, group, max_tf, min_len, tf, length in after:
        assert max_tf is not None and min_len is not None, (lexeme, group)
        assert max_tf >= tf and min_len <= length, (lexeme, group, max_tf, tf, min_len, length)

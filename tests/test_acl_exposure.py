"""``context-engine check-acl-exposure`` against a database the tests build, on a real PostgreSQL.

The corpus is the clustered one of ``test_acl_planner``: a caller whose rows sit far from where the
sampled queries point loses them on a bare index query, and must not lose them through the library.
The check must be read-only and call no embedding provider: it runs with no model configured here.
"""

from __future__ import annotations

import asyncio

import numpy as np
import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from context_engine import cli
from context_engine.acl_exposure import check_exposure, format_report, read_only_engine
from tests.test_acl_planner import CROWD, FAR, insert_clustered


def _snapshot(url: str) -> tuple[object, ...]:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM ce_chunks), (SELECT max(id) FROM ce_chunks), "
            "(SELECT array_agg(c ORDER BY c) FROM ce_vector_counts c), "
            "(SELECT count(*) FROM ce_schema_migrations)"
        ).fetchone()
    assert row is not None
    return tuple(row)


@pytest.fixture
def built(database_url: str) -> str:
    """A migrated database holding the clustered corpus around an arbitrary direction."""
    assert cli.main(["migrate", "--database-url", database_url, "--dim", "384"]) == 0
    centre = np.random.default_rng(3).standard_normal(384)
    insert_clustered(database_url, centre.tolist(), crowd=600, far=12)
    return database_url


def test_cli_reports_bare_loss_and_exact_library_answers(built: str, capsys: pytest.CaptureFixture[str]) -> None:
    before = _snapshot(built)
    capsys.readouterr()
    code = cli.main(["check-acl-exposure", "--database-url", built, "--queries", "6", "--top-k", "5"])
    out = capsys.readouterr().out
    assert code == 0
    assert _snapshot(built) == before  # read-only: nothing written, nothing migrated

    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("group:")}
    assert set(lines) == {CROWD, FAR}
    far = lines[FAR]
    # visible, share, pg picks, bare recall, bare short, bare empty, library recall, library short, plan
    assert far[1] == "12" and far[3] in {"index", "exact"}
    assert float(far[4]) < 1.0 and far[5] != "0%"
    assert float(far[7]) == 1.0 and far[8] == "0%" and far[9] == "exact"
    assert float(lines[CROWD][7]) == 1.0
    assert "this library: 0 of 2 ACL values lost rows" in out
    assert "bare index query: 1 of 2" in out or "bare index query: 2 of 2" in out


def test_report_api_smallest_slice_first_and_connections_are_read_only(built: str) -> None:
    async def run() -> str:
        db = read_only_engine(built)
        try:
            report = await check_exposure(db, top_k=5, queries=4, max_acls=1, threshold=20000)
            with pytest.raises(DBAPIError, match="read-only"):
                async with db.begin() as conn:
                    await conn.execute(text("DELETE FROM ce_vector_counts"))
        finally:
            await db.dispose()
        assert [e.acl for e in report.results] == [FAR]  # the most restrictive value comes first
        assert report.acl_values == 2 and report.total_rows == 612 and report.queries == 4
        assert all(r == 1.0 for r in report.results[0].library_recall)
        return format_report(report)

    shown = asyncio.run(run())
    assert "1 broader ACL values not checked" in shown


def test_a_database_without_the_schema_is_refused(database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check-acl-exposure", "--database-url", database_url]) == 1
    assert "no context-engine schema" in capsys.readouterr().err

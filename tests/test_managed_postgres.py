"""Is this PostgreSQL fit for context-engine? Run the real migrations on it and find out.

Point ``CE_TEST_MANAGED_DATABASE_URL`` at a SCRATCH database on the service you are evaluating
(the migrations create tables in it; the test document is deleted afterwards):

    CE_TEST_MANAGED_DATABASE_URL=postgresql://user:pass@host/scratch pytest tests/test_managed_postgres.py -v

Without it the same checks run against the embedded server, so they run in every test session.
Checked: the three extensions are installable, pgvector is new enough for iterative index scans,
and every type, function and operator the search SQL uses resolves on the role's own
``search_path`` (a new connection that sets nothing). The separate-schema layout some services use
(extensions in ``extensions``) is reproduced on the embedded server.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from context_engine import TRUSTED, ContextEngine
from context_engine.storage.database import to_driver_url
from context_engine.storage.extensions import MIN_PGVECTOR, DatabaseUnsuitable, version_tuple
from context_engine.storage.migrate import migrate
from tests.conftest import make_config

MANAGED_URL_VARIABLE = "CE_TEST_MANAGED_DATABASE_URL"
LOCAL_MODEL_DIM = 384
#: the fusion weights that make every leg run, the trigram leg included
ALL_LEGS = {"weights": {"fts": 1.0, "trigram": 1.0, "vector": 1.0}}


@pytest.fixture
def target_url(request: pytest.FixtureRequest) -> str:
    """The database named by the variable, else a fresh database on the embedded server."""
    return os.environ.get(MANAGED_URL_VARIABLE) or request.getfixturevalue("database_url")


@pytest.fixture
async def sql(target_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(to_driver_url(target_url))
    try:
        yield engine
    finally:
        await engine.dispose()


def _plain_url(url: str) -> str:
    """psycopg.connect takes libpq URLs: drop a SQLAlchemy driver suffix if the variable has one."""
    scheme, sep, rest = url.partition("://")
    return ("postgresql" if scheme.startswith("postgres") else scheme) + sep + rest


def _resolves_on_role_search_path(url: str) -> dict[str, object]:
    """What the search SQL needs, asked on a new connection that sets no search_path of its own."""
    with psycopg.connect(_plain_url(url)) as conn:
        answers = {
            "vector type": conn.execute("SELECT to_regtype('vector') IS NOT NULL").fetchone()[0],
            "<=>": conn.execute("SELECT CAST('[1,0]' AS vector) <=> CAST('[0,1]' AS vector)").fetchone()[0],
            "word_similarity": conn.execute("SELECT word_similarity('leave', 'annual leave')").fetchone()[0],
            "<%": conn.execute("SELECT 'leave' <% 'annual leave'").fetchone()[0],
            "similarity": conn.execute("SELECT similarity('leave', 'leaves')").fetchone()[0],
            "%": conn.execute("SELECT 'leave' % 'leaves'").fetchone()[0],
            "unaccent": conn.execute("SELECT unaccent('crème brûlée')").fetchone()[0],
        }
        conn.execute("SELECT set_config('pg_trgm.word_similarity_threshold', '0.3', true)")
        conn.execute("SET LOCAL hnsw.iterative_scan = 'relaxed_order'")
        answers["hnsw.iterative_scan"] = conn.execute("SHOW hnsw.iterative_scan").fetchone()[0]
    return answers


def _assert_search_sql_resolves(url: str) -> None:
    answers = _resolves_on_role_search_path(url)
    assert answers["vector type"] is True
    assert answers["<=>"] == pytest.approx(1.0)
    assert answers["word_similarity"] == pytest.approx(1.0)
    assert answers["<%"] is True and answers["%"] is True
    assert 0 < answers["similarity"] < 1
    assert answers["unaccent"] == "creme brulee"
    assert answers["hnsw.iterative_scan"] == "relaxed_order"


async def _search_every_leg(url: str) -> dict[str, object]:
    """Ingest one document, find it through a typo (trigram), words (full text) and meaning; clean up."""
    source = f"managed-check-{uuid.uuid4().hex[:8]}"
    config = make_config(url, fusion=ALL_LEGS, storage={"auto_migrate": False})
    async with ContextEngine(config) as engine:
        report = await engine.ingest(
            text="Annual leave accrues at two days per month for every employee.", name="leave", source_id=source
        )
        document = report.documents[0]
        try:
            assert document.status == "completed", document
            typo = await engine.search("anual leav", principals=TRUSTED, source_ids=[source])
            words = await engine.search("annual leave", principals=TRUSTED, source_ids=[source])
        finally:
            await engine.delete_document(document.document_id, principals=TRUSTED)
    return {"typo": typo, "words": words}


async def test_the_database_is_fit_for_context_engine(target_url: str, sql: AsyncEngine) -> None:
    with psycopg.connect(_plain_url(target_url)) as conn:
        offered = dict(
            conn.execute(
                "SELECT name, default_version FROM pg_available_extensions "
                "WHERE name IN ('vector', 'pg_trgm', 'unaccent')"
            ).fetchall()
        )
    assert set(offered) == {"vector", "pg_trgm", "unaccent"}, f"extensions this server offers: {offered}"

    await migrate(sql, dim=LOCAL_MODEL_DIM, announce=lambda line: None)  # the real migrations

    with psycopg.connect(_plain_url(target_url)) as conn:
        installed = dict(conn.execute("SELECT extname, extversion FROM pg_extension").fetchall())
    assert {"vector", "pg_trgm", "unaccent"} <= set(installed)
    assert version_tuple(installed["vector"]) >= MIN_PGVECTOR, f"pgvector {installed['vector']}"
    _assert_search_sql_resolves(target_url)

    found = await _search_every_leg(target_url)
    typo_hits = found["typo"].hits  # type: ignore[attr-defined]
    assert typo_hits and typo_hits[0].document_name == "leave"
    assert found["typo"].usage["leg_hits"]["trigram"] >= 1  # type: ignore[attr-defined]
    word_usage = found["words"].usage  # type: ignore[attr-defined]
    assert word_usage["leg_hits"]["fts"] >= 1 and word_usage["leg_hits"]["vector"] >= 1


async def test_extensions_installed_in_their_own_schema(database_url: str) -> None:
    """The layout of services that put extensions in an ``extensions`` schema, on the embedded server."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        db_name = conn.execute("SELECT current_database()").fetchone()[0]
        conn.execute("CREATE SCHEMA extensions")
        for name in ("vector", "pg_trgm", "unaccent"):
            conn.execute(f"CREATE EXTENSION {name} SCHEMA extensions")

    # off the search path: refused up front, naming the extensions, the schema and the fix
    sql = create_async_engine(to_driver_url(database_url))
    try:
        with pytest.raises(DatabaseUnsuitable) as info:
            await migrate(sql, dim=LOCAL_MODEL_DIM, announce=lambda line: None)
    finally:
        await sql.dispose()
    error = info.value
    assert error.code == "extension_not_on_search_path"
    assert error.details == {"extensions": ["pg_trgm", "unaccent", "vector"], "schemas": ["extensions"]}
    assert "pg_trgm in schema extensions" in error.message
    assert 'ALTER ROLE CURRENT_USER SET search_path = "$user", public, extensions' in error.message
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT to_regclass('ce_schema_migrations')").fetchone() == (None,)  # nothing written

    # the schema on the database's search path, as such services configure it: everything resolves
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{db_name}" SET search_path = "$user", public, extensions')
    sql = create_async_engine(to_driver_url(database_url))
    try:
        report = await migrate(sql, dim=LOCAL_MODEL_DIM, announce=lambda line: None)
    finally:
        await sql.dispose()
    assert report.applied[0] == "0001_initial"
    with psycopg.connect(database_url) as conn:
        schemas = dict(
            conn.execute(
                "SELECT e.extname, n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace"
            ).fetchall()
        )
        embedding_type = conn.execute(
            "SELECT format_type(atttypid, NULL), atttypid::regtype::text FROM pg_attribute "
            "WHERE attrelid = 'ce_chunks'::regclass AND attname = 'embedding'"
        ).fetchone()
    assert {schemas[name] for name in ("vector", "pg_trgm", "unaccent")} == {"extensions"}
    assert embedding_type is not None and embedding_type[0] == "vector"
    _assert_search_sql_resolves(database_url)

    found = await _search_every_leg(database_url)
    assert found["typo"].hits[0].document_name == "leave"  # type: ignore[attr-defined]
    assert found["typo"].usage["leg_hits"]["trigram"] >= 1  # type: ignore[attr-defined]
    assert found["words"].usage["leg_hits"]["vector"] >= 1  # type: ignore[attr-defined]


def test_pgvector_versions_compare_numerically() -> None:
    assert version_tuple("0.7.4") < MIN_PGVECTOR <= version_tuple("0.8.0") < version_tuple("0.10.1")
    assert version_tuple("0.8.0-dev") == (0, 8)  # a suffixed part ends the comparison

"""db tools against a second database on the embedded server, reached with a read-only role:
rows and caps, bound parameters, writes and long statements refused, and a failure told by a fixed
sentence and its SQLSTATE, masked identically for the caller, the audit row and the hook."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest

from context_engine import ContextEngine
from context_engine.hooks import Hooks
from context_engine.redaction import RedactionPolicy, RedactionRule
from context_engine.tools import ToolArgumentsInvalid, ToolConfig, ToolExecutionFailed
from context_engine.tools.errors import ToolTimeout
from context_engine.tools.errortext import WITHHELD
from tests.conftest import make_config
from tests.tools_support import SECRET_KEY, HookLog, as_user, other_database, table_rows

# the tests' databases start migrated (a copy of the session's template; see tests/conftest.py)
pytestmark = pytest.mark.migrated()

PASSWORD = "pw-readonly-3c9d81f0ab"


@pytest.fixture
def sales_db(pg_base_url: str) -> Iterator[dict[str, str]]:
    """A second database with an ``orders`` table, a read-only role, and a raising function."""
    name, role, writer = f"sales_{uuid.uuid4().hex[:10]}", f"ro_{uuid.uuid4().hex[:10]}", f"rw_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_base_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
        conn.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD '{PASSWORD}'")
        conn.execute(f"CREATE ROLE \"{writer}\" LOGIN PASSWORD '{PASSWORD}'")
    admin = other_database(pg_base_url, name)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, customer text, note text, total numeric)")
        conn.execute(
            "INSERT INTO orders SELECT g, 'customer ' || g, CASE WHEN g % 2 = 0 THEN NULL ELSE 'tab\there' END, "
            "g * 1.5 FROM generate_series(1, 20) g"
        )
        conn.execute(
            "CREATE FUNCTION lookup_fails(who text) RETURNS int LANGUAGE plpgsql AS $$ BEGIN "
            "RAISE EXCEPTION 'lookup failed for %', who USING DETAIL = 'row (' || who || ', 42) exists', "
            "HINT = 'the row was ' || who; END $$"
        )
        conn.execute(f'GRANT CONNECT ON DATABASE "{name}" TO "{role}"')
        conn.execute(f'GRANT USAGE ON SCHEMA public TO "{role}"')
        conn.execute(f'GRANT SELECT ON orders TO "{role}"')
        conn.execute(f'GRANT EXECUTE ON FUNCTION lookup_fails(text) TO "{role}"')
        # a role that may write the user's table (and create in the schema), yet is no superuser
        conn.execute(f'GRANT CONNECT ON DATABASE "{name}" TO "{writer}"')
        conn.execute(f'GRANT USAGE, CREATE ON SCHEMA public TO "{writer}"')
        conn.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON orders TO "{writer}"')
    try:
        yield {
            "readonly": as_user(admin, role, PASSWORD),
            "writer": as_user(admin, writer, PASSWORD),
            "admin": admin,
        }
    finally:
        with psycopg.connect(pg_base_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')
            conn.execute(f'DROP ROLE IF EXISTS "{writer}"')


@pytest.fixture
def hook_log() -> HookLog:
    return HookLog()


@pytest.fixture
async def engine_with_email_masking(database_url: str, hook_log: HookLog) -> AsyncIterator[ContextEngine]:
    policy = RedactionPolicy(rules=[RedactionRule(name="email", detector="email")])
    config = make_config(database_url, secret_key=SECRET_KEY, redaction=policy)
    async with ContextEngine(config, hooks=Hooks(on_tool_call=hook_log)) as eng:
        yield eng


def db_tool(name: str, url: str, **config: Any) -> ToolConfig:
    return ToolConfig(name=name, kind="db", description="sales data", config={"database_url": url, **config})


def order_count(sales_db: dict[str, str]) -> int:
    with psycopg.connect(sales_db["admin"]) as conn:
        return conn.execute("SELECT count(*) FROM orders").fetchone()[0]  # type: ignore[index]


async def test_rows_columns_and_the_tools_row_cap(engine_with_email_masking: ContextEngine, sales_db: dict) -> None:
    eng = engine_with_email_masking
    await eng.register_tool(db_tool("sales", sales_db["readonly"], max_rows=5))
    out = await eng.execute_tool("db_sales", {"query": "SELECT id, note, total FROM orders ORDER BY id"}, principals=[])
    result = out["result"]
    assert result["columns"] == ["id", "note", "total"] and result["truncated"] is True and result["row_count"] == 5
    assert result["rows"][:2] == [{"id": 1, "note": "tab\there", "total": 1.5}, {"id": 2, "note": None, "total": 3}]
    tsv = await eng.execute_tool(
        "db_sales",
        {"query": "SELECT id, note FROM orders ORDER BY id"},
        principals=[],
        response_mode="tsv",
        result_max_rows=3,
    )
    assert tsv["result"]["rows"] == "id\tnote\n1\ttab\\there\n2\t\\N\n3\ttab\\there"
    assert tsv["result"]["_result_shaping"] == {"rows": {"rows_returned": 3, "rows_omitted": 2}}


async def test_a_fixed_query_binds_arguments_as_parameters(
    engine_with_email_masking: ContextEngine, sales_db: dict
) -> None:
    eng = engine_with_email_masking
    await eng.register_tool(
        db_tool(
            "by_customer",
            sales_db["readonly"],
            query="SELECT id FROM orders WHERE customer = %(customer)s ORDER BY id",
            parameters={"properties": {"customer": {"type": "string"}}, "required": ["customer"]},
        )
    )
    hit = await eng.execute_tool("db_by_customer", {"customer": "customer 7"}, principals=[])
    assert hit["result"]["rows"] == [{"id": 7}]
    injected = await eng.execute_tool("db_by_customer", {"customer": "x' OR '1'='1"}, principals=[])
    assert injected["result"]["rows"] == []
    with pytest.raises(ToolArgumentsInvalid):
        await eng.execute_tool("db_by_customer", {"customer": 7}, principals=[])


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO orders VALUES (99, 'x', 'y', 1)",
        "DELETE FROM orders",
        "WITH gone AS (DELETE FROM orders RETURNING id) SELECT count(*) FROM gone",
        "SELECT 1; DELETE FROM orders",
        "COMMIT; DELETE FROM orders",
        "UPDATE orders SET total = 0",
        "DROP TABLE orders",
        "CREATE TABLE stolen AS SELECT * FROM orders",
    ],
)
async def test_writes_are_refused_even_for_a_role_that_could_write(
    engine_with_email_masking: ContextEngine, sales_db: dict, database_url: str, statement: str
) -> None:
    eng = engine_with_email_masking
    # the writer role may write: only the read-only transaction and the single statement stop it
    await eng.register_tool(db_tool("writer", sales_db["writer"]))
    await eng.register_tool(db_tool("ro", sales_db["readonly"]))
    for name in ("db_writer", "db_ro"):
        with pytest.raises(ToolExecutionFailed) as caught:
            await eng.execute_tool(name, {"query": statement}, principals=[])
        assert caught.value.status == 502
    assert order_count(sales_db) == 20
    outcomes = table_rows(database_url, "SELECT outcome FROM ce_tool_calls")
    assert [r["outcome"] for r in outcomes] == ["error", "error"]


async def test_a_write_on_the_writer_role_is_refused_by_the_read_only_transaction(
    engine_with_email_masking: ContextEngine, sales_db: dict
) -> None:
    eng = engine_with_email_masking
    await eng.register_tool(db_tool("writer", sales_db["writer"]))
    with pytest.raises(ToolExecutionFailed) as caught:
        await eng.execute_tool("db_writer", {"query": "DELETE FROM orders"}, principals=[])
    assert caught.value.code == "write_refused"
    sentence = "the statement tried to write; db tools run in a read-only transaction"
    assert caught.value.message == f"{sentence} (SQLSTATE 25006)"


async def test_a_long_statement_is_cancelled(engine_with_email_masking: ContextEngine, sales_db: dict) -> None:
    eng = engine_with_email_masking
    await eng.register_tool(db_tool("sales", sales_db["readonly"], statement_timeout_ms=300))
    with pytest.raises(ToolTimeout) as caught:
        await eng.execute_tool("db_sales", {"query": "SELECT pg_sleep(5)"}, principals=[])
    assert caught.value.status == 504 and caught.value.code == "tool_timeout"


async def test_failure_text_is_a_fixed_sentence_masked_identically_everywhere(
    engine_with_email_masking: ContextEngine, sales_db: dict, database_url: str, hook_log: HookLog
) -> None:
    eng = engine_with_email_masking
    await eng.register_tool(db_tool("sales", sales_db["readonly"]))
    statement = "SELECT lookup_fails('alice@example.com')"
    with pytest.raises(ToolExecutionFailed) as caught:
        await eng.execute_tool("db_sales", {"query": statement}, principals=[])
    message = caught.value.message
    # the function's own text quotes its argument (a row value, in general): only its SQLSTATE leaves
    assert message == "the statement failed: raise_exception (SQLSTATE P0001)"
    audit = table_rows(database_url, "SELECT error_message, arguments FROM ce_tool_calls")
    assert audit[0]["error_message"] == message
    assert hook_log.events[-1].error_message == message
    assert "alice" not in json.dumps(audit) and "42" not in message
    assert "[EMAIL]" in audit[0]["arguments"]  # the arguments are audited after redaction too


async def test_when_masking_fails_every_surface_gets_the_withheld_sentence(
    database_url: str, sales_db: dict, hook_log: HookLog
) -> None:
    def fragile(text: str) -> list[tuple[int, int]]:
        if "raise_exception" in text:
            raise RuntimeError("detector broke")
        return []

    policy = RedactionPolicy(rules=[RedactionRule(name="fragile", detector=fragile)])
    config = make_config(database_url, secret_key=SECRET_KEY, redaction=policy)
    async with ContextEngine(config, hooks=Hooks(on_tool_call=hook_log)) as eng:
        await eng.register_tool(db_tool("sales", sales_db["readonly"]))
        with pytest.raises(ToolExecutionFailed) as caught:
            await eng.execute_tool("db_sales", {"query": "SELECT lookup_fails('bob')"}, principals=[])
    assert caught.value.message == WITHHELD
    assert table_rows(database_url, "SELECT error_message FROM ce_tool_calls")[0]["error_message"] == WITHHELD
    assert hook_log.events[-1].error_message == WITHHELD


async def test_an_unreachable_database_names_nothing_of_its_url(
    engine_with_email_masking: ContextEngine, sales_db: dict, database_url: str
) -> None:
    eng = engine_with_email_masking
    head, _, query = sales_db["readonly"].partition("?")
    missing = head.rsplit("/", 1)[0] + "/no_such_database_x" + (f"?{query}" if query else "")
    with pytest.raises(ToolExecutionFailed) as at_registration:
        await eng.register_tool(db_tool("gone", missing))
    # registered while reachable, then the role loses CONNECT: the call cannot reach it either
    await eng.register_tool(db_tool("sales", sales_db["readonly"]))
    name = sales_db["admin"].partition("?")[0].rsplit("/", 1)[1]
    role = sales_db["readonly"].split("://", 1)[1].split(":", 1)[0]
    with psycopg.connect(sales_db["admin"], autocommit=True) as conn:
        conn.execute(f'REVOKE CONNECT ON DATABASE "{name}" FROM PUBLIC, "{role}"')
    with pytest.raises(ToolExecutionFailed) as at_call:
        await eng.execute_tool("db_sales", {"query": "SELECT 1"}, principals=[])
    audit = json.dumps(table_rows(database_url, "SELECT * FROM ce_tool_calls"), default=str)
    for caught in (at_registration, at_call):
        assert caught.value.code == "tool_unavailable"
    for text in (at_registration.value.message, at_call.value.message, audit):
        assert PASSWORD not in text and "no_such_database_x" not in text and name not in text

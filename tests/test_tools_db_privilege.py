"""db tools run as a least-privilege role, checked rather than advised: a real superuser, members
of the server-file roles, a role that can SET ROLE into one, and a role holding privileges on the
engine's ``ce_`` tables are refused at registration and before every statement; a least-privilege
role on the engine's own database (the embedded default's shape) cannot run programs, read server
files or read ``ce_documents``; and a failed statement reaches the caller as its SQLSTATE and a
fixed sentence, never the server's text with a row's value in it."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from context_engine import ContextEngine
from context_engine.tools import ToolConfig, ToolExecutionFailed
from context_engine.tools.errors import ToolRoleRefused
from tests import tools_support
from tests.tools_support import HookLog, create_reader, drop_role, table_rows

# the tests' databases start migrated (a copy of the session's template; see tests/conftest.py)
pytestmark = pytest.mark.migrated()

hook_log = tools_support.hook_log  # a shared fixture
tools_engine = tools_support.tools_engine  # a shared fixture
reader_url = tools_support.reader_url  # a shared fixture

HIDDEN = "hidden-row-text-5be1c0"


def db_tool(url: str, name: str = "sales") -> ToolConfig:
    return ToolConfig(name=name, kind="db", description="sales data", config={"database_url": url})


@pytest.fixture
async def roles(database_url: str, tools_engine: ContextEngine) -> AsyncIterator[list[str]]:
    """Roles a test creates (on a database the engine has migrated), dropped afterwards."""
    await tools_engine.database()
    made: list[str] = []
    yield made
    for role in made:
        drop_role(database_url, role)


@pytest.fixture
def orders(database_url: str) -> None:
    """A user's own table beside the engine's, one of its notes a value no caller may read back."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, note text)")
        conn.execute("INSERT INTO orders VALUES (1, %s), (2, 'plain')", (HIDDEN,))


def reader(database_url: str, roles: list[str], *grants: str) -> str:
    role, url = create_reader(database_url, *grants)
    roles.append(role)
    return url


async def test_a_superuser_is_refused_at_registration_naming_the_role_and_the_remedy(
    tools_engine: ContextEngine, database_url: str
) -> None:
    # the natural configuration: the engine's own URL, a superuser on the embedded default
    with pytest.raises(ToolRoleRefused) as caught:
        await tools_engine.register_tool(db_tool(database_url))
    message = caught.value.message
    assert caught.value.status == 400 and caught.value.code == "tool_role_refused"
    assert "'postgres'" in message and "it is a superuser" in message
    assert "GRANT" not in message and "SELECT on the tables the tool reads" in message
    assert "context-engine tools reader-role" in message
    assert table_rows(database_url, "SELECT count(*) AS n FROM ce_tools") == [{"n": 0}]


@pytest.mark.parametrize(
    "membership", ["pg_execute_server_program", "pg_read_server_files", "pg_write_server_files", "pg_signal_backend"]
)
async def test_a_member_of_a_server_role_is_refused(
    tools_engine: ContextEngine, database_url: str, roles: list[str], membership: str
) -> None:
    url = reader(database_url, roles, f"GRANT {membership} TO {{role}}")
    with pytest.raises(ToolRoleRefused) as caught:
        await tools_engine.register_tool(db_tool(url))
    assert f"it is a member of {membership}" in caught.value.message
    assert repr(roles[0]) in caught.value.message


async def test_privileges_on_the_engines_tables_are_refused_even_behind_set_role(
    tools_engine: ContextEngine, database_url: str, roles: list[str]
) -> None:
    direct = reader(database_url, roles, "GRANT SELECT ON ce_documents TO {role}")
    column = reader(database_url, roles, "GRANT SELECT (id) ON ce_chunks TO {role}")
    holder = f"holder_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{holder}" NOLOGIN')
        conn.execute(f'GRANT SELECT ON ce_tool_calls TO "{holder}"')
    roles.append(holder)
    # NOINHERIT: the role holds nothing until it runs SET ROLE, which one statement can do
    behind = reader(database_url, roles, f'ALTER ROLE {{role}} NOINHERIT; GRANT "{holder}" TO {{role}}')
    found = {}
    for name, url in (("direct", direct), ("column", column), ("behind", behind)):
        with pytest.raises(ToolRoleRefused) as caught:
            await tools_engine.register_tool(db_tool(url))
        found[name] = caught.value.message
    assert "it holds privileges on the engine's tables public.ce_documents" in found["direct"]
    assert "public.ce_chunks" in found["column"]
    assert "public.ce_tool_calls" in found["behind"]


async def test_a_least_privilege_role_registers_and_reads_its_own_table(
    tools_engine: ContextEngine, database_url: str, roles: list[str], orders: None
) -> None:
    url = reader(database_url, roles, "GRANT SELECT ON orders TO {role}")
    await tools_engine.register_tool(db_tool(url))
    out = await tools_engine.execute_tool("db_sales", {"query": "SELECT id FROM orders ORDER BY id"}, principals=[])
    assert out["result"]["rows"] == [{"id": 1}, {"id": 2}]


@pytest.mark.parametrize(
    ("statement", "sqlstate"),
    [
        ("COPY (SELECT current_user) TO PROGRAM 'id > {marker}'", "42501"),
        ("SELECT pg_read_file('/etc/hostname')", "42501"),
        ("SELECT pg_ls_dir('.')", "42501"),
        ("SELECT lo_import('/etc/hostname')", "42501"),
        ("SELECT * FROM ce_documents", "42501"),
        ("SELECT text FROM ce_chunks", "42501"),
        ("SELECT CAST(name AS int) FROM ce_documents", "42501"),
        ("SELECT set_config('role', 'postgres', true), id FROM orders", "42501"),
    ],
)
async def test_the_issues_attacks_fail_on_a_least_privilege_role(
    tools_engine: ContextEngine,
    database_url: str,
    roles: list[str],
    orders: None,
    tmp_path: Path,
    statement: str,
    sqlstate: str,
) -> None:
    marker = tmp_path / "ran"
    url = reader(database_url, roles, "GRANT SELECT ON orders TO {role}")
    await tools_engine.register_tool(db_tool(url))
    with pytest.raises(ToolExecutionFailed) as caught:
        await tools_engine.execute_tool("db_sales", {"query": statement.format(marker=marker)}, principals=[])
    assert caught.value.message == f"the tool's role lacks a privilege the statement needs (SQLSTATE {sqlstate})"
    assert not marker.exists()


async def test_a_cast_error_names_its_sqlstate_never_the_rows_text(
    tools_engine: ContextEngine, database_url: str, roles: list[str], orders: None, hook_log: HookLog
) -> None:
    url = reader(database_url, roles, "GRANT SELECT ON orders TO {role}")
    await tools_engine.register_tool(db_tool(url))
    for statement in ("SELECT CAST(note AS int) FROM orders", "SELECT CAST(note AS jsonb) FROM orders ORDER BY id"):
        with pytest.raises(ToolExecutionFailed) as caught:
            await tools_engine.execute_tool("db_sales", {"query": statement}, principals=[])
        assert caught.value.status == 502 and "SQLSTATE 22P02" in caught.value.message
        assert caught.value.message == "the statement failed: invalid_text_representation (SQLSTATE 22P02)"
    audit = json.dumps(table_rows(database_url, "SELECT * FROM ce_tool_calls"), default=str)
    events = json.dumps([e.__dict__ for e in hook_log.events], default=str)
    assert HIDDEN not in audit and HIDDEN not in events


async def test_a_syntax_error_says_where_in_the_statement_and_nothing_more(
    tools_engine: ContextEngine, database_url: str, roles: list[str], orders: None
) -> None:
    url = reader(database_url, roles, "GRANT SELECT ON orders TO {role}")
    await tools_engine.register_tool(db_tool(url))
    expected = {
        "SELEC note FROM orders": "the statement is not valid SQL, or is more than one statement at character 1",
        "SELECT nope FROM orders": "the statement names a column that does not exist at character 8",
        "SELECT 1; SELECT note FROM orders": "the statement is not valid SQL, or is more than one statement",
    }
    got = {}
    for statement in expected:
        with pytest.raises(ToolExecutionFailed) as caught:
            await tools_engine.execute_tool("db_sales", {"query": statement}, principals=[])
        got[statement] = caught.value.message.rsplit(" (SQLSTATE", 1)[0]
    assert got == expected


async def test_a_grant_after_registration_refuses_every_later_call_before_it_runs(
    tools_engine: ContextEngine, database_url: str, roles: list[str], tmp_path: Path
) -> None:
    url = reader(database_url, roles)
    await tools_engine.register_tool(db_tool(url))
    assert (await tools_engine.execute_tool("db_sales", {"query": "SELECT 1 AS one"}, principals=[]))["result"][
        "rows"
    ] == [{"one": 1}]
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'GRANT pg_execute_server_program TO "{roles[0]}"')
        conn.execute(f'GRANT SELECT ON ce_tools TO "{roles[0]}"')
    marker = tmp_path / "ran"
    for statement in (f"COPY (SELECT 1) TO PROGRAM 'touch {marker}'", "SELECT config FROM ce_tools"):
        with pytest.raises(ToolRoleRefused) as caught:
            await tools_engine.execute_tool("db_sales", {"query": statement}, principals=[])
        assert caught.value.status == 502 and caught.value.code == "tool_role_refused"
        assert "pg_execute_server_program" in caught.value.message and "public.ce_tools" in caught.value.message
    assert not marker.exists()
    audit = table_rows(database_url, "SELECT outcome, error_code, result FROM ce_tool_calls ORDER BY started_at")
    assert [(a["outcome"], a["error_code"], a["result"]) for a in audit[1:]] == [
        ("refused", "tool_role_refused", None),
        ("refused", "tool_role_refused", None),
    ]


async def test_an_unreachable_database_cannot_be_registered(tools_engine: ContextEngine, reader_url: str) -> None:
    missing = reader_url.partition("?")[0].rsplit("/", 1)[0] + "/no_such_database_q"
    missing += "?" + reader_url.partition("?")[2] if "?" in reader_url else ""
    with pytest.raises(ToolExecutionFailed) as caught:
        await tools_engine.register_tool(db_tool(missing))
    assert caught.value.code == "tool_unavailable" and "no_such_database_q" not in caught.value.message

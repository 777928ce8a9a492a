"""``context-engine tools reader-role``: on a user's Postgres and on the embedded default it creates a
role that passes the db tools' least-privilege check, reads the user's tables and none of the
engine's; ``--print`` only prints; a role that exists, a ``ce_`` table asked for by name, or a
server where PUBLIC holds a ``ce_`` privilege is refused with nothing committed."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from context_engine import ContextEngine
from context_engine.cli.tools import add_parser, run
from context_engine.storage import embedded
from context_engine.tools import ToolConfig, ToolExecutionFailed
from tests.conftest import make_config, server_dir
from tests.tools_support import SECRET_KEY, drop_role

URL_LINE = "database_url for the db tool's config: "


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="context-engine")
    add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(list(argv))


def role_name() -> str:
    return f"tool_reader_{uuid.uuid4().hex[:8]}"


def role_exists(url: str, name: str) -> bool:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone() is not None


@pytest.fixture
def user_db(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The engine's migrated database with a user's own table beside it; roles made are dropped."""

    async def migrate() -> None:
        async with ContextEngine(make_config(database_url)) as eng:
            await eng.database()

    asyncio.run(migrate())
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, total numeric)")
        conn.execute("CREATE TABLE refunds (id int PRIMARY KEY)")
        conn.execute("INSERT INTO orders VALUES (1, 9.5), (2, 3)")
    monkeypatch.setenv("CE_SECRET_KEY", SECRET_KEY)
    made: list[str] = []
    yield {"url": database_url, "roles": made}
    for name in made:
        if role_exists(database_url, name):
            drop_role(database_url, name)


def created_url(out: str) -> str:
    lines = [line for line in out.splitlines() if line.startswith(URL_LINE)]
    assert len(lines) == 1, out
    return lines[0].removeprefix(URL_LINE)


async def read_through_a_db_tool(engine_url: str, tool_url: str) -> tuple[Any, list[str]]:
    refused: list[str] = []
    async with ContextEngine(make_config(engine_url, secret_key=SECRET_KEY)) as eng:
        await eng.register_tool(ToolConfig(name="sales", kind="db", config={"database_url": tool_url}))
        out = await eng.execute_tool("db_sales", {"query": "SELECT id, total FROM orders ORDER BY id"}, principals=[])
        for attack in ("SELECT * FROM ce_documents", "COPY (SELECT 1) TO PROGRAM 'true'", "DELETE FROM orders"):
            try:
                await eng.execute_tool("db_sales", {"query": attack}, principals=[])
            except ToolExecutionFailed as exc:
                refused.append(exc.code)
    return out["result"]["rows"], refused


def test_on_a_users_postgres_the_role_reads_its_tables_and_nothing_of_the_engine(
    user_db: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = role_name()
    user_db["roles"].append(name)
    assert run(parse("tools", "reader-role", name, "--database-url", user_db["url"])) == 0
    out = capsys.readouterr().out
    assert "public.orders, public.refunds" in out and "ce_" not in out.split(URL_LINE)[0]
    tool_url = created_url(out)
    # the operator's next step, as the README shows it: the URL goes into the tool's config file
    config = tmp_path / "sales.json"
    config.write_text(json.dumps({"database_url": tool_url}))
    add = parse(
        "tools", "add", "orders", "--kind", "db", "--config-file", str(config), "--database-url", user_db["url"]
    )
    assert run(add) == 0
    rows, refused = asyncio.run(read_through_a_db_tool(user_db["url"], tool_url))
    assert rows == [{"id": 1, "total": 9.5}, {"id": 2, "total": 3}]
    assert refused == ["tool_failed", "tool_failed", "write_refused"]
    with psycopg.connect(user_db["url"]) as conn:
        attributes = conn.execute(
            "SELECT rolsuper, rolcreaterole, rolcreatedb, rolconfig FROM pg_roles WHERE rolname = %s", (name,)
        ).fetchone()
    assert attributes == (False, False, False, ["default_transaction_read_only=on"])


def test_print_only_prints_and_a_table_list_narrows_the_grant(
    user_db: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    name = role_name()
    user_db["roles"].append(name)
    code = run(parse("tools", "reader-role", name, "--database-url", user_db["url"], "--table", "orders", "--print"))
    printed = capsys.readouterr().out
    assert code == 0 and not role_exists(user_db["url"], name)
    assert f'CREATE ROLE "{name}" LOGIN PASSWORD' in printed
    assert f'GRANT SELECT ON "public"."orders" TO "{name}";' in printed and "refunds" not in printed


def test_refusals_commit_nothing(user_db: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    url, name = user_db["url"], role_name()
    user_db["roles"].append(name)
    assert run(parse("tools", "reader-role", name, "--database-url", url, "--table", "ce_documents")) == 1
    assert "engine's tables" in capsys.readouterr().err and not role_exists(url, name)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("GRANT SELECT ON ce_tool_calls TO PUBLIC")
    try:
        assert run(parse("tools", "reader-role", name, "--database-url", url)) == 1
        err = capsys.readouterr().err
        assert "tool_role_refused" in err and "public.ce_tool_calls" in err and not role_exists(url, name)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("REVOKE SELECT ON ce_tool_calls FROM PUBLIC")
    assert run(parse("tools", "reader-role", name, "--database-url", url)) == 0
    capsys.readouterr()
    assert run(parse("tools", "reader-role", name, "--database-url", url)) == 1
    assert "already exists" in capsys.readouterr().err


def test_on_the_embedded_default(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    base = server_dir()
    monkeypatch.setenv("CE_STORAGE__DATA_DIR", str(base))
    monkeypatch.delenv("CE_DATABASE_URL", raising=False)
    monkeypatch.setenv("CE_SECRET_KEY", SECRET_KEY)
    pgdata, engine_url = embedded.acquire(base)  # held by the test too, so it outlives the command
    try:
        name = role_name()
        assert run(parse("tools", "reader-role", name)) == 0
        tool_url = created_url(capsys.readouterr().out)
        assert tool_url.split("://", 1)[1].startswith(f"{name}:")
        with psycopg.connect(engine_url, autocommit=True) as conn:
            conn.execute("CREATE TABLE orders (id int PRIMARY KEY, total numeric)")
            conn.execute("INSERT INTO orders VALUES (1, 9.5), (2, 3)")
            conn.execute(f'GRANT SELECT ON orders TO "{name}"')
        rows, refused = asyncio.run(read_through_a_db_tool(engine_url, tool_url))
        assert rows == [{"id": 1, "total": 9.5}, {"id": 2, "total": 3}]
        assert refused == ["tool_failed", "tool_failed", "write_refused"]
    finally:
        embedded.release(pgdata)
        embedded.remove(base)
    assert not os.path.exists(pgdata)

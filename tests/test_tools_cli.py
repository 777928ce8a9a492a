"""``context-engine tools add|list|delete``: the config comes from a file and is stored encrypted;
nothing secret is printed; bad input is a one-line error and a non-zero exit."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from context_engine import ContextEngine
from context_engine.cli.tools import add_parser, run
from tests.conftest import make_config
from tests.tools_support import SECRET_KEY, table_rows

TOKEN = "tok-cli-9a8b7c6d5e"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="context-engine")
    add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(list(argv))


@pytest.fixture
def migrated(database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A migrated database, with CE_SECRET_KEY set as an operator would."""
    import asyncio

    async def prepare() -> None:
        async with ContextEngine(make_config(database_url)) as eng:
            await eng.stats(principals=[])

    asyncio.run(prepare())
    monkeypatch.setenv("CE_SECRET_KEY", SECRET_KEY)
    return database_url


def test_add_list_delete(migrated: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "weather.json"
    config.write_text(json.dumps({"url": "https://api.example.com/w", "headers": {"Authorization": TOKEN}}))
    code = run(
        parse(
            "tools",
            "add",
            "weather",
            "--kind",
            "http",
            "--config-file",
            str(config),
            "--acl",
            "group:a, group:b",
            "--description",
            "Weather now",
            "--requires-approval",
            "--database-url",
            migrated,
        )
    )
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("registered http_weather (tool_id ")
    tool_id = out.split("tool_id ")[1].rstrip(")\n")
    stored = table_rows(migrated, "SELECT * FROM ce_tools")
    assert len(stored) == 1 and TOKEN.encode() not in bytes(stored[0]["config"])
    assert stored[0]["acl"] == ["group:a", "group:b"] and stored[0]["requires_approval"] is True

    assert run(parse("tools", "list", "--database-url", migrated)) == 0
    table = capsys.readouterr().out
    assert "http_weather" in table and tool_id in table and "group:a,group:b" in table and TOKEN not in table
    assert run(parse("tools", "list", "--json", "--database-url", migrated)) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed[0]["tool_id"] == tool_id and TOKEN not in json.dumps(listed)

    assert run(parse("tools", "delete", tool_id, "--database-url", migrated)) == 0
    assert table_rows(migrated, "SELECT count(*) AS n FROM ce_tools")[0]["n"] == 0
    assert run(parse("tools", "delete", tool_id, "--database-url", migrated)) == 1
    assert "tool_not_found" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "one JSON object"),
        (json.dumps({"url": "ftp://x", "headers": {"Authorization": TOKEN}}), "invalid_tool_config"),
    ],
)
def test_bad_config_files_are_refused_without_echoing_them(
    migrated: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, expected: str
) -> None:
    config = tmp_path / "bad.json"
    config.write_text(content)
    code = run(parse("tools", "add", "bad", "--kind", "http", "--config-file", str(config), "--database-url", migrated))
    err = capsys.readouterr().err
    assert code == 1 and expected in err and TOKEN not in err
    assert table_rows(migrated, "SELECT count(*) AS n FROM ce_tools")[0]["n"] == 0


def test_missing_file_and_missing_secret_key(
    migrated: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(parse("tools", "add", "x", "--kind", "http", "--config-file", str(tmp_path / "none.json"))) == 1
    assert "could not read the config file" in capsys.readouterr().err
    monkeypatch.delenv("CE_SECRET_KEY")
    config = tmp_path / "ok.json"
    config.write_text(json.dumps({"url": "https://api.example.com/w"}))
    code = run(parse("tools", "add", "x", "--kind", "http", "--config-file", str(config), "--database-url", migrated))
    assert code == 1 and "secret_key_required" in capsys.readouterr().err

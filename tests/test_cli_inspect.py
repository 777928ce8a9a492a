"""``context-engine search``, ``stats`` and ``get``: what a caller sees, from the shell.

They read as ``--principals``, ``--trusted`` or anonymous, like the routes, so a document behind
an ACL is absent for a caller who does not hold it: no hit, not counted, ``get`` says not found.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from context_engine.cli import main

HR = "Parental leave lasts sixteen weeks at full pay."
PUBLIC = "The canteen serves lunch from noon until two."


@pytest.fixture
def ingested(tmp_path: Path, database_url: str) -> str:
    (tmp_path / "hr").mkdir()
    (tmp_path / "hr" / "leave.md").write_text(HR)
    (tmp_path / "canteen.md").write_text(PUBLIC)
    assert main(["migrate", "--database-url", database_url]) == 0
    assert main(["ingest", str(tmp_path / "hr"), "--acl", "group:hr", "--database-url", database_url]) == 0
    assert main(["ingest", str(tmp_path / "canteen.md"), "--database-url", database_url]) == 0
    return database_url


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, object]:
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_search_reads_as_the_caller_the_flags_name(ingested: str, capsys: pytest.CaptureFixture[str]) -> None:
    url = ["--database-url", ingested]
    as_hr = _json(capsys, ["search", "parental leave weeks", "--principals", "group:hr", *url])
    names = [hit["document_name"] for hit in as_hr["hits"]]  # type: ignore[index, union-attr]
    assert names and names[0] == "leave.md"
    anonymous = _json(capsys, ["search", "parental leave weeks", *url])
    assert "leave.md" not in [hit["document_name"] for hit in anonymous["hits"]]  # type: ignore[index, union-attr]

    capsys.readouterr()
    assert main(["search", "parental leave weeks", "--trusted", *url]) == 0
    text = capsys.readouterr().out
    assert text.startswith(" 1. ") and "leave.md" in text and "sixteen weeks" in text


def test_stats_counts_only_what_the_caller_may_see(ingested: str, capsys: pytest.CaptureFixture[str]) -> None:
    url = ["--database-url", ingested]
    assert _json(capsys, ["stats", "--trusted", *url])["documents"] == 2
    assert _json(capsys, ["stats", "--principals", "group:hr", *url])["documents"] == 2
    assert _json(capsys, ["stats", *url])["documents"] == 1  # anonymous: the public one only
    capsys.readouterr()
    assert main(["stats", "--trusted", *url]) == 0
    assert capsys.readouterr().out.startswith("documents 2, chunks ")


def test_get_prints_a_visible_document_and_refuses_a_hidden_one_as_not_found(
    ingested: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ["--database-url", ingested]
    hit = _json(capsys, ["search", "parental leave", "--trusted", *url])["hits"][0]  # type: ignore[index]
    doc_id = hit["document_id"]  # type: ignore[index]
    document = _json(capsys, ["get", doc_id, "--principals", "group:hr", *url])
    assert document["name"] == "leave.md" and document["text"] == HR
    capsys.readouterr()
    assert main(["get", doc_id, "--principals", "group:hr", "--no-text", *url]) == 0
    assert HR not in capsys.readouterr().out
    capsys.readouterr()
    assert main(["get", doc_id, *url]) == 1  # anonymous may not see it: the same answer as a missing id
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and HR not in err


def test_principals_and_trusted_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["stats", "--trusted", "--principals", "group:hr"])
    assert caught.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err

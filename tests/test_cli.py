"""The command line's ingest (document names, progress) and the dev server's docs pages."""

from __future__ import annotations

import asyncio
import io
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient

from context_engine import TRUSTED, ContextEngine
from context_engine.cli import main
from context_engine.cli.progress import ProgressDisplay
from context_engine.cli.serve import build_app
from context_engine.hooks import Hooks
from context_engine.storage import embedded
from tests.conftest import copy_data_directory, make_config, server_dir
from tests.pg_state import assert_nothing_running
from tests.waiting import HANG_GUARD

ROOT = Path(__file__).resolve().parent.parent

PARAGRAPHS = "\n\n".join(
    f"Section {i}. The harbour crane number {i} lifts containers from the ships onto waiting trucks every morning."
    for i in range(12)
)


def document_names(database_url: str) -> list[str]:
    async def names() -> list[str]:
        async with ContextEngine(make_config(database_url)) as engine:
            page = await engine.list_documents(principals=TRUSTED, limit=500)
        return sorted(doc.name for doc in page.documents)

    return asyncio.run(names())


@pytest.fixture(autouse=True)
def auto_migrate(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line reads ``CE_*`` settings: let it create the schema in each test's new database."""
    monkeypatch.setenv("CE_STORAGE__AUTO_MIGRATE", "true")


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Short chunks and two per embedding batch, so one small file takes several batches."""
    monkeypatch.setenv("CE_INGEST__CHUNK_TOKENS", "32")
    monkeypatch.setenv("CE_EMBEDDING__MAX_BATCH_ITEMS", "2")


def make_folder(parent: Path) -> Path:
    folder = parent / "dir"
    (folder / "sub").mkdir(parents=True)
    (folder / "notes.csv").write_text("city,country\nOslo,Norway\nLima,Peru\n")
    (folder / "sub" / "cranes.md").write_text(PARAGRAPHS)
    return folder


def test_ingest_names_documents_relative_to_the_folder_however_it_is_typed(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = make_folder(tmp_path)
    assert main(["ingest", str(folder.resolve()), "--database-url", database_url]) == 0
    assert "2 completed" in capsys.readouterr().out
    monkeypatch.chdir(tmp_path)
    assert main(["ingest", "dir", "--database-url", database_url]) == 0
    assert "0 completed, 2 skipped" in capsys.readouterr().out  # the same two documents, unchanged
    monkeypatch.chdir(folder)
    assert main(["ingest", "notes.csv", "--database-url", database_url]) == 0
    assert "1 skipped" in capsys.readouterr().out
    assert document_names(database_url) == ["notes.csv", "sub/cranes.md"]


def test_ingest_refuses_two_files_that_would_share_a_name(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
        (tmp_path / side / "notes.md").write_text(f"notes from {side}")
    code = main(["ingest", str(tmp_path / "a" / "notes.md"), str(tmp_path / "b"), "--database-url", database_url])
    assert code == 1
    err = capsys.readouterr().err
    assert "would both be named 'notes.md'" in err
    assert "Traceback" not in err
    assert document_names(database_url) == []


def test_ingest_progress_is_one_plain_line_per_event_when_not_on_a_terminal(
    database_url: str, tmp_path: Path, small_batches: None, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = make_folder(tmp_path)
    assert not sys.stderr.isatty()
    assert main(["ingest", str(folder), "--database-url", database_url]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()
    embedded = [line for line in lines if line.startswith("[2/2 files] sub/cranes.md: embedded")]
    steps = [tuple(map(int, re.search(r"embedded (\d+)/(\d+)", line).groups())) for line in embedded]  # type: ignore[union-attr]
    total = steps[-1][1]
    assert total > 4  # several batches inside this one file
    assert [done for done, _ in steps] == sorted({done for done, _ in steps})  # moving up, no line repeated
    assert len(steps) > 2
    assert steps[-1] == (total, total)
    assert "[1/2 files] notes.csv: completed" in lines
    assert "[2/2 files] sub/cranes.md: completed" in lines


async def test_the_terminal_bar_moves_inside_one_file(database_url: str) -> None:
    screen = io.StringIO()
    display = ProgressDisplay(screen, 1, interactive=True)
    config = make_config(database_url, ingest={"chunk_tokens": 32}, embedding={"max_batch_items": 2})
    async with ContextEngine(config, hooks=Hooks(on_progress=display.on_progress)) as engine:
        display.start_file(0, "cranes.md")
        report = await engine.ingest(text=PARAGRAPHS, name="cranes.md")
        display.finish_file(report.documents[0].status)
    display.close()
    frames = screen.getvalue().split("\r")[1:]
    fills = [frame.split("]")[0].count("#") for frame in frames]
    embedding = [fill for frame, fill in zip(frames, fills, strict=True) if "embedded" in frame]
    assert len(set(embedding)) > 2  # the bar advanced several times while this one file was embedded
    assert fills == sorted(fills)
    assert frames[-1].rstrip().endswith("cranes.md: completed")
    assert screen.getvalue().endswith("\n")


# ------------------------------------------------------------------------------------------- docs
EXTERNAL = re.compile(r"""(?:https?:)?//[^/'"\s]""")


def local_reference(url: str) -> bool:
    parts = urlsplit(url)
    return not parts.scheme and not parts.netloc


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_docs_pages_load_every_asset_from_the_server_itself(database_url: str, page: str) -> None:
    with TestClient(build_app(make_config(database_url))) as client:
        response = client.get(page)
        assert response.status_code == 200
        html = response.text
        assert EXTERNAL.search(html) is None, EXTERNAL.search(html)
        assets = re.findall(r"""(?:src|href)="([^"]+)\"""", html)
        assert assets
        for asset in assets:
            assert local_reference(asset), asset
            fetched = client.get(asset)
            assert fetched.status_code == 200, asset
            assert fetched.content
        assert client.get("/openapi.json").json()["info"]["title"] == "context-engine"


def test_without_the_docs_extra_the_pages_say_so_and_the_schema_stays(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "fastapi_offline", None)  # as if the extra were not installed
    with TestClient(build_app(make_config(database_url))) as client:
        for page in ("/docs", "/redoc"):
            response = client.get(page)
            assert response.status_code == 404
            assert "pg-context-engine[docs]" in response.text
            assert EXTERNAL.search(response.text) is None
        assert client.get("/openapi.json").status_code == 200


# ------------------------------------------------------------------------------------ stopping
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_stopped_ingest_closes_the_engine_and_stops_the_embedded_server(
    tmp_path: Path, migrated_pgdata: Path, signum: int
) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(30):
        (folder / f"note-{i}.md").write_text(PARAGRAPHS.replace("harbour", f"harbour {i}"))
    base = server_dir()
    copy_data_directory(migrated_pgdata, base)  # what a second run finds: initialised and migrated
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "CE_STORAGE__DATA_DIR": str(base),
        "CE_INGEST__CHUNK_TOKENS": "32",
        "CE_EMBEDDING__MAX_BATCH_ITEMS": "2",
    }
    env.pop("CE_DATABASE_URL", None)
    command = [sys.executable, "-m", "context_engine.cli", "ingest", str(folder)]
    run = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pgdata = base / "pgdata"
    try:
        assert run.stderr is not None
        first = run.stderr.readline()  # the first progress line: the server is up, the first file under way
        assert first.startswith("[1/30 files]"), first + run.communicate(timeout=HANG_GUARD)[1]
        assert embedded.holders(pgdata) == [run.pid]
        run.send_signal(signum)
        _out, err = run.communicate(timeout=HANG_GUARD)
        assert run.returncode == 130, err
        assert "Traceback" not in err, err
        assert_nothing_running(pgdata)
        assert embedded.holders(pgdata) == []
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        embedded.remove(base)

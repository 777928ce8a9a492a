"""``run_eval``'s throwaway server never outlives its deleted data directory, even when the run is cancelled."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from context_engine.config import ContextEngineConfig
from context_engine.evaluation import run_eval
from tests.conftest import server_dir
from tests.test_eval import write_dataset
from tests.waiting import until


def postgres_under(root: Path) -> list[int]:
    """Pids of PostgreSQL servers whose data directory lies under ``root``."""
    return [
        p.pid
        for p in psutil.process_iter(["name", "cmdline"])
        if p.info["name"] == "postgres" and any(str(root) in part for part in p.info["cmdline"] or [])
    ]


def wait_for_start(root: Path) -> None:
    """Return once a throwaway embedded server is being set up under ``root``."""
    until(lambda: list(root.glob("ce-eval-*/pgdata")), "the throwaway server's setup to begin")


@pytest.fixture
def temp_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Where ``tempfile`` puts the throwaway folder, so the test can see it (and what runs in it)."""
    root = server_dir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    try:
        yield root
    finally:
        for pid in postgres_under(root):  # never leave a leaked server behind a failed assertion
            psutil.Process(pid).kill()
        shutil.rmtree(root, ignore_errors=True)


def test_a_run_cancelled_while_its_server_starts_leaves_nothing_running(tmp_path: Path, temp_root: Path) -> None:
    data = write_dataset(tmp_path / "tiny")

    async def cancel_during_start() -> None:
        task = asyncio.create_task(run_eval(data, config=ContextEngineConfig()))
        await asyncio.to_thread(wait_for_start, temp_root)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    # asyncio.run returns only once its worker threads are done: the start the cancel left behind
    asyncio.run(cancel_during_start())
    assert postgres_under(temp_root) == []
    assert list(temp_root.glob("ce-eval-*")) == []


def test_a_completed_run_stops_its_server_and_deletes_its_folder(tmp_path: Path, temp_root: Path) -> None:
    report = asyncio.run(run_eval(write_dataset(tmp_path / "tiny"), config=ContextEngineConfig(), baselines=()))
    assert report.queries == 4
    assert postgres_under(temp_root) == []
    assert list(temp_root.glob("ce-eval-*")) == []

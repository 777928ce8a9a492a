"""The embedded server outlives no host: each way a host ends leaves nothing, or a server the next start adopts.

Real subprocesses acquire a real embedded server in a directory of their own (a copy of a data
directory initialised once for the session; one test starts in an empty one) and are ended with
each signal; what is left is read from the process table, ``postmaster.pid`` and ``pg_ctl status``.
A host that cannot clean up (SIGKILL, an unhandled SIGTERM) leaves the server to the directory's
reaper, which stops it; with the reaper gone too, the next start adopts the server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest

from context_engine import ContextEngine, ContextEngineConfig
from context_engine.errors import ContextEngineError
from context_engine.principals import TRUSTED
from context_engine.storage import embedded, embedded_supervisor
from context_engine.storage.embedded_holders import START_TOLERANCE_SECONDS
from context_engine.storage.embedded_supervisor import RESTART_ATTEMPTS
from tests.conftest import copy_data_directory, server_dir
from tests.pg_state import (
    assert_nothing_running,
    pg_ctl_status,
    postgres_processes,
    reaper_processes,
    wait_for,
)
from tests.waiting import HANG_GUARD

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def fresh_base() -> Iterator[Path]:
    """An empty directory: the host's start runs initdb."""
    path = server_dir()
    try:
        yield path
    finally:
        embedded.remove(path)  # whatever a failed test left running is stopped with its directory


@pytest.fixture
def base(fresh_base: Path, stopped_pgdata: Path) -> Path:
    """A directory holding a copy of a stopped server's data directory: the start skips initdb."""
    copy_data_directory(stopped_pgdata, fresh_base)
    return fresh_base


def start_host(base: Path) -> subprocess.Popen[str]:
    """A host process that has acquired the server in ``base`` (it waits for a line on stdin)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    host = subprocess.Popen(
        [sys.executable, "-m", "tests.hosts.embedded_host", str(base)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert host.stdout is not None
    line = host.stdout.readline()
    assert line.strip() == "ready", host.communicate(timeout=30)[1]
    return host


def test_a_host_that_exits_normally_stops_the_server(fresh_base: Path) -> None:
    base = fresh_base  # the first start in an empty directory, by a host of its own
    host = start_host(base)
    pgdata = base / "pgdata"
    assert len(postgres_processes(pgdata)) == 1
    assert pg_ctl_status(pgdata) == 0
    _out, err = host.communicate("\n", timeout=HANG_GUARD)
    assert host.returncode == 0, err
    assert_nothing_running(pgdata)
    assert embedded.holders(pgdata) == []


def stopped_and_unlisted(pgdata: Path) -> bool:
    nothing = not postgres_processes(pgdata) and embedded.running_postmaster(pgdata) is None
    return nothing and not embedded.holders(pgdata)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_a_host_ended_by_a_signal_leaves_nothing_running(base: Path, signum: int) -> None:
    """SIGINT: the host releases on its way out; SIGTERM (no handler) and SIGKILL: the reaper stops the server."""
    pgdata = base / "pgdata"
    host = start_host(base)
    assert len(reaper_processes(base)) == 1
    host.send_signal(signum)
    host.communicate(timeout=HANG_GUARD)
    assert host.returncode != 0

    assert wait_for(lambda: stopped_and_unlisted(pgdata)), (postgres_processes(pgdata), embedded.holders(pgdata))
    assert_nothing_running(pgdata)
    assert wait_for(lambda: not reaper_processes(base))  # its work done, the reaper ends too
    # the next holder starts the server again, and releasing last, stops it
    pgdata_again, _url = embedded.acquire(base)
    try:
        assert pgdata_again == pgdata
        assert embedded.holders(pgdata) == [os.getpid()]
        assert len(postgres_processes(pgdata)) == 1
    finally:
        embedded.release(pgdata)
    assert_nothing_running(pgdata)
    assert embedded.holders(pgdata) == []


def test_with_its_reaper_gone_a_killed_hosts_server_is_adopted_by_the_next_start(base: Path) -> None:
    pgdata = base / "pgdata"
    host = start_host(base)
    [reaper] = reaper_processes(base)
    psutil.Process(reaper).kill()
    host.send_signal(signal.SIGKILL)
    host.wait(timeout=60)
    assert wait_for(lambda: not reaper_processes(base))
    left = postgres_processes(pgdata)
    assert len(left) == 1  # nobody stopped it
    assert embedded.holders(pgdata) == [host.pid]
    # the next holder prunes the dead pid, joins the same server and, releasing last, stops it
    embedded.acquire(base)
    try:
        assert embedded.holders(pgdata) == [os.getpid()]
        assert postgres_processes(pgdata) == left
    finally:
        embedded.release(pgdata)
    assert_nothing_running(pgdata)
    assert embedded.holders(pgdata) == []


def test_a_pid_reused_by_another_process_is_not_a_holder(base: Path) -> None:
    pgdata = base / "pgdata"
    host = start_host(base)
    starts = json.loads((pgdata / embedded.STARTS_FILE).read_text())
    host.send_signal(signal.SIGKILL)
    host.wait(timeout=30)
    # a reused pid belongs to a process started after the holder was recorded, by more than twice the
    # tolerance a start time is allowed to differ by: a host that came up quickly is not yet that far behind
    assert wait_for(lambda: time.time() > starts[str(host.pid)] + 2 * START_TOLERANCE_SECONDS)
    # an unrelated process that happens to have the dead holder's pid: one started now stands in
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (pgdata / embedded.HANDLES_FILE).write_text(json.dumps([stand_in.pid]))
        (pgdata / embedded.STARTS_FILE).write_text(json.dumps({str(stand_in.pid): starts[str(host.pid)]}))
        assert psutil.pid_exists(stand_in.pid)
        embedded.acquire(base)
        assert embedded.holders(pgdata) == [os.getpid()]
        embedded.release(pgdata)
        assert_nothing_running(pgdata)
    finally:
        stand_in.kill()
        stand_in.wait()


def test_a_live_holder_keeps_the_server_running(base: Path) -> None:
    pgdata = base / "pgdata"
    host = start_host(base)
    try:
        embedded.acquire(base)
        assert sorted(embedded.holders(pgdata)) == sorted([host.pid, os.getpid()])
        embedded.release(pgdata)
        assert len(postgres_processes(pgdata)) == 1  # the host still holds it
        # this process joins again: the wheel's cached handle must list it again and see the server
        embedded.acquire(base)
        assert sorted(embedded.holders(pgdata)) == sorted([host.pid, os.getpid()])
        host.communicate("\n", timeout=HANG_GUARD)
        assert len(postgres_processes(pgdata)) == 1  # now this process holds it
    finally:
        embedded.release(pgdata)
        if host.poll() is None:
            host.kill()
            host.wait()
    assert_nothing_running(pgdata)


def test_remove_stops_the_server_before_deleting_its_directory(base: Path) -> None:
    pgdata = base / "pgdata"
    host = start_host(base)
    try:
        assert len(postgres_processes(pgdata)) == 1
        embedded.remove(base)  # a throwaway server is stopped even though a live process holds it
        assert postgres_processes(pgdata) == []
        assert not base.exists()
    finally:
        host.kill()
        host.wait()
        shutil.rmtree(base, ignore_errors=True)


def test_a_pid_file_naming_a_reused_pid_does_not_pass_for_a_running_server(base: Path) -> None:
    """Host and server killed together (a container restart); the server's pid now belongs to someone else."""
    pgdata = base / "pgdata"
    host = start_host(base)
    [postmaster] = postgres_processes(pgdata)
    lines = (pgdata / "postmaster.pid").read_text().splitlines()
    server = psutil.Process(postmaster)
    host.send_signal(signal.SIGKILL)
    server.kill()  # the reaper may not have been quicker: killed together
    host.wait(timeout=30)
    server.wait(30)
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (pgdata / "postmaster.pid").write_text("\n".join([str(stand_in.pid), *lines[1:]]) + "\n")
        _, url = embedded.acquire(base)
        try:
            with psycopg.connect(url) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
            assert len(postgres_processes(pgdata)) == 1
        finally:
            embedded.release(pgdata)
        assert_nothing_running(pgdata)
        assert stand_in.poll() is None  # the stand-in was left alone
    finally:
        stand_in.kill()
        stand_in.wait()


# ------------------------------------------------------------------------------ a killed postmaster
def kill_postmaster(pgdata: Path) -> int:
    """``kill -9`` of the running postmaster; its pid, once it is gone."""
    postmaster = embedded.running_postmaster(pgdata)
    assert postmaster is not None
    postmaster.kill()
    postmaster.wait(60)
    return postmaster.pid


def embedded_config(base: Path) -> ContextEngineConfig:
    return ContextEngineConfig(storage={"data_dir": str(base), "auto_migrate": True})  # type: ignore[arg-type]


def test_a_killed_postmaster_is_restarted_and_the_engine_answers_again(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pgdata = base / "pgdata"

    async def scenario() -> tuple[Counter[str], int, int]:
        async with ContextEngine(embedded_config(base)) as engine:
            stored = await engine.ingest(text="Leave policy: 25 days a year.", name="leave.md")
            [document] = stored.documents
            killed = kill_postmaster(pgdata)
            failures: Counter[str] = Counter()
            deadline = time.monotonic() + 120
            while True:  # the same engine, in the same process, until a read succeeds again
                try:
                    found = await engine.get_document(document.document_id, principals=TRUSTED)
                    break
                except ContextEngineError as exc:
                    failures[exc.code] += 1
                    assert time.monotonic() < deadline, failures
                    await asyncio.sleep(0.1)
            assert found.text == "Leave policy: 25 days a year."  # committed work survived the crash
            again = await engine.ingest(text="Runbook: promote the replica.", name="runbook.md")
            assert again.documents[0].status == "completed"
            restarted = embedded.running_postmaster(pgdata)
            assert restarted is not None
            return failures, killed, restarted.pid

    with caplog.at_level(logging.WARNING, logger="context_engine.storage.embedded"):
        failures, killed, restarted = asyncio.run(scenario())
    assert restarted != killed
    assert set(failures) <= {"storage_unavailable"}, failures  # never a driver error or a 500
    messages = [r.getMessage() for r in caplog.records if r.name == "context_engine.storage.embedded"]
    assert any("died" in m for m in messages), messages
    assert any("running again" in m for m in messages), messages
    # closing the engine released the server: nothing left running, no holder listed
    assert_nothing_running(pgdata)
    assert embedded.holders(pgdata) == []


def test_two_holders_of_a_killed_server_bring_back_exactly_one(base: Path) -> None:
    pgdata = base / "pgdata"
    host = start_host(base)
    try:
        _, url = embedded.acquire(base)
        try:
            killed = kill_postmaster(pgdata)

            def answers() -> bool:
                try:
                    with psycopg.connect(url, connect_timeout=10) as conn:
                        return conn.execute("SELECT 1").fetchone() == (1,)
                except psycopg.OperationalError:
                    return False

            assert wait_for(answers)
            [postmaster] = postgres_processes(pgdata)
            assert postmaster != killed
            assert sorted(embedded.holders(pgdata)) == sorted([host.pid, os.getpid()])
            host.communicate("\n", timeout=60)
            assert host.returncode == 0
            assert postgres_processes(pgdata) == [postmaster]  # this process still holds it
        finally:
            embedded.release(pgdata)
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
    assert_nothing_running(pgdata)


def test_a_server_that_cannot_start_again_is_given_up_after_bounded_attempts(
    base: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the pauses between attempts (0.5 s doubling to 8 s, 15.5 s in all) are not what this test
    # checks: the count of attempts and the giving up are; shorter pauses keep it off the suite's tail
    monkeypatch.setattr(embedded_supervisor, "FIRST_PAUSE_SECONDS", 0.05)
    monkeypatch.setattr(embedded_supervisor, "MAX_PAUSE_SECONDS", 0.2)
    pgdata = base / "pgdata"
    embedded.acquire(base)
    try:
        watcher = embedded.supervisor(pgdata)
        assert watcher is not None
        conf = pgdata / "postgresql.conf"
        good = conf.read_text()
        conf.write_text(good + "this line is no setting\n")  # read at the next start, which it then refuses
        with caplog.at_level(logging.WARNING, logger="context_engine.storage.embedded"):
            kill_postmaster(pgdata)
            assert wait_for(lambda: watcher.gave_up, seconds=300)
        conf.write_text(good)
    finally:
        embedded.release(pgdata)
    failed = [r for r in caplog.records if "failed (attempt" in r.getMessage()]
    assert len(failed) == RESTART_ATTEMPTS
    assert [r.levelno for r in caplog.records if "gave up" in r.getMessage()] == [logging.ERROR]
    assert watcher.restarts == 0
    assert_nothing_running(pgdata)

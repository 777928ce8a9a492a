"""The embedded server outlives no host: each way a host ends leaves nothing, or a server the next start adopts.

Real subprocesses acquire a real embedded server in a fresh data directory and are ended with
each signal; what is left is read from the process table, ``postmaster.pid`` and ``pg_ctl status``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest

from context_engine.storage import embedded
from tests.conftest import server_dir
from tests.pg_state import assert_nothing_running, pg_ctl_status, postgres_processes
from tests.waiting import HANG_GUARD

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def base() -> Iterator[Path]:
    path = server_dir()
    try:
        yield path
    finally:
        embedded.remove(path)  # whatever a failed test left running is stopped with its directory


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


def test_a_host_that_exits_normally_stops_the_server(base: Path) -> None:
    host = start_host(base)
    pgdata = base / "pgdata"
    assert len(postgres_processes(pgdata)) == 1
    assert pg_ctl_status(pgdata) == 0
    _out, err = host.communicate("\n", timeout=HANG_GUARD)
    assert host.returncode == 0, err
    assert_nothing_running(pgdata)
    assert embedded.holders(pgdata) == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_a_host_ended_by_a_signal_leaves_nothing_the_next_start_cannot_stop(base: Path, signum: int) -> None:
    pgdata = base / "pgdata"
    host = start_host(base)
    host.send_signal(signum)
    host.communicate(timeout=HANG_GUARD)
    assert host.returncode != 0

    left = postgres_processes(pgdata)
    if left:  # the host could not clean up (SIGKILL, an unhandled SIGTERM): the next start adopts it
        assert embedded.holders(pgdata) == [host.pid]
    # the next holder prunes the dead pid, joins the same server and, releasing last, stops it
    pgdata_again, _url = embedded.acquire(base)
    try:
        assert pgdata_again == pgdata
        assert embedded.holders(pgdata) == [os.getpid()]
        if left:
            assert postgres_processes(pgdata) == left
    finally:
        embedded.release(pgdata)
    assert_nothing_running(pgdata)
    assert embedded.holders(pgdata) == []


def test_a_pid_reused_by_another_process_is_not_a_holder(base: Path) -> None:
    pgdata = base / "pgdata"
    host = start_host(base)
    host.send_signal(signal.SIGKILL)
    host.wait(timeout=30)
    # an unrelated process that happens to have the dead holder's pid: one started now stands in
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        starts = json.loads((pgdata / embedded.STARTS_FILE).read_text())
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
    host.send_signal(signal.SIGKILL)
    host.wait(timeout=30)
    server = psutil.Process(postmaster)
    server.kill()
    server.wait(HANG_GUARD)
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
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

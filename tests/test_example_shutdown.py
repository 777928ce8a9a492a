"""Each example server, run for real and stopped with SIGTERM or SIGINT, exits cleanly and stops its PostgreSQL.

The servers (the examples, ``context-engine serve``, ``context-engine mcp``, Django's ``runserver``)
use the embedded PostgreSQL in a data directory of their own: a copy of one an engine on the default
settings initialised and migrated once for the session (what a server finds on its second start),
or an empty one (``context-engine serve`` stopped with SIGTERM: the first start, initdb and every
revision). A request that reads the database starts it.
After the signal: a clean exit, no traceback, nothing running, no holder listed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from mcp import Client

from context_engine.storage import embedded
from tests.conftest import copy_data_directory, server_dir
from tests.pg_state import assert_nothing_running, postgres_processes, wait_for
from tests.waiting import HANG_GUARD, POLL_SECONDS

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
TOKEN = "shutdown-token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def command(framework: str, port: int) -> tuple[list[str], Path]:
    """The command line that serves ``framework``'s example on ``port``, and where it runs."""
    if framework == "fastapi":
        return [sys.executable, "fastapi_app.py"], EXAMPLES
    if framework == "flask":
        return [sys.executable, "flask_app.py"], EXAMPLES
    if framework == "django":
        return [sys.executable, "manage.py", "runserver", "--noreload", str(port)], EXAMPLES / "django_project"
    if framework == "cli-mcp":
        return [sys.executable, "-m", "context_engine.cli", "mcp", "--port", str(port)], ROOT
    return [sys.executable, "-m", "context_engine.cli", "serve", "--port", str(port)], ROOT


@pytest.fixture
def fresh_base() -> Iterator[Path]:
    """An empty directory: the server's first request runs initdb and migrates."""
    path = server_dir()
    try:
        yield path
    finally:
        embedded.remove(path)


@pytest.fixture
def base(fresh_base: Path, migrated_pgdata: Path) -> Path:
    """A directory holding a copy of a migrated, stopped data directory."""
    copy_data_directory(migrated_pgdata, fresh_base)
    return fresh_base


def wait_until_serving(server: subprocess.Popen[str], url: str, headers: dict[str, str]) -> httpx.Response:
    deadline = time.monotonic() + HANG_GUARD  # a hang guard: a loaded machine starts slowly
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"the server exited early: {server.communicate()[1]}")
        try:
            return httpx.get(url, headers=headers, timeout=60)
        except httpx.TransportError:
            time.sleep(POLL_SECONDS)
    pytest.fail("the server did not answer in time")


def example_env(base: Path, port: int) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PORT": str(port),
        "CE_STORAGE__DATA_DIR": str(base),
        "CONTEXT_API_TOKEN": TOKEN,
    }
    env.pop("CE_DATABASE_URL", None)
    return env


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            return True
    except OSError:
        return False


def wait_until_mcp_answers(server: subprocess.Popen[str], port: int) -> dict[str, object]:
    """The knowledge tool's ``list`` over MCP, once ``context-engine mcp`` answers (it reads the database)."""

    async def listed() -> dict[str, object]:
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            result = await client.call_tool("search_knowledge_base", {"action": "list"})
        assert result.structured_content is not None
        return result.structured_content

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"the server exited early: {server.communicate()[1]}")
        if not listening(port):  # a refused connect costs next to nothing; an SDK client each time does not
            time.sleep(POLL_SECONDS)
            continue
        try:
            return asyncio.run(listed())
        except Exception:  # not answering yet: the SDK wraps the refused connection in several types
            time.sleep(POLL_SECONDS)
    pytest.fail("the MCP server did not answer in time")


STOPS = (signal.SIGTERM, signal.SIGINT)
#: the case whose server starts in an empty data directory (the others start in a migrated copy)
FIRST_START = ("cli-serve", signal.SIGTERM)
CASES = [
    *[(framework, signum) for framework in ("fastapi", "flask", "django", "cli-serve", "cli-mcp") for signum in STOPS],
    ("cli-serve", signal.SIGHUP),  # a closed terminal
    ("cli-mcp", signal.SIGHUP),
]


@pytest.mark.parametrize(("framework", "signum"), CASES, ids=[f"{f}-{signal.Signals(s).name}" for f, s in CASES])
def test_a_stopped_example_exits_cleanly_and_stops_postgres(
    request: pytest.FixtureRequest, framework: str, signum: int
) -> None:
    base: Path = request.getfixturevalue("fresh_base" if (framework, signum) == FIRST_START else "base")
    port = free_port()
    argv, cwd = command(framework, port)
    server = subprocess.Popen(
        argv, cwd=cwd, env=example_env(base, port), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        if framework == "cli-mcp":
            assert wait_until_mcp_answers(server, port)["documents"] == []
        else:
            prefix = "" if framework == "cli-serve" else "/context"
            response = wait_until_serving(
                server, f"http://127.0.0.1:{port}{prefix}/stats", {"Authorization": f"Bearer {TOKEN}"}
            )
            assert response.status_code == 200, response.text
        pgdata = base / "pgdata"
        assert len(postgres_processes(pgdata)) == 1
        assert embedded.holders(pgdata) == [server.pid]

        server.send_signal(signum)
        _out, err = server.communicate(timeout=HANG_GUARD)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert "Traceback" not in err, err
    # uvicorn shuts down gracefully, then re-raises the signal (serve turns SIGHUP into SIGTERM) to report it
    uvicorn = framework in ("fastapi", "cli-serve")
    # the mcp command has uvicorn's re-raised signal unwind (uvicorn.run swallows it) to close its engine
    assert server.returncode in ((0, -signum, -signal.SIGTERM) if uvicorn else (0,)), err
    assert_nothing_running(pgdata)
    assert embedded.holders(pgdata) == []


def test_ctrl_c_on_django_runserver_with_its_autoreloader_stops_postgres(base: Path) -> None:
    """Ctrl-C signals the whole process group: the reloader's watcher and the server process it started."""
    port = free_port()
    argv = [sys.executable, "manage.py", "runserver", str(port)]
    watcher = subprocess.Popen(
        argv,
        cwd=EXAMPLES / "django_project",
        env=example_env(base, port),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal gives a foreground job
    )
    pgdata = base / "pgdata"
    try:
        response = wait_until_serving(
            watcher, f"http://127.0.0.1:{port}/context/stats", {"Authorization": f"Bearer {TOKEN}"}
        )
        assert response.status_code == 200, response.text
        [server_pid] = embedded.holders(pgdata)
        assert server_pid != watcher.pid  # the server runs in the watcher's child
        os.killpg(watcher.pid, signal.SIGINT)
        _out, err = watcher.communicate(timeout=HANG_GUARD)
    finally:
        if watcher.poll() is None:
            os.killpg(watcher.pid, signal.SIGKILL)
            watcher.wait()
    assert "Traceback" not in err, err
    assert watcher.returncode == 0, err
    assert_nothing_running(pgdata)
    assert embedded.holders(pgdata) == []


def test_a_plain_kill_of_django_runserver_s_watcher_stops_postgres(base: Path) -> None:
    """``kill`` of the autoreloader's watcher: Django then kills its server outright (SIGKILL), which
    cannot release the embedded server; the data directory's reaper stops it."""
    port = free_port()
    argv = [sys.executable, "manage.py", "runserver", str(port)]
    watcher = subprocess.Popen(
        argv, cwd=EXAMPLES / "django_project", env=example_env(base, port),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    pgdata = base / "pgdata"
    try:
        response = wait_until_serving(
            watcher, f"http://127.0.0.1:{port}/context/stats", {"Authorization": f"Bearer {TOKEN}"}
        )
        assert response.status_code == 200, response.text
        [server_pid] = embedded.holders(pgdata)
        assert server_pid != watcher.pid
        watcher.send_signal(signal.SIGTERM)  # to the watcher alone, as ``kill PID`` does
        _out, err = watcher.communicate(timeout=60)
    finally:
        if watcher.poll() is None:
            os.killpg(watcher.pid, signal.SIGKILL)
            watcher.wait()
    assert "Traceback" not in err, err
    assert wait_for(lambda: not postgres_processes(pgdata) and not embedded.holders(pgdata))
    assert_nothing_running(pgdata)

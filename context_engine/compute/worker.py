"""Run checked code over frames in a separate, limited worker process, and read back plain data.

Why a fresh interpreter (``python -I worker_main.py`` through ``asyncio``'s subprocess support)
rather than ``multiprocessing``: a spawned child of ``multiprocessing`` re-imports the parent's
main module and inherits its ``sys.path`` and settings, and a forked one inherits every object,
socket and secret in the host's memory. A fresh isolated interpreter starts from nothing: no
inherited descriptors (``close_fds``), an environment holding only thread-count settings (no
keys, no database URL), its own session (so the whole process group can be killed), and a
private empty working directory removed afterwards. The worker sets its own kernel limits before
it reads the code (:mod:`context_engine.compute.worker_main`); this side adds the wall clock.

Frames go in pickled (the host produced them; the worker trusts the host), the result comes back
as JSON only, so nothing the generated code built is ever unpickled or executed here.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from context_engine.config import ComputeConfig

WORKER = Path(__file__).with_name("worker_main.py")
#: the whole environment the worker gets: one thread per numeric library, UTF-8 text
WORKER_ENV = {
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "LC_ALL": "C.UTF-8",
}


@dataclass
class WorkerOutcome:
    """What one run produced. ``error_kind``: frame_key, runtime, memory, cpu_limit, wall_limit, crashed."""

    ok: bool
    result: Any = None
    stdout: str = ""
    error: str | None = None
    error_kind: str | None = None
    #: CPU seconds the code used inside the worker (None when the worker was killed)
    cpu_time: float | None = None
    #: seconds from start to exit, start-up and frame transfer included
    wall_time: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)


async def run_in_worker(code: str, frames: dict[str, Any], settings: ComputeConfig) -> WorkerOutcome:
    """Run ``code`` (already checked) with ``dfs`` = copies of ``frames``; never raises for the code's faults."""
    header = {
        "code": code,
        "cpu_seconds": settings.cpu_seconds,
        "memory_bytes": settings.memory_mb * 1024 * 1024,
        "max_output_chars": settings.max_output_chars,
    }
    payload = json.dumps(header).encode("utf-8") + b"\n" + pickle.dumps(dict(frames), protocol=5)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ce-compute-") as workdir:
        extra: dict[str, Any] = {}
        if settings.worker_uid is not None:
            os.chmod(workdir, 0o777)
            extra = {"user": settings.worker_uid, "group": settings.worker_gid or settings.worker_uid,
                     "extra_groups": []}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            str(WORKER),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=dict(WORKER_ENV),
            cwd=workdir,
            close_fds=True,
            start_new_session=True,
            **extra,
        )
        try:
            out, _ = await asyncio.wait_for(process.communicate(payload), timeout=settings.wall_seconds)
        except TimeoutError:
            _kill(process)
            await process.wait()
            return WorkerOutcome(
                ok=False,
                error=f"the code ran past the wall-clock limit of {settings.wall_seconds:g} s and was stopped",
                error_kind="wall_limit",
                wall_time=time.perf_counter() - started,
            )
        except BaseException:  # cancelled: the worker must not outlive the call
            _kill(process)
            await process.wait()
            raise
    wall = time.perf_counter() - started
    return _outcome(process.returncode, out, wall, settings)


def _kill(process: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _outcome(returncode: int | None, out: bytes, wall: float, settings: ComputeConfig) -> WorkerOutcome:
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL) and not out:
        return WorkerOutcome(
            ok=False,
            error=f"the code ran past the CPU-time limit of {settings.cpu_seconds} s and was stopped",
            error_kind="cpu_limit",
            wall_time=wall,
        )
    try:
        reply = json.loads(out.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        reason = f"signal {-returncode}" if returncode is not None and returncode < 0 else f"exit status {returncode}"
        return WorkerOutcome(
            ok=False, error=f"the worker stopped without a result ({reason})", error_kind="crashed", wall_time=wall
        )
    return WorkerOutcome(
        ok=bool(reply.get("ok")),
        result=reply.get("result"),
        stdout=str(reply.get("stdout") or ""),
        error=reply.get("error"),
        error_kind=reply.get("error_kind"),
        cpu_time=reply.get("cpu_time"),
        wall_time=wall,
    )

"""Searchers in parallel: queries per second and CPU seconds per search, systems in alternating windows.

Each system gets ``workers`` concurrent searchers that loop over the test queries (each from its
own offset), for ``seconds`` at a time; the systems take turns, ``rounds`` windows each (A, B, C,
A, B, C), so a change in the machine's load falls on all of them. A search embeds its query with
the same local model inside its own call. CPU is counted for this process and for every process of
the PostgreSQL server (psutil, over the postmaster and its backends), so a system that searches in
PostgreSQL is charged the server's work too; an in-process system leaves the server idle and is
charged what little it does there.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import psutil

#: one search of ``query`` (embedding included), answered by the system under test
SearchOnce = Callable[[str], Awaitable[object]]


@dataclass
class Window:
    searches: int
    seconds: float
    cpu_here: float
    cpu_server: float


@dataclass
class Tally:
    name: str
    windows: list[Window] = field(default_factory=list)

    def qps(self) -> float:
        return sum(w.searches for w in self.windows) / max(sum(w.seconds for w in self.windows), 1e-9)

    def cpu_per_search(self) -> tuple[float, float]:
        """(this process, the server) CPU seconds per search."""
        n = max(sum(w.searches for w in self.windows), 1)
        return sum(w.cpu_here for w in self.windows) / n, sum(w.cpu_server for w in self.windows) / n


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def _server_cpu(postmaster: psutil.Process | None) -> dict[int, float]:
    """CPU seconds so far of the postmaster and each of its children, by pid."""
    if postmaster is None:
        return {}
    found: dict[int, float] = {}
    for process in [postmaster, *postmaster.children(recursive=True)]:
        try:
            found[process.pid] = _cpu(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


async def _window(
    search: SearchOnce, queries: Sequence[str], workers: int, seconds: float, postmaster: psutil.Process | None
) -> Window:
    here = psutil.Process()
    server_before = _server_cpu(postmaster)
    here_before = _cpu(here)
    done = 0
    started = time.perf_counter()
    stop_at = started + seconds

    async def worker(offset: int) -> None:
        nonlocal done
        i = offset
        while time.perf_counter() < stop_at:
            await search(queries[i % len(queries)])
            done += 1
            i += workers

    await asyncio.gather(*(worker(k) for k in range(workers)))
    elapsed = time.perf_counter() - started
    here_used = _cpu(here) - here_before
    server_after = _server_cpu(postmaster)
    server_used = sum(cpu - server_before.get(pid, 0.0) for pid, cpu in server_after.items())
    return Window(done, elapsed, here_used, server_used)


async def alternate(
    systems: dict[str, SearchOnce],
    queries: Sequence[str],
    *,
    workers: int = 8,
    seconds: float = 15.0,
    rounds: int = 2,
    postmaster: psutil.Process | None = None,
    warmup: int = 2,
) -> list[Tally]:
    """Each system's windows, taken in turn ``rounds`` times, after ``warmup`` searches each."""
    tallies = {name: Tally(name) for name in systems}
    for search in systems.values():
        for query in queries[:warmup]:
            await search(query)
    for _ in range(rounds):
        for name, search in systems.items():
            tallies[name].windows.append(await _window(search, queries, workers, seconds, postmaster))
    return list(tallies.values())


def table(tallies: list[Tally], reference: str, workers: int) -> list[str]:
    """Markdown rows: QPS, the ratio to ``reference``'s, and CPU per search."""
    base = next((t.qps() for t in tallies if t.name == reference), 0.0)
    lines = [
        f"| system ({workers} concurrent searchers) | searches | QPS | x {reference} | CPU ms/search "
        "(here + server) | per window QPS |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for tally in tallies:
        here, server = tally.cpu_per_search()
        per_window = ", ".join(f"{w.searches / w.seconds:.1f}" for w in tally.windows)
        ratio = tally.qps() / base if base else float("nan")
        lines.append(
            f"| {tally.name} | {sum(w.searches for w in tally.windows)} | {tally.qps():.1f} | {ratio:.2f} | "
            f"{1000 * (here + server):.1f} ({1000 * here:.1f} + {1000 * server:.1f}) | {per_window} |"
        )
    return lines

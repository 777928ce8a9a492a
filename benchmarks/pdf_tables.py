"""What keeping PDF tables costs: extraction time per page and peak memory, with and without [pdf].

Run: ``python benchmarks/pdf_tables.py [--pages 100] [--rounds 3]``.
The PDF is written by hand: every page has two paragraphs and a ruled 4 x 6 table, and every
other page has no table at all. "plain" reads it the way an install without the ``pdf`` extra
does (pypdf only); "tables" adds the pdfplumber pass. Figures only: compare runs on one machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import tracemalloc

from context_engine.ingest.formats import extract
from tests import tablepdf


def make_document(pages: int) -> bytes:
    contents = []
    for number in range(pages):
        texts = [(72.0, 720.0, f"Section {number}: quarterly figures."), (72.0, 706.0, "All amounts in euros.")]
        if number % 2 == 0:
            rows = [["Region", "Q1", "Q2", "Q3"]] + [[f"R{number}-{i}", f"{i}00", f"{i}10", f"{i}20"] for i in range(5)]
            drawing, cells = tablepdf.grid(rows, left=72, top=680, widths=[120, 80, 80, 80])
            contents.append(tablepdf.page([*texts, *cells], drawing))
        else:
            contents.append(tablepdf.page([*texts, (72.0, 690.0, "No table on this page.")]))
    return tablepdf.pdf(contents)


def measure(data: bytes, rounds: int) -> tuple[float, float, int]:
    """Median seconds (untraced rounds), peak traced MiB (one more, traced, round), table units."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        list(extract(data, name="figures.pdf").units)
        times.append(time.perf_counter() - started)
    tracemalloc.start()
    units = list(extract(data, name="figures.pdf").units)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return statistics.median(times), peak, sum(unit.kind == "table" for unit in units)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    data = make_document(args.pages)
    print(f"{args.pages} pages ({len(data) / 1024:.0f} KiB), {args.rounds} rounds, median time, peak traced memory")
    with_tables = measure(data, args.rounds)
    sys.modules["pdfplumber"] = None  # type: ignore[assignment]  # what an install without [pdf] sees
    plain = measure(data, args.rounds)
    for label, (seconds, peak, tables) in (("plain", plain), ("tables", with_tables)):
        print(
            f"{label:>7}: {seconds:7.3f} s  {seconds / args.pages * 1000:7.2f} ms/page  "
            f"peak {peak:6.1f} MiB  table units {tables}"
        )


if __name__ == "__main__":
    main()

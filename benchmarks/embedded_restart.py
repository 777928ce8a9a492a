"""How long requests fail after the embedded server's postmaster is killed, until the supervisor has it back.

``.venv/bin/python benchmarks/embedded_restart.py --kills 3``

One engine on a throwaway embedded server with a document in it; each round kills the postmaster
(``kill -9``) and reads the document in a loop, in the same process, until a read succeeds. Prints,
per round, the seconds from the kill to the first successful read, the failed reads meanwhile
(each a 503 ``storage_unavailable`` at the routes), and the supervisor's restart count.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from context_engine import ContextEngine, ContextEngineConfig  # noqa: E402
from context_engine.errors import ContextEngineError  # noqa: E402
from context_engine.principals import TRUSTED  # noqa: E402
from context_engine.storage import embedded  # noqa: E402
from tests.conftest import server_dir  # noqa: E402


async def rounds(base: Path, kills: int) -> None:
    config = ContextEngineConfig(storage={"data_dir": str(base), "auto_migrate": True})  # type: ignore[arg-type]
    async with ContextEngine(config) as engine:
        [document] = (await engine.ingest(text="Leave policy: 25 days a year.", name="leave.md")).documents
        pgdata = base / "pgdata"
        print(f"{'round':>5} {'seconds to a read':>18} {'failed reads':>13} {'restarts':>9}")
        for number in range(1, kills + 1):
            postmaster = embedded.running_postmaster(pgdata)
            assert postmaster is not None
            postmaster.kill()
            killed = time.monotonic()
            failures: Counter[str] = Counter()
            while True:
                try:
                    await engine.get_document(document.document_id, principals=TRUSTED)
                    break
                except ContextEngineError as exc:
                    failures[exc.code] += 1
                    await asyncio.sleep(0.05)
            seconds = time.monotonic() - killed
            watcher = embedded.supervisor(pgdata)
            restarts = watcher.restarts if watcher else 0
            print(f"{number:>5} {seconds:>18.2f} {sum(failures.values()):>13} {restarts:>9}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--kills", type=int, default=3)
    args = parser.parse_args()
    base = server_dir()
    try:
        asyncio.run(rounds(base, args.kills))
    finally:
        embedded.remove(base)
    return 0


if __name__ == "__main__":
    sys.exit(main())

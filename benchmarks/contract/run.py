"""The contract run with a larger budget: schemathesis's whole engine over each adapter, in process.

``.venv/bin/python benchmarks/contract/run.py --examples 50``

Every phase (examples, coverage, fuzzing, stateful) and every check, as ``st run --checks all``
runs them, against the FastAPI app (ASGI) and the Flask and Django apps (WSGI), each on a fresh
database of its own on a throwaway embedded server. The same harness as
``tests/test_attack_schemathesis.py`` (``tests/contract_run.py`` says what it adjusts and why),
with ``--examples`` cases per operation and phase. Prints, per adapter, the cases sent, the
statuses answered, the time taken and every failure; exits 1 if any adapter had one.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from context_engine.storage import embedded  # noqa: E402
from tests.conftest import server_dir  # noqa: E402
from tests.contract_run import run_contract  # noqa: E402
from tests.test_attack_schemathesis import ADAPTERS, mounted_schema  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--examples", type=int, default=50, help="cases per operation and phase (default 50)")
    parser.add_argument("--adapter", choices=ADAPTERS, action="append", help="only this adapter (repeatable)")
    args = parser.parse_args()
    base = server_dir()
    _pgdata, url = embedded.acquire(base)
    failed = False
    try:
        print(f"{'adapter':<8} {'cases':>6} {'failures':>8} {'errors':>6} {'seconds':>8}  statuses")
        for adapter in args.adapter or ADAPTERS:
            started = time.monotonic()
            with mounted_schema(adapter, url, max_examples=args.examples) as schema:
                found = run_contract(schema)
            seconds = time.monotonic() - started
            statuses = ", ".join(f"{code}: {count}" for code, count in sorted(found.statuses.items()))
            print(
                f"{adapter:<8} {found.cases:>6} {len(found.failures):>8} {len(found.errors):>6} {seconds:>8.1f}  "
                f"{statuses}",
                flush=True,
            )
            for line in [*found.failures, *found.errors]:
                print(f"  - {line}")
            failed = failed or bool(found.failures or found.errors)
    finally:
        embedded.remove(base)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

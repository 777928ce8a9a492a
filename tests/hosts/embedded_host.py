"""A host process for the lifecycle tests: acquires the embedded server, says so, then waits.

``python -m tests.hosts.embedded_host DATA_DIR``: prints ``ready`` once the server is up, then
releases and exits when a line arrives on stdin, or is ended by a signal the test sends.
"""

from __future__ import annotations

import sys
from pathlib import Path

from context_engine.storage import embedded


def main() -> None:
    pgdata, _url = embedded.acquire(Path(sys.argv[1]))
    print("ready", flush=True)
    sys.stdin.readline()
    embedded.release(pgdata)


if __name__ == "__main__":
    main()

"""A host process for the lifecycle tests: acquires the embedded server, says so, then waits.

``python -m tests.hosts.embedded_host DATA_DIR``: prints ``ready`` once the server is up, then
releases and exits when a line arrives on stdin, or is ended by a signal the test sends.

It imports ``context_engine.storage.embedded`` and what that module imports (the errors, the
holders, the supervisor), not the package's ``__init__``: the engine, its models and its
dependencies take seconds to import on a loaded machine and play no part in holding the server.
The hosts that import everything (the example servers, ``context-engine serve``) are
``tests/test_example_shutdown.py``'s.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def _import_embedded() -> types.ModuleType:
    """``context_engine.storage.embedded``, its parent packages registered without running their ``__init__``."""
    for name in ("context_engine", "context_engine.storage"):
        package = types.ModuleType(name)
        package.__path__ = [str(ROOT.joinpath(*name.split(".")))]
        sys.modules[name] = package
    from context_engine.storage import embedded

    return embedded


def main() -> None:
    embedded = _import_embedded()
    pgdata, _url = embedded.acquire(Path(sys.argv[1]))
    print("ready", flush=True)
    sys.stdin.readline()
    embedded.release(pgdata)


if __name__ == "__main__":
    main()

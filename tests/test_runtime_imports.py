"""What ``import context_engine`` and the mounts load: no web framework in the library, the
BEIR evaluation harness (numpy baselines, dataset readers) only for ``context-engine eval``, and
the libraries of one file format or one tool check only when a file or a schema needs them."""

from __future__ import annotations

import subprocess
import sys


def _loaded_after(statement: str) -> set[str]:
    probe = f"import sys; {statement}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_the_library_imports_no_web_framework_and_no_harness() -> None:
    loaded = _loaded_after("import context_engine")
    assert not {"fastapi", "flask", "django", "starlette"} & loaded
    assert "context_engine.evaluation" not in loaded


def test_the_library_loads_bs4_and_jsonschema_when_first_needed() -> None:
    """Every process that starts the package (each CLI run, each server) would pay for them.

    One process runs the three steps, printing what is loaded after each (each start imports the package).
    """
    steps = [
        "import context_engine",
        "from context_engine.ingest.formats import extract; "
        "extract(b'<html><body><p>Hello there</p></body></html>', name='a.html')",
        "from context_engine.tools.schema import checked_schema; checked_schema({'type': 'object'})",
    ]
    probe = "; ".join(f"{step}; print(' '.join(sorted(sys.modules)))" for step in steps)
    out = subprocess.run([sys.executable, "-c", f"import sys; {probe}"], capture_output=True, text=True, check=True)
    at_import, after_html, after_schema = (set(line.split()) for line in out.stdout.splitlines())
    assert not {"bs4", "jsonschema"} & at_import
    assert "bs4" in after_html
    assert "jsonschema" in after_schema


def test_the_mounts_do_not_load_the_harness() -> None:
    loaded = _loaded_after("import routing_core, adapters.fastapi, adapters.flask, adapters.django")
    assert "routing_core.router" in loaded and "context_engine.evaluation" not in loaded

"""The LangChain and LlamaIndex examples each run in one command and answer each caller from their
own documents only (the examples' scripted stand-in model answers from what reached its prompt)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("example", ["langchain_chain.py", "llama_index_query.py"])
def test_example_answers_each_caller_from_their_own_documents(database_url: str, example: str) -> None:
    env = {
        **os.environ,
        "CE_DATABASE_URL": database_url,
        "CE_STORAGE__AUTO_MIGRATE": "true",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("LLM_BASE_URL", None)
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / example), "How many days of leave do I get?"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = {line.split()[0]: line for line in done.stdout.splitlines()[1:]}
    assert "25 days of paid annual leave" in lines["hr"] and "night on call" not in lines["hr"]
    assert "one day of leave after a night on call" in lines["engineer"] and "25 days" not in lines["engineer"]

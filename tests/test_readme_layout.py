"""README's Layout section names every package and module at the top of ``context_engine``, and
nothing that is gone: a newcomer reads the tree there before opening it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _layout() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Layout\n", 1)[1]
    return section.split("```", 2)[1]


def test_the_layout_names_every_top_level_module_and_package() -> None:
    layout = _layout()
    package = ROOT / "context_engine"
    here = {p.name + "/" for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    here |= {p.name for p in package.glob("*.py") if p.name != "__init__.py"}
    assert sorted(name for name in here if not re.search(rf"(?<![\w/]){re.escape(name)}", layout)) == []


def test_the_layout_names_nothing_that_is_gone() -> None:
    layout = _layout()
    package = ROOT / "context_engine"
    named = set(re.findall(r"\b(\w+\.py)\b", layout)) | set(re.findall(r"\b(\w+)/", layout))
    tops = {"context_engine", "routing_core", "adapters", "migrations", "tests", "examples", "openapi", "benchmarks",
            "docs"}
    missing = [
        name for name in named - tops
        if not any(package.rglob(name if name.endswith(".py") else f"{name}/__init__.py"))
    ]
    assert missing == []

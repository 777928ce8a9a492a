"""The suite's own module lists (conftest's SLOW_MODULES and LONG_MODULES) name modules that exist:
a renamed module would otherwise drop out of ``make test-fast``'s exclusions or the schedule's order."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONG_MODULES, SLOW_MODULES

HERE = Path(__file__).resolve().parent


def test_every_listed_module_is_a_test_module_here() -> None:
    present = {path.stem for path in HERE.glob("test_*.py")}
    assert sorted(set(SLOW_MODULES) - present) == []
    assert sorted(set(LONG_MODULES) - present) == []
    assert len(set(LONG_MODULES)) == len(LONG_MODULES)

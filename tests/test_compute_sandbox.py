"""The compute sandbox: the static allow-list, the escape corpus, and the worker process's limits.

Every escape attempt is either refused by the checker (nothing runs) or, where the code is legal
but hostile (an endless loop, a memory bomb), stopped by the worker's limits; after the corpus the
host process has the same descriptors, no file was written and no child process is left.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from context_engine.compute import ComputeConfig, UnsafeCode, check_code
from context_engine.compute.worker import WORKER_ENV, run_in_worker

MARKER = "ce_escape_marker"

#: refused by the checker: (what it tries, the code)
REFUSED: list[tuple[str, str]] = [
    ("import statement", "import os\nresult = os.getcwd()"),
    ("from-import", "from os import system\nsystem('id')"),
    ("import with alias", "import subprocess as sp\nsp.run(['id'])"),
    ("__import__ builtin", "result = __import__('os').system('id')"),
    ("importlib by name", "result = importlib.import_module('os')"),
    ("builtins dict", "result = __builtins__['open']('x', 'w')"),
    ("dunder class walk from a tuple", "result = ().__class__.__bases__[0].__subclasses__()"),
    ("dunder walk from a string", "result = ''.__class__.__mro__[1].__subclasses__()"),
    ("dunder walk from a frame column", "result = dfs['t'].__class__.__init__.__globals__"),
    ("object.__subclasses__", "result = object.__subclasses__()"),
    ("type() three arguments", "X = type('X', (), {})\nresult = X"),
    ("getattr with a built string", "result = getattr((), '__cl' + 'ass__')"),
    ("getattr with a literal", "result = getattr(dfs['t'], 'to_csv')('" + MARKER + ".csv')"),
    ("vars()", "result = vars()"),
    ("globals()", "result = globals()['__builtins__']"),
    ("locals()", "result = locals()"),
    ("open for writing", f"open('{MARKER}.txt', 'w').write('x')"),
    ("eval", "result = eval('1+1')"),
    ("exec", "exec('import os')"),
    ("compile", "result = compile('1', 'x', 'eval')"),
    ("str.format attribute access", "result = '{0.__class__}'.format(1)"),
    ("str.format without dunder", "result = '{0.real}'.format(1)"),
    ("format_map", "result = '{x.__class__}'.format_map({'x': 1})"),
    ("f-string dunder", "result = f'{dfs.__class__}'"),
    ("f-string format spec dunder", "result = f'{1:{dfs.__class__}}'"),
    ("pickle via pandas", f"dfs['t'].to_pickle('{MARKER}.pkl')"),
    ("pickle read via pandas", "result = pd.read_pickle('x.pkl')"),
    ("marshal module", "import marshal\nresult = marshal.loads(b'')"),
    ("ctypes", "import ctypes\nctypes.CDLL(None).system(b'id')"),
    ("ctypes through numpy", "result = np.ctypeslib"),
    ("signals", "import signal\nsignal.alarm(0)"),
    ("fork bomb through os", "import os\nwhile True: os.fork()"),
    ("fork through pandas internals", "result = pd.io.common.os.fork()"),
    ("file write through numpy", f"np.save('{MARKER}.npy', dfs['t'].values)"),
    ("file read through numpy", "result = np.loadtxt('/etc/passwd')"),
    ("csv write", f"dfs['t'].to_csv('{MARKER}.csv')"),
    ("string-dispatched to_csv", f"dfs['t'].apply('to_csv', path_or_buf='{MARKER}.csv')"),
    ("string-dispatched through agg", "dfs['t'].agg(['sum', 'to_pickle'])"),
    ("dispatch of a built name", "name = 'to_' + 'pickle'\nresult = dfs['t'].apply(name)"),
    ("pandas query string", "result = dfs['t'].query('a.__class__ == 1')"),
    ("pandas eval", "result = pd.eval('1 + 1')"),
    ("frame walk via generator", "g = (x for x in [1])\nresult = g.gi_frame.f_back.f_globals"),
    ("traceback frames", "try:\n    1/0\nexcept Exception as e:\n    result = e.__traceback__.tb_frame"),
    ("private name", "_secret = 1\nresult = _secret"),
    ("class definition", "class A:\n    pass\nresult = A"),
    ("generator function", "def f():\n    yield 1\nresult = list(f())"),
    ("global statement", "def f():\n    global result\n    result = 1"),
    ("attribute assignment", "pd.read_csv = None"),
    ("decorator", "@print\ndef f():\n    pass"),
    ("with statement", "with open('x') as f:\n    result = f.read()"),
    ("system through a method name", "result = dfs['t'].system('id')"),
    ("breakpoint", "breakpoint()"),
    ("input", "result = input()"),
    ("help", "help(pd)"),
    ("options setter", "pd.set_option('display.max_rows', 1)"),
    ("lambda reaching a dunder", "f = lambda: ().__class__\nresult = f()"),
    ("bytes literal", "result = b'\\x00'"),
    ("async code", "async def f():\n    await g()"),
    ("nested too deeply", "result = " + "(" * 400 + "1" + ")" * 400),
]

#: legal to the checker, stopped by the worker: (what it tries, the code, the expected error kinds)
LIMITED: list[tuple[str, str, set[str]]] = [
    ("infinite loop", "while True:\n    pass", {"cpu_limit", "wall_limit"}),
    ("memory bomb", "result = [0] * (10 ** 10)", {"memory"}),
    ("string memory bomb", "result = 'x' * (10 ** 11)", {"memory"}),
    ("cpu bomb by big integers", "result = 10 ** (10 ** 9)", {"cpu_limit", "wall_limit", "memory"}),
    ("recursion", "def f(n):\n    return f(n + 1)\nresult = f(0)", {"runtime"}),
]

FRAMES = {"t": pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})}
TIGHT = ComputeConfig(enable_code_execution=True, cpu_seconds=2, wall_seconds=30, memory_mb=256)


def test_the_corpus_is_at_least_forty_attempts() -> None:
    assert len(REFUSED) + len(LIMITED) >= 40


@pytest.mark.parametrize(("what", "code"), REFUSED, ids=[w for w, _ in REFUSED])
def test_the_checker_refuses(what: str, code: str) -> None:
    with pytest.raises(UnsafeCode) as refused:
        check_code(code)
    assert refused.value.reasons and refused.value.code == "unsafe_code"


def test_the_checker_accepts_ordinary_analysis() -> None:
    check_code(
        "df = dfs['sales']\n"
        "df['amount'] = pd.to_numeric(df['amount'])\n"
        "by_region = df.groupby('region').agg(total=('amount', 'sum'), n=('amount', 'count'))\n"
        "top = by_region.sort_values('total', ascending=False).head(3)\n"
        "share = {r: round(float(v) / float(df['amount'].sum()), 4) for r, v in by_region['total'].items()}\n"
        "def label(x):\n    return f'{x:.2f}'\n"
        "result = {'top': top, 'share': share, 'mean': df['amount'].apply(lambda v: v * 2).mean(),\n"
        "          'first': label(df['amount'].iloc[0]), 'months': df['when'].dt.month.unique().tolist()}\n"
    )


def test_refusals_name_the_construct_and_line() -> None:
    with pytest.raises(UnsafeCode) as refused:
        check_code("x = 1\nimport os\ny = x.__class__")
    reasons = " | ".join(refused.value.reasons)
    assert "Import is not allowed" in reasons and "(line 2)" in reasons and "'__class__'" in reasons


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


async def test_hostile_code_is_stopped_by_the_limits_and_the_host_is_unaffected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    fds_before = _open_fds()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for what, code, kinds in LIMITED:
        check_code(code)  # legal to the checker: the worker is what stops it
        outcome = await run_in_worker(code, FRAMES, TIGHT)
        assert not outcome.ok and outcome.error_kind in kinds, (what, outcome)
    for _what, code in REFUSED:
        with pytest.raises(UnsafeCode):
            check_code(code)
    assert _open_fds() == fds_before
    # the host's own peak memory did not take the bombs (they were 10 GB and more)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 200_000
    assert not [name for name in os.listdir(tmp_path) if MARKER in name]
    assert (await run_in_worker("result = int(dfs['t']['a'].sum())", FRAMES, TIGHT)).result == 6


async def test_the_worker_inherits_no_secrets_and_no_descriptors(monkeypatch: pytest.MonkeyPatch) -> None:
    # this bypasses the checker on purpose, to look at the process itself: ``import`` does not exist
    # in the worker's builtins either, so the code reaches ``os`` through a module pandas imported
    monkeypatch.setenv("CE_LLM__API_KEY", "sk-host-secret")
    leak = os.open(os.devnull, os.O_RDONLY)  # a descriptor the host holds open during the run
    held = str(leak)
    try:
        code = (
            "os = pd.io.common.os\n"
            "result = {'env': dict(os.environ), 'fds': sorted(os.listdir('/proc/self/fd')),"
            " 'cwd_files': os.listdir('.')}"
        )
        outcome = await run_in_worker(code, FRAMES, TIGHT)
    finally:
        os.close(leak)
    assert outcome.ok, outcome
    report: dict[str, Any] = outcome.result
    assert report["env"] == WORKER_ENV
    assert "sk-host-secret" not in str(report)
    # stdin, stdout and stderr (both pointing nowhere), the result channel, and listdir's own handle
    assert report["fds"] == ["0", "1", "2", "3", "4"] and held not in ("3", "4")
    assert report["cwd_files"] == []


async def test_the_code_sees_copies_and_results_come_back_as_plain_data() -> None:
    frames = {"t": pd.DataFrame({"a": [1, 2, 2], "when": pd.to_datetime(["2024-01-05", "2024-02-01", "2024-02-03"])})}
    code = (
        "dfs['t']['a'] = 0\n"
        "g = dfs['t'].groupby(dfs['t']['when'].dt.month)['a'].count()\n"
        "result = {'sum': np.int64(5), 'nan': float('nan'), 'when': dfs['t']['when'].max(), 'g': g,"
        " 'frame': dfs['t'].head(1), 'dup': pd.Series([1, 2], index=['x', 'x'])}"
    )
    check_code(code)
    outcome = await run_in_worker(code, frames, TIGHT)
    assert outcome.ok, outcome
    assert outcome.result == {
        "sum": 5,
        "nan": None,
        "when": "2024-02-03T00:00:00",
        "g": {"1": 1, "2": 2},
        "frame": [{"a": 0, "when": "2024-01-05T00:00:00"}],
        "dup": {"index": ["x", "x"], "values": [1, 2]},
    }
    assert frames["t"]["a"].tolist() == [1, 2, 2]  # the host's frame is untouched


async def test_output_is_capped_with_a_marker_and_printing_is_captured() -> None:
    settings = TIGHT.model_copy(update={"max_output_chars": 1000})
    outcome = await run_in_worker("print('hello')\nresult = ['x' * 100] * 50", FRAMES, settings)
    assert outcome.ok and outcome.stdout == "hello\n"
    assert outcome.result[-1].endswith("[cut: output limit]") or outcome.result[-1] == "...[cut: output limit]"
    assert len(str(outcome.result)) < 1500


async def test_a_missing_frame_key_names_what_exists() -> None:
    outcome = await run_in_worker("result = dfs['T']", FRAMES, TIGHT)
    assert (outcome.ok, outcome.error_kind) == (False, "frame_key")
    assert outcome.error == "no frame named 'T'; available: ['t']; did you mean 't'?"

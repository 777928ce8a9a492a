"""The program the worker process runs: limits first, then the frames, then the generated code.

It is started as ``python -I worker_main.py`` by :mod:`context_engine.compute.worker`, so it
imports nothing of the engine (isolated mode puts neither its own directory nor ``PYTHONPATH``
on the path): only the standard library, numpy and pandas. It reads one request from stdin — a
JSON header line, then the frames pickled by the host (trusted bytes the host produced) — and
writes one JSON reply to a duplicate of stdout that the generated code has no name for.

Order matters: the kernel limits that need no imports (no core files, no file writes) go on
before anything else, no new processes or threads once numpy and pandas are loaded (a numeric
library may start a thread while loading), the address-space limit once pandas is loaded, as
the code's budget on top of what the interpreter and pandas already mapped; the CPU limit and a
small open-descriptor ceiling go on just before the code runs. Nothing the code does can raise
them again.

The result leaves as plain data only (None, bool, int, float, str, list, dict): a DataFrame as row
dicts (with a non-default index moved into leading columns), a Series as a dict, numpy scalars as
Python numbers, timestamps as ISO-8601 strings, anything else as its ``repr``. Labels that repeat
keep every value (``{"columns", "data"}`` / ``{"index", "values"}``), since row dicts would drop
all but the last. Past ``max_output_chars`` or 50 levels of nesting the value is cut with a marker.
"""

import datetime
import difflib
import io
import json
import math
import os
import pickle
import resource
import sys
import time

CUT = "...[cut: output limit]"
MAX_DEPTH = 50
#: descriptors the code's process may hold: pandas opens its own lazily imported modules
OPEN_FILES = 64


def limit(which, value):
    """Set soft and hard limit to ``value`` (never above the current hard limit)."""
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value))


def address_space_in_use():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


class FrameKeyMissing(KeyError):
    pass


class Frames(dict):
    """``dfs``: a missing key names what exists and the nearest match, for the model's one rewrite."""

    def __missing__(self, key):
        keys = list(self)
        close = difflib.get_close_matches(str(key), [str(k) for k in keys], n=1, cutoff=0.0)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise FrameKeyMissing(f"no frame named {key!r}; available: {keys!r}{hint}")


class Output:
    """What ``print`` wrote, kept up to a cap."""

    def __init__(self, cap):
        self.cap, self.buffer, self.cut = cap, io.StringIO(), False

    def print(self, *args, sep=" ", end="\n"):
        if self.cut:
            return
        text = str(sep).join(str(a) for a in args) + str(end)
        room = self.cap - self.buffer.tell()
        if len(text) > room:
            text, self.cut = text[: max(room, 0)] + CUT, True
        self.buffer.write(text)


def plain(value, pd, np, budget, depth=0):
    """Plain data for ``value``, with type-level checks only; ``budget`` is a one-item list of chars left."""
    if budget[0] <= 0 or depth > MAX_DEPTH:
        return CUT
    kind = type(value)
    if value is None or kind is bool:
        budget[0] -= 5
        return value
    if kind is int:
        budget[0] -= 20
        return value
    if kind is float:
        budget[0] -= 24
        return value if math.isfinite(value) else None
    if kind is str:
        budget[0] -= len(value) + 2
        return value if budget[0] >= 0 else value[: max(0, len(value) + budget[0])] + CUT
    if isinstance(value, np.generic):
        return plain(value.item(), pd, np, budget, depth + 1)
    if value is pd.NaT or value is pd.NA:
        return None
    if isinstance(value, pd.Timestamp | pd.Timedelta | datetime.date | datetime.time):
        return plain(value.isoformat(), pd, np, budget, depth + 1)
    if isinstance(value, pd.DataFrame):
        frame = value if isinstance(value.index, pd.RangeIndex) else value.reset_index()
        if not frame.columns.is_unique:
            return {
                "columns": plain([str(c) for c in frame.columns], pd, np, budget, depth + 1),
                "data": plain(frame.values.tolist(), pd, np, budget, depth + 1),
            }
        rows = []
        for record in frame.to_dict(orient="records"):
            if budget[0] <= 0:
                rows.append(CUT)
                break
            rows.append(plain(record, pd, np, budget, depth + 1))
        return rows
    if isinstance(value, pd.Series):
        if not value.index.is_unique:
            return {
                "index": plain(value.index.tolist(), pd, np, budget, depth + 1),
                "values": plain(value.tolist(), pd, np, budget, depth + 1),
            }
        return plain(dict(zip(value.index.tolist(), value.tolist(), strict=True)), pd, np, budget, depth + 1)
    if isinstance(value, pd.Index | np.ndarray):
        return plain(value.tolist(), pd, np, budget, depth + 1)
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if budget[0] <= 0:
                out[CUT] = CUT
                break
            name = plain(key, pd, np, budget, depth + 1)
            out[name if type(name) is str else json.dumps(name)] = plain(item, pd, np, budget, depth + 1)
        return out
    if isinstance(value, list | tuple | set | frozenset):
        items = []
        for item in value:
            if budget[0] <= 0:
                items.append(CUT)
                break
            items.append(plain(item, pd, np, budget, depth + 1))
        return items
    return plain(repr(value), pd, np, budget, depth + 1)


def builtins_for(output):
    import builtins

    names = (
        "abs all any bool dict divmod enumerate filter float int isinstance len list map max min range reversed "
        "round set sorted str sum tuple zip Exception ValueError KeyError TypeError IndexError ZeroDivisionError "
        "ArithmeticError LookupError True False None"
    ).split()
    table = {name: getattr(builtins, name) for name in names}
    table["print"] = output.print
    return table


def main():
    limit(resource.RLIMIT_CORE, 0)
    limit(resource.RLIMIT_FSIZE, 0)
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)

    import numpy as np
    import pandas as pd

    # after the imports (a numeric library may start a thread while loading), before any input
    limit(resource.RLIMIT_NPROC, 0)

    header = json.loads(sys.stdin.buffer.readline())
    frames = Frames(pickle.loads(sys.stdin.buffer.read()))
    limit(resource.RLIMIT_AS, address_space_in_use() + int(header["memory_bytes"]))
    output = Output(int(header["max_output_chars"]))
    namespace = {"__builtins__": builtins_for(output), "dfs": frames, "pd": pd, "np": np, "math": math}
    reply = {"ok": False, "result": None, "error": None, "error_kind": None}
    started = time.process_time()
    cpu = int(header["cpu_seconds"])
    limit(resource.RLIMIT_CPU, int(started) + cpu + 1)
    limit(resource.RLIMIT_NOFILE, OPEN_FILES)
    try:
        exec(compile(header["code"], "<generated>", "exec"), namespace)
        if "result" not in namespace:
            raise NameError("the code did not set the variable `result`")
        reply["result"] = plain(namespace["result"], pd, np, [int(header["max_output_chars"])])
        reply["ok"] = True
    except FrameKeyMissing as exc:
        reply["error"], reply["error_kind"] = exc.args[0], "frame_key"
    except MemoryError:
        reply["error"], reply["error_kind"] = "the code ran out of memory (the worker's memory limit)", "memory"
    except RecursionError:
        reply["error"], reply["error_kind"] = "the code recursed too deeply", "runtime"
    except Exception as exc:  # the model's runtime error, reported to it and to the caller
        reply["error"], reply["error_kind"] = f"{type(exc).__name__}: {exc}"[:2000], "runtime"
    reply["stdout"] = output.buffer.getvalue()
    reply["cpu_time"] = round(time.process_time() - started, 4)
    channel.write(json.dumps(reply, allow_nan=False, default=str))
    channel.flush()


if __name__ == "__main__":
    main()

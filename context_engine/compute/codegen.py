"""What the model is told about the frames and the sandbox, and the structured call that gets code back."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from context_engine.compute.checker import SAFE_BUILTINS

if TYPE_CHECKING:
    import pandas as pd

SAMPLE_ROWS = 3
CODE_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"code": {"type": "string"}}}

SYSTEM = (
    "You write short Python (pandas) programs that answer a question over dataframes. "
    "Reply with JSON {\"code\": \"...\"}. The program runs in a locked-down sandbox:\n"
    "- `dfs` is a dict of pandas DataFrames keyed exactly as listed; `pd`, `np` and `math` are provided.\n"
    "- No imports, no files or network, no `open`/`eval`/`exec`/`compile`/`getattr`/`type`, no names or "
    "attributes starting with '_', no classes, no generators, no `with`, no `global`.\n"
    "- No `.format()`/`.format_map()` (use f-strings), no `.query()`/`.eval()`, no `to_csv`/`read_*` or "
    "other file methods, no assignment to attributes (use df['col'] = ...). Access columns as df['col'].\n"
    "- Methods that take a function name (`agg`, `apply`, `transform`) take a literal name like 'sum' "
    "or a lambda, never a variable holding a name.\n"
    f"- Builtins available: {', '.join(sorted(SAFE_BUILTINS))}.\n"
    "- Use every row (never a sample). Assign the answer to the variable `result` as a number, string, "
    "list or dict (a small DataFrame or Series is also accepted)."
)


def describe(frames: dict[str, pd.DataFrame]) -> str:
    """The keys, columns, dtypes, row counts and a few rows of each frame, for the prompt."""
    lines = ["Dataframes (use the keys exactly as written):"]
    for key, frame in frames.items():
        lines.append(f"\ndfs[{key!r}]: {len(frame)} rows")
        columns = ", ".join(f"{c!r} ({frame[c].dtype})" for c in frame.columns) if frame.columns.is_unique else (
            ", ".join(repr(c) for c in frame.columns)
        )
        lines.append(f"columns: {columns or '(none)'}")
        if len(frame) and len(frame.columns):
            lines.append("first rows:\n" + frame.head(SAMPLE_ROWS).to_csv(index=False).strip())
    return "\n".join(lines)


def first_prompt(question: str, frames: dict[str, pd.DataFrame]) -> str:
    return f"{describe(frames)}\n\nQuestion: {question}"


def rewrite_prompt(question: str, frames: dict[str, pd.DataFrame], code: str, problem: str) -> str:
    """The one rewrite: the model's own code and why it was refused (or which key was missing)."""
    return (
        f"{first_prompt(question, frames)}\n\nYour previous program was:\n{code}\n\n"
        f"It could not be used: {problem}\nWrite the program again, fixing that."
    )

"""Count the places in a package that repeat six or more lines of the same shape.

A "line" is a statement as Python reads it (a call spread over several physical lines is one),
and its shape is the statement with every identifier, number and string replaced by a placeholder
(keywords, operators and brackets kept), so two retry loops that differ only in their names match.
Comments, docstrings and the module's own imports are left out first: they carry no logic and
would make unrelated files look alike.

A near-copy is a maximal run of at least ``--lines`` consecutive shaped lines found at two places
(two files, or two places of one file that do not overlap); a run found at ``k`` places counts
``k * (k - 1) / 2`` pairs. Six lines of only a few shapes repeated (a block of constants or fields)
are a list rather than logic, so a window counts only with ``--min-distinct`` different shapes.
Nothing is imported: the files are only tokenized.

    python benchmarks/near_copies.py                     # context_engine/, 6 lines
    python benchmarks/near_copies.py --show context_engine/embeddings context_engine/llm
"""

from __future__ import annotations

import argparse
import io
import keyword
import tokenize
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_SKIPPED = frozenset({tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                      tokenize.ENCODING, tokenize.ENDMARKER})  # fmt: skip
#: f-strings are one token up to 3.11 and several from 3.12 (-1: never seen)
_FSTRING_START = getattr(tokenize, "FSTRING_START", -1)
_FSTRING_END = getattr(tokenize, "FSTRING_END", -1)


@dataclass(frozen=True)
class Line:
    """One logical source line: where it starts and its shape."""

    number: int
    shape: str


@dataclass(frozen=True)
class Pair:
    """Two places that share ``length`` shaped lines: (file, first line, last line) each."""

    first: tuple[str, int, int]
    second: tuple[str, int, int]
    length: int


def _placeholder(token: tokenize.TokenInfo) -> str:
    if token.type == tokenize.NAME:
        return token.string if keyword.iskeyword(token.string) or keyword.issoftkeyword(token.string) else "N"
    if token.type == tokenize.NUMBER:
        return "0"
    if token.type == tokenize.STRING:
        return "S"
    return token.string


def shaped_lines(source: str) -> list[Line]:
    """The file's statements (logical lines: a call spread over lines is one) as shapes.

    Left out: comments, docstrings and other lone strings, and the module's own imports (a list
    of names at the top of every file, not logic; an import inside a function, like an optional
    SDK's guard, is kept). An f-string is one ``S`` whatever it holds, on every Python (3.12
    tokenizes its inside).
    """
    lines: list[Line] = []
    current: list[str] = []
    start = (0, 0)
    inside_fstring = 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == _FSTRING_START:
            if not inside_fstring:
                if not current:
                    start = token.start
                current.append("S")
            inside_fstring += 1
            continue
        if inside_fstring:
            inside_fstring -= token.type == _FSTRING_END
            continue
        if token.type == tokenize.NEWLINE:
            module_import = start[1] == 0 and current[:1] in (["import"], ["from"])
            if current and set(current) != {"S"} and not module_import:
                lines.append(Line(start[0], " ".join(current)))
            current = []
            continue
        if token.type in _SKIPPED:
            continue
        if not current:
            start = token.start
        current.append(_placeholder(token))
    return lines


def near_copies(files: list[Path], window: int = 6, min_distinct: int = 4) -> list[Pair]:
    """Every maximal run of ``window`` or more shaped lines that two places share.

    A window of fewer than ``min_distinct`` different shapes is a list (constants, fields, one-line
    exception classes, a table), not copied logic, and is not counted; ``min_distinct=1`` counts all.
    """
    shaped = {str(path.relative_to(ROOT)): shaped_lines(path.read_text(encoding="utf-8")) for path in files}
    seen: dict[tuple[str, ...], list[tuple[str, int]]] = defaultdict(list)
    for name, lines in shaped.items():
        for i in range(len(lines) - window + 1):
            shapes = tuple(line.shape for line in lines[i : i + window])
            if len(set(shapes)) >= min_distinct:
                seen[shapes].append((name, i))
    matching: set[tuple[str, int, str, int]] = set()
    for places in seen.values():
        for a in range(len(places)):
            for b in range(a + 1, len(places)):
                (fa, ia), (fb, ib) = places[a], places[b]
                if fa == fb and abs(ia - ib) < window:
                    continue  # a run overlapping itself (repeated lines) is not a copy
                matching.add((fa, ia, fb, ib))
    pairs: list[Pair] = []
    for fa, ia, fb, ib in sorted(matching):
        if (fa, ia - 1, fb, ib - 1) in matching:
            continue  # not the start of its run
        length = window
        while (fa, ia + length - window + 1, fb, ib + length - window + 1) in matching:
            length += 1
        la, lb = shaped[fa], shaped[fb]
        pairs.append(
            Pair(
                (fa, la[ia].number, la[ia + length - 1].number),
                (fb, lb[ib].number, lb[ib + length - 1].number),
                length,
            )
        )
    return pairs


def python_files(paths: list[str]) -> list[Path]:
    found: list[Path] = []
    for given in paths:
        path = (ROOT / given).resolve()
        found += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", default=["context_engine"], help="folders or files, from the repo root")
    parser.add_argument("--lines", type=int, default=6, help="shortest run that counts (default 6)")
    parser.add_argument("--min-distinct", type=int, default=4,
                        help="different shapes a window needs to count (default 4; 1 counts lists too)")  # fmt: skip
    parser.add_argument("--show", action="store_true", help="list every pair")
    args = parser.parse_args()
    files = python_files(args.paths)
    pairs = near_copies(files, args.lines, args.min_distinct)
    if args.show:
        for pair in sorted(pairs, key=lambda p: (-p.length, p.first)):
            (fa, a1, a2), (fb, b1, b2) = pair.first, pair.second
            print(f"{pair.length:3d} lines  {fa}:{a1}-{a2}  ~  {fb}:{b1}-{b2}")
    print(f"{len(pairs)} pairs of places share {args.lines}+ same-shape lines (windows of {args.min_distinct}+ "
          f"different shapes) across {len(files)} files ({', '.join(args.paths)})")  # fmt: skip


if __name__ == "__main__":
    main()

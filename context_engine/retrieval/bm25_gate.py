"""The gate of the pruned BM25 pass: a tsquery that every chunk able to reach a score floor matches.

A chunk's BM25 score is below the sum of the bounds of the query terms it contains, so a chunk can
reach a floor only if the terms it holds have bounds summing to at least the floor. That condition
is a boolean formula over the terms, and a tsquery can say it: ``rare | (mid & common) | ...``.
Handed to the GIN index, it lets PostgreSQL's own fast scan do the pruning: GIN orders the terms
by posting-list length, finds the rarest ones that every match must contain, walks only their
postings and probes the long ones at those chunks. Chunks holding only common terms are never
fetched.

The formula is expanded term by term, most valuable first (a term is either held, lowering what the
rest must reach, or not). Its size is capped: past :data:`MAX_LEAVES` lexemes, a branch is replaced
by "holds one of the next terms, up to where the terms after them could no longer reach the rest"
(MaxScore's split), which every chunk of that branch satisfies, so the gate only ever lets more
chunks through than the exact condition, never fewer.
"""

from __future__ import annotations

from collections.abc import Sequence

#: lexemes written into one gate at most; beyond, branches are widened (see the module doc).
MAX_LEAVES = 48

#: the floor is lowered by this fraction before gating, so that rounding in the bound sums can only
#: widen the gate.
SLACK = 1e-9


def lexeme_query(lexeme: str) -> str:
    """A single-lexeme tsquery literal, quoted so that no character of the lexeme is an operator."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def reaching(bounds: Sequence[tuple[str, float]], floor: float) -> str | None:
    """tsquery text matched by every chunk whose held terms' bounds sum to at least ``floor``.

    ``bounds`` pairs each query lexeme with its bound. ``None`` when the gate would let every
    candidate through (a floor of 0 or less, or one no set of terms could reach, which only a
    rounding of the floor itself can produce: then nothing is pruned rather than everything).
    """
    ordered = sorted(bounds, key=lambda pair: (-pair[1], pair[0]))
    lexemes = [lexeme_query(lexeme) for lexeme, _ in ordered]
    values = [max(0.0, bound) for _, bound in ordered]
    rest = [0.0] * (len(values) + 1)
    for i in range(len(values) - 1, -1, -1):
        rest[i] = rest[i + 1] + values[i]
    need = floor * (1 - SLACK) if floor > 0 else floor
    leaves = [0]

    def expand(i: int, need: float) -> str | bool:
        """The condition on terms ``i..`` for their held bounds to sum to ``need``: a tsquery, or
        True (always met) / False (never met)."""
        if need <= 0:
            return True
        if rest[i] < need:
            return False
        if leaves[0] >= MAX_LEAVES:
            # widen: the chunk must hold one of the terms i..j, where the terms after j cannot reach
            # ``need`` without them (the MaxScore split of the remaining terms)
            j = i
            while rest[j + 1] >= need:
                j += 1
            leaves[0] += j + 1 - i
            return lexemes[i] if j == i else "(" + " | ".join(lexemes[i : j + 1]) + ")"
        leaves[0] += 1
        held = expand(i + 1, need - values[i])
        with_term = lexemes[i] if held is True else f"{lexemes[i]} & {held}" if held is not False else False
        without = expand(i + 1, need)
        if without is True:
            return True
        if without is False:
            return with_term
        if with_term is False:
            return without
        return f"({with_term} | {without})"

    gate = expand(0, need)
    return gate if isinstance(gate, str) else None

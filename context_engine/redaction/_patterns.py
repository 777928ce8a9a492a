"""Regex helpers for ``pattern`` rules.

Users write rules in whichever regex dialect they know. Python spells a named group
``(?P<name>...)`` while PCRE, JavaScript and .NET spell it ``(?<name>...)``; rejecting the second
form would only teach people to copy patterns by hand, so both are rewritten to Python syntax
before compiling. The rewrite is a small scanner rather than a regex substitution so that escaped
parentheses, character classes and lookbehinds (``(?<=``, ``(?<!``) are left exactly as written.
"""

from __future__ import annotations

import re

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def normalise_group_syntax(pattern: str) -> str:
    """Rewrite ``(?<name>`` to ``(?P<name>`` and ``\\k<name>`` to ``(?P=name)`` outside classes."""
    out: list[str] = []
    i = 0
    n = len(pattern)
    in_class = False
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            if not in_class and pattern.startswith("\\k<", i):
                ident = _IDENT.match(pattern, i + 3)
                if ident and pattern.startswith(">", ident.end()):
                    out.append(f"(?P={ident.group()})")
                    i = ident.end() + 1
                    continue
            # Any other escape is copied verbatim, together with the character it escapes.
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if ch == "]":
                in_class = False
            out.append(ch)
            i += 1
            continue
        if ch == "[":
            in_class = True
            out.append(ch)
            i += 1
            # A ``]`` straight after ``[`` or ``[^`` is a literal member, not the end of the class.
            if i < n and pattern[i] == "^":
                out.append("^")
                i += 1
            if i < n and pattern[i] == "]":
                out.append("]")
                i += 1
            continue
        if pattern.startswith("(?<", i):
            ident = _IDENT.match(pattern, i + 3)
            if ident and pattern.startswith(">", ident.end()):
                out.append(f"(?P<{ident.group()}>")
                i = ident.end() + 1
                continue
        out.append(ch)
        i += 1
    return "".join(out)


def compile_rule_pattern(pattern: str) -> re.Pattern[str]:
    """Compile a user pattern after normalising its named-group syntax; raises ``re.error``."""
    return re.compile(normalise_group_syntax(pattern))

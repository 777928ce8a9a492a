"""``context-engine install-skill``: write the agent skill (:mod:`context_engine.skill`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from context_engine.skill import SkillEdited, SkillPathUnusable, install, skill_path, skill_text


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "install-skill",
        help="write the agent skill stating the access-control rules (./.claude/skills/context-engine/)",
        description=(
            "Write SKILL.md, which tells a coding agent the rules this library relies on (principals TRUSTED / [] "
            "/ never None, scope ceilings, redaction keys, auth and principals on every mount), to "
            "./.claude/skills/context-engine/ or, with --global, to ~/.claude/skills/context-engine/. "
            "An edited skill is never overwritten without --force."
        ),
    )
    parser.add_argument("--global", dest="global_", action="store_true", help="install under the home directory")
    parser.add_argument("--print", dest="print_only", action="store_true", help="write the skill to stdout only")
    parser.add_argument("--force", action="store_true", help="replace a skill file that was edited")
    return parser


def run(args: argparse.Namespace) -> int:
    if args.print_only:
        sys.stdout.write(skill_text())
        return 0
    path = skill_path(global_=args.global_)
    try:
        done = install(path, force=args.force)
    except (SkillEdited, SkillPathUnusable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"skill {done.action}: {done.path}")
    return 0

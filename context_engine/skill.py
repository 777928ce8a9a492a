"""The agent skill that states the access-control rules, and writing it (``context-engine install-skill``).

The skill is a Markdown file with a ``name``/``description`` front matter, in the layout coding
agents read skills from: ``.claude/skills/context-engine/SKILL.md`` under the current directory,
or under the home directory with ``--global``. It becomes instructions inside the user's agent, so
it is written only by this explicit command, never by installing the package.

Each written file ends with a comment recording the SHA-256 of the text above it. A file whose
text no longer matches its recorded hash (or has none) was edited by someone, and is replaced
only with ``--force``; an unedited file from an older version is simply updated.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

from context_engine.errors import ContextEngineError

SKILL_NAME = "context-engine"
#: where the skill goes, relative to the project directory or (``--global``) the home directory
SKILL_PATH = Path(".claude") / "skills" / SKILL_NAME / "SKILL.md"
_MARK = re.compile(r"\n<!-- written by context-engine install-skill; sha256 ([0-9a-f]{64}) -->\n\Z")


class SkillEdited(ContextEngineError):
    """The skill file on disk was changed after we wrote it; replacing it needs ``--force``."""

    code = "skill_edited"
    status = 409


class SkillPathUnusable(ContextEngineError):
    """Something other than a regular file is where the skill should go."""

    code = "skill_path_unusable"
    status = 409


@dataclass(frozen=True)
class Installed:
    path: Path
    action: Literal["created", "updated", "replaced", "unchanged"]  # "replaced": an edited file, with --force


def skill_text() -> str:
    """The skill as shipped, without the hash comment."""
    return (resources.files("context_engine") / "skills" / SKILL_NAME / "SKILL.md").read_text(encoding="utf-8")


def stamped(text: str) -> str:
    """The text followed by the comment recording its hash: what is written to disk."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return f"{text}\n<!-- written by context-engine install-skill; sha256 {digest} -->\n"


def is_unedited(content: str) -> bool:
    """True when the file still holds exactly the text its hash comment was computed over."""
    found = _MARK.search(content)
    if found is None:
        return False
    body = content[: found.start()]
    return hashlib.sha256(body.encode("utf-8")).hexdigest() == found.group(1)


def skill_path(*, global_: bool, project_dir: Path | None = None, home: Path | None = None) -> Path:
    base = (home or Path.home()) if global_ else (project_dir or Path.cwd())
    return base / SKILL_PATH


def install(path: Path, *, force: bool = False) -> Installed:
    """Write the skill to ``path``, refusing to replace an edited file unless ``force``."""
    wanted = stamped(skill_text())
    action: Literal["created", "updated", "replaced"] = "created"
    if path.exists() or path.is_symlink():
        if not path.is_file():
            raise SkillPathUnusable(f"{path} exists and is not a regular file; remove it to install the skill there")
        current = path.read_text(encoding="utf-8", errors="replace")
        if current == wanted:
            return Installed(path, "unchanged")
        if is_unedited(current):
            action = "updated"
        elif force:
            action = "replaced"
        else:
            raise SkillEdited(
                f"{path} has been edited since install-skill wrote it (or was not written by it); "
                "not overwriting it. Re-run with --force to replace it with the shipped skill."
            )
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(wanted, encoding="utf-8")
    partial.replace(path)  # a reader never sees half a skill
    return Installed(path, action)

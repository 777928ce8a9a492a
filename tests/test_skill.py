"""``context-engine install-skill``: where the skill goes, what it says, and that edits are kept."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import context_engine
import routing_core
from context_engine import skill
from context_engine.cli import main as cli_main
from context_engine.config import ContextEngineConfig

PROJECT_SKILL = Path(".claude/skills/context-engine/SKILL.md")


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A project directory as the working directory and a separate home directory."""
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    home.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv("HOME", str(home))
    return project, home


def _front_matter(text: str) -> dict[str, str]:
    assert text.startswith("---\n")
    head, _, _ = text[4:].partition("\n---\n")
    return yaml.safe_load(head)


def test_print_writes_the_skill_to_stdout_only(dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    project, home = dirs
    assert cli_main(["install-skill", "--print"]) == 0
    out = capsys.readouterr().out
    assert out == skill.skill_text()
    meta = _front_matter(out)
    assert meta["name"] == "context-engine" and "access-control" in meta["description"].lower()
    assert not (project / ".claude").exists() and not (home / ".claude").exists()


def test_the_skill_states_the_invariants_by_their_real_names() -> None:
    text = skill.skill_text()
    for phrase in (
        "principals=TRUSTED", "principals=[]", "Never pass `None`", "scope ceiling", "UNSCOPED",
        "redaction_secret_key", "auth=", "principals=", "Returning `None` is answered with",
        "create_router", "create_flask_blueprint", "create_django_urlpatterns", "routing_core.AuthError",
    ):
        assert phrase in text, phrase
    # the names it tells an agent to use exist in the library
    assert context_engine.TRUSTED is not None
    for name in ("create_router", "create_flask_blueprint", "create_django_urlpatterns", "ContextEngine"):
        assert name in context_engine.__all__
    assert routing_core.AuthError is not None
    assert "redaction_secret_key" in ContextEngineConfig.model_fields


def test_install_in_the_project_then_again(dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    project, home = dirs
    assert cli_main(["install-skill"]) == 0
    target = project / PROJECT_SKILL
    assert f"skill created: {target}" in capsys.readouterr().out
    written = target.read_text(encoding="utf-8")
    assert written.startswith(skill.skill_text()) and skill.is_unedited(written)
    assert _front_matter(written)["name"] == "context-engine"
    assert not (home / ".claude").exists()
    assert not list(target.parent.glob("*.partial"))

    assert cli_main(["install-skill"]) == 0
    assert f"skill unchanged: {target}" in capsys.readouterr().out
    assert target.read_text(encoding="utf-8") == written


def test_install_global_goes_under_home(dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    project, home = dirs
    assert cli_main(["install-skill", "--global"]) == 0
    target = home / PROJECT_SKILL
    assert f"skill created: {target}" in capsys.readouterr().out
    assert skill.is_unedited(target.read_text(encoding="utf-8"))
    assert not (project / ".claude").exists()


def test_an_edited_skill_is_kept_without_force(dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    project, _ = dirs
    assert cli_main(["install-skill"]) == 0
    target = project / PROJECT_SKILL
    edited = target.read_text(encoding="utf-8").replace("## 5. Before you finish", "## 5. Our house rules")
    target.write_text(edited, encoding="utf-8")
    capsys.readouterr()

    assert cli_main(["install-skill"]) == 1
    err = capsys.readouterr().err
    assert str(target) in err and "has been edited" in err and "--force" in err
    assert target.read_text(encoding="utf-8") == edited

    with pytest.raises(skill.SkillEdited) as info:
        skill.install(target)
    assert info.value.code == "skill_edited" and info.value.status == 409

    assert cli_main(["install-skill", "--force"]) == 0
    assert f"skill replaced: {target}" in capsys.readouterr().out
    assert target.read_text(encoding="utf-8") == skill.stamped(skill.skill_text())


def test_a_hand_written_file_is_treated_as_edited(dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    project, _ = dirs
    target = project / PROJECT_SKILL
    target.parent.mkdir(parents=True)
    target.write_text("---\nname: context-engine\ndescription: ours\n---\nOur own notes.\n", encoding="utf-8")
    assert cli_main(["install-skill"]) == 1
    assert "--force" in capsys.readouterr().err
    assert target.read_text(encoding="utf-8").endswith("Our own notes.\n")


def test_an_unedited_older_skill_is_updated(dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    project, _ = dirs
    target = project / PROJECT_SKILL
    target.parent.mkdir(parents=True)
    target.write_text(skill.stamped("---\nname: context-engine\ndescription: an older release\n---\nOld.\n"))
    assert cli_main(["install-skill"]) == 0
    assert f"skill updated: {target}" in capsys.readouterr().out
    assert target.read_text(encoding="utf-8") == skill.stamped(skill.skill_text())


def test_a_directory_in_the_way_is_refused(dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    project, _ = dirs
    (project / PROJECT_SKILL).mkdir(parents=True)
    assert cli_main(["install-skill", "--force"]) == 1
    assert "is not a regular file" in capsys.readouterr().err

"""The files every package has: the license pyproject declares, a changelog, and ``py.typed`` in each
package the wheel ships (hatch packs every file of a package directory, so the marker travels)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_license_file_is_the_license_pyproject_declares() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]
    text = (ROOT / "LICENSE").read_text()
    assert declared == "Apache-2.0"
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text


def test_every_wheel_package_is_marked_typed_and_a_changelog_exists() -> None:
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    for package in packages["packages"]:
        assert (ROOT / package / "py.typed").is_file(), package
    assert (ROOT / "CHANGELOG.md").read_text().startswith("# Changelog")

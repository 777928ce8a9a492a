"""tests/scratch.py: the suite's temporary files go to memory only into a directory that is safely ours."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests import scratch


def test_a_tmpdir_the_caller_set_is_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    scratch.choose()
    assert os.environ["TMPDIR"] == str(tmp_path)


def test_the_directory_is_made_once_and_reused(tmp_path: Path) -> None:
    first = scratch.own_directory(tmp_path)
    assert first is not None and first.parent == tmp_path
    assert not first.stat().st_mode & 0o022  # nobody else may write into it
    assert scratch.own_directory(tmp_path) == first


def test_a_directory_others_may_write_or_a_link_is_refused(tmp_path: Path) -> None:
    path = tmp_path / f"context-engine-tests-{os.getuid()}"
    path.mkdir()
    path.chmod(0o777)
    assert scratch.own_directory(tmp_path) is None
    path.rmdir()
    elsewhere = Path(tempfile.mkdtemp(dir=tmp_path))
    path.symlink_to(elsewhere)
    assert scratch.own_directory(tmp_path) is None


def test_only_a_tmpfs_mount_point_counts() -> None:
    if os.path.ismount(scratch.SHM):  # the kernel's own answer for its filesystem type, through stat(1)
        kind = subprocess.run(["stat", "-f", "-c", "%T", str(scratch.SHM)], capture_output=True, text=True, check=True)
        assert scratch.is_tmpfs(scratch.SHM) == (kind.stdout.strip() == "tmpfs")
    assert not scratch.is_tmpfs(Path("/proc"))
    assert not scratch.is_tmpfs(Path(__file__).parent)

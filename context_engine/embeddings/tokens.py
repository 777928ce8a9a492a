"""Token counts for chunking and batch budgets: cl100k when allowed, else an over-estimate.

Why three modes: ingest must never reach the network unasked, yet an exact count packs batches
tighter and keeps chunks nearer their target size. ``auto`` uses tiktoken's cl100k only when its
encoding file is already in tiktoken's cache (checked against the published hash, so tiktoken
will read it and never re-fetch it); ``exact`` lets tiktoken fetch the file once (an explicit
opt-in); ``estimate`` never imports tiktoken. The estimate is UTF-8 bytes divided by
``token_bytes_ratio``, rounded up, which over-counts English and most code. The ``safety_margin``
headroom belongs to batch token budgets only (applied where batches are planned), never to per-input caps.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from context_engine.errors import ConfigError

log = logging.getLogger("context_engine.embeddings")

TokenizerMode = Literal["auto", "exact", "estimate"]

#: where tiktoken fetches cl100k from, and the SHA-256 it checks the file against
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
INSTALL_HINT = 'pip install "pg-context-engine[tiktoken]"'


def estimate_tokens(text: str, token_bytes_ratio: float) -> int:
    """Over-estimate from UTF-8 bytes: works for every provider, offline, in microseconds."""
    return max(1, int(len(text.encode("utf-8")) / token_bytes_ratio) + 1)


def head_tokens(text: str, limit: int, count_tokens: Callable[[str], int]) -> str:
    """The longest whole-word prefix of ``text`` within ``limit`` tokens (binary search on words)."""
    words = text.split()
    if count_tokens(" ".join(words)) <= limit:
        return " ".join(words)
    lo, hi = 0, len(words)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(" ".join(words[:mid])) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo])


def tiktoken_cache_file(url: str = CL100K_URL) -> Path | None:
    """Where tiktoken keeps ``url`` once fetched, or None when its cache is switched off.

    tiktoken's rule: ``TIKTOKEN_CACHE_DIR``, else ``DATA_GYM_CACHE_DIR``, else ``data-gym-cache`` in
    the temp directory; an empty value disables the cache; the file is named by the URL's SHA-1.
    """
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        directory = os.environ["TIKTOKEN_CACHE_DIR"]
    elif "DATA_GYM_CACHE_DIR" in os.environ:
        directory = os.environ["DATA_GYM_CACHE_DIR"]
    else:
        directory = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    if directory == "":
        return None
    return Path(directory) / hashlib.sha1(url.encode()).hexdigest()


def cl100k_is_cached() -> bool:
    """True when tiktoken would load cl100k from disk: the file is there and its hash matches."""
    path = tiktoken_cache_file()
    if path is None or not path.is_file():
        return False
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() == CL100K_SHA256
    except OSError:
        return False


def _load_cl100k() -> Any:
    import tiktoken

    return tiktoken.get_encoding("cl100k_base")


class TokenCounter:
    """Counts tokens the way ``embedding.tokenizer`` allows; the choice is made once, on first use.

    ``exact`` tells whether counts come from the tokenizer (True) or the estimate (False).
    """

    def __init__(self, mode: TokenizerMode, token_bytes_ratio: float):
        self.mode = mode
        self._ratio = token_bytes_ratio
        self._lock = threading.Lock()
        self._encode: Callable[[str], list[int]] | None = None
        self._decided = mode == "estimate"

    @property
    def exact(self) -> bool:
        self._decide()
        return self._encode is not None

    def count(self, text: str) -> int:
        self._decide()
        if self._encode is None:
            return estimate_tokens(text, self._ratio)
        return max(1, len(self._encode(text)))

    def _decide(self) -> None:
        if self._decided:
            return
        with self._lock:
            if self._decided:
                return
            self._encode = self._exact_encoder()
            self._decided = True

    def _exact_encoder(self) -> Callable[[str], list[int]] | None:
        installed = importlib.util.find_spec("tiktoken") is not None
        if self.mode == "auto":
            if not installed:
                log.info("embedding.tokenizer is 'auto' and tiktoken is not installed: token counts are estimated")
                return None
            if not cl100k_is_cached():
                log.info(
                    "embedding.tokenizer is 'auto' and cl100k is not in tiktoken's cache: token counts are "
                    "estimated (set tokenizer='exact' once to fetch it)"
                )
                return None
        elif not installed:
            raise ImportError(f"embedding.tokenizer 'exact' needs tiktoken: {INSTALL_HINT}")
        try:
            encoding = _load_cl100k()
        except Exception as exc:  # a fetch or a file that failed: name the setting, not the URL's internals
            raise ConfigError(
                f"embedding.tokenizer {self.mode!r} could not load tiktoken's cl100k encoding "
                f"({type(exc).__name__}); use tokenizer='estimate' where it cannot be fetched"
            ) from None
        return lambda text: encoding.encode(text, disallowed_special=())

"""A fast, deterministic stand-in embedder: each word adds to a few hashed dimensions.

For tests about storage and revisions, where what matters is that the same text always gets the
same vector and related texts get related vectors, not the quality of a real model.
"""

from __future__ import annotations

import hashlib
import math
import re

from context_engine.embeddings.base import Embedder, InputKind

_WORD = re.compile(r"\w+")


class WordEmbedder(Embedder):
    provider, model, max_input_tokens = "test", "words", 8192

    def __init__(self, dim: int = 16):
        self.dim = dim

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        for word in _WORD.findall(text.lower()):
            digest = hashlib.sha256(word.encode()).digest()
            vector[digest[0] % self.dim] += 1.0
            vector[digest[1] % self.dim] += 0.5
        norm = math.sqrt(sum(x * x for x in vector)) or 1.0
        return [x / norm if any(vector) else 1.0 / math.sqrt(self.dim) for x in vector]

    async def embed(self, texts: list[str], *, kind: InputKind = "document") -> list[list[float]]:
        return [self._vector(t) for t in texts]

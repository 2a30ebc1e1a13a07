"""A deterministic hashing embedder: fast, offline, no model; for tests and smoke runs.

Each lower-cased word and each of its character trigrams is hashed (BLAKE2b) to one of
``dim`` buckets with a sign, counts are summed and the vector is L2-normalised. Texts
that share words or word pieces get a positive cosine; it carries no meaning beyond that.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

_WORD = re.compile(r"\w+", re.UNICODE)


class HashingEmbedder:
    """Feature-hashing embedder.

    Args:
        dim: vector length (default 384, the size of all-MiniLM-L6-v2).
        name: stored model name; defaults to ``f"hashing-{dim}"``.
        window_chars: characters per embedded window of a long note (None: 4,096, the cap
            of :mod:`cortex_pg.embeddings.windows`).
    """

    def __init__(self, dim: int = 384, name: str | None = None, window_chars: int | None = None) -> None:
        if dim <= 0:
            raise ValueError("dim must be positive")
        self.dim = dim
        self.name = name or f"hashing-{dim}"
        if window_chars is not None:
            self.window_chars = window_chars

    def _features(self, text: str) -> list[str]:
        words = _WORD.findall(text.lower())
        feats = list(words)
        for w in words:
            padded = f"#{w}#"
            feats.extend(padded[i : i + 3] for i in range(len(padded) - 2))
        return feats

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed ``texts``; returns ``len(texts)`` unit vectors of length ``dim`` (zero text -> e0)."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feat in self._features(text):
                digest = hashlib.blake2b(feat.encode(), digest_size=8).digest()
                h = int.from_bytes(digest, "little")
                out[row, h % self.dim] += 1.0 if (h >> 63) & 1 else -1.0
        norms = np.linalg.norm(out, axis=1)
        for row, norm in enumerate(norms):
            if norm == 0:
                out[row, 0] = 1.0
            else:
                out[row] /= norm
        return out.tolist()

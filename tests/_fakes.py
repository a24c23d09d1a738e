"""Test doubles owned by the Workspace suite (independent of ``agently_vecmem.testing``)."""

from __future__ import annotations

import hashlib
import re

import numpy as np

from agently_vecmem.embedders.base import Embedder

_WORD = re.compile(r"\w+")


class HashEmbedder(Embedder):
    """Deterministic bag-of-words hashing embedder: texts sharing words get similar vectors.

    Every word adds a signed unit to a bucket chosen by a stable hash; an empty text embeds to a fixed
    non-zero vector so nothing is ever all zeros.
    """

    def __init__(self, dim: int = 32, model_id: str | None = None) -> None:
        self.dim = dim
        self.model_id = model_id or f"test-hash-{dim}"
        self.calls = 0

    def _embed(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            words = _WORD.findall(text.lower()) or ["<empty>"]
            for word in words:
                digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
                bucket = int.from_bytes(digest[:4], "little") % self.dim
                out[row, bucket] += 1.0 if digest[4] & 1 else -1.0
            if not out[row].any():
                out[row, 0] = 1.0
        return out


def unit_vectors(n: int, dim: int, seed: int = 0) -> np.ndarray:
    """``n`` random unit vectors (float32), reproducible."""
    rng = np.random.default_rng(seed)
    vecs = rng.normal(size=(n, dim)).astype(np.float32)
    return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)

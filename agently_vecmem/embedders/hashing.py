"""A deterministic hashing embedder: no model, no semantics, stable across processes.

Used by fast tests and by ``--embedder hash`` in the CLI (e.g. to try the CLI without loading a model).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

import numpy as np

from ..errors import ConfigurationError
from .base import Embedder

__all__ = ["DeterministicEmbedder"]

_WORD_RE = re.compile(r"\w+", re.UNICODE)


class DeterministicEmbedder(Embedder):
    """A hashing embedder: word tokens and character trigrams, signed-hashed into ``dim`` buckets.

    Stable across processes and platforms (uses ``hashlib.blake2b``, not Python's salted ``hash``).
    Texts that share words score a high cosine; there is no semantics (synonyms do not match).

    Args:
        dim: Vector dimension.
        trigram_weight: Weight of each character trigram relative to a whole word (1.0).
    """

    model_id = "deterministic-hash-v1"

    def __init__(self, dim: int = 384, *, trigram_weight: float = 0.3) -> None:
        if dim < 8:
            raise ConfigurationError(f"dim must be >= 8, got {dim}")
        self.dim = int(dim)
        self.trigram_weight = float(trigram_weight)

    def _features(self, text: str) -> Iterable[tuple[str, float]]:
        words = _WORD_RE.findall(text.lower())
        if not words:
            yield ("\x00empty", 1.0)
            return
        for word in words:
            yield ("w:" + word, 1.0)
            padded = f"#{word}#"
            for i in range(len(padded) - 2):
                yield ("t:" + padded[i : i + 3], self.trigram_weight)

    def _embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature, weight in self._features(text):
                digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
                value = int.from_bytes(digest, "little")
                sign = 1.0 if value & 1 else -1.0
                out[row, (value >> 1) % self.dim] += sign * weight
        return out

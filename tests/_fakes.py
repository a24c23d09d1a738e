"""Small test helpers on top of ``agently_vecmem.testing`` (importable by name: conftest puts tests/ on sys.path)."""

from __future__ import annotations

import numpy as np

from agently_vecmem.testing import DeterministicEmbedder


def embedder_of(model_id: str, dim: int = 384) -> DeterministicEmbedder:
    """A :class:`DeterministicEmbedder` recorded as ``model_id``: another model, as far as a store can tell."""
    embedder = DeterministicEmbedder(dim)
    embedder.model_id = model_id
    return embedder


def unit_vectors(n: int, dim: int, seed: int = 0) -> np.ndarray:
    """``n`` random unit vectors (float32), reproducible."""
    rng = np.random.default_rng(seed)
    vecs = rng.normal(size=(n, dim)).astype(np.float32)
    return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)

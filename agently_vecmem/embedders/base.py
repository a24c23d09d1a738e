"""The embedder interface: the one outside service that turns text into vectors."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

__all__ = ["Embedder", "normalize_rows"]


def normalize_rows(matrix: np.ndarray) -> np.ndarray:
    """L2-normalize each row (zero rows stay zero); returns float32."""
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms


class Embedder(ABC):
    """Turns texts into L2-normalized float32 vectors of a fixed dimension.

    Implementations provide :meth:`_embed` (a batch of texts → a 2-D array) plus ``model_id`` and
    ``dim``; the public methods are thin wrappers. ``model_id`` and ``dim`` are recorded on every
    Chroma collection, so a collection is never searched with vectors from another model.
    """

    #: A stable identifier of the model (recorded in collection metadata).
    model_id: str
    #: Vector dimension.
    dim: int

    @abstractmethod
    def _embed(self, texts: list[str]) -> np.ndarray:
        """Embed a non-empty batch of texts; returns an array of shape (len(texts), dim)."""

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed documents for storage. Returns a (n, dim) float32 array of unit vectors."""
        texts = [str(t) for t in texts]
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = normalize_rows(self._embed(texts))
        if out.shape != (len(texts), self.dim):
            from ..errors import EmbedderMismatchError

            raise EmbedderMismatchError(
                f"embedder {self.model_id!r} returned shape {out.shape}, expected ({len(texts)}, {self.dim})"
            )
        return out

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one search query. Returns a (dim,) float32 unit vector."""
        return self.embed_documents([text])[0]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model_id={self.model_id!r}, dim={self.dim})"

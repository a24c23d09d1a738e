"""The embedder interface: the one outside service that turns text into vectors."""

from __future__ import annotations

import importlib.util
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Embedder", "LazyModelEmbedder", "normalize_rows", "package_dir"]


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


class LazyModelEmbedder(Embedder):
    """An embedder whose model comes from an optional package and is loaded once, on first use, thread-safely.

    Subclasses implement :meth:`_load` (import the package and build the model, raising
    ``ConfigurationError`` with the install hint when it is missing) and :meth:`_embed`, usually with
    :meth:`_in_batches`.

    Args:
        batch_size: texts per model call.
        model_id: identifier recorded in collections.

    Raises:
        ConfigurationError: ``batch_size`` < 1.
    """

    def __init__(self, *, batch_size: int, model_id: str) -> None:
        if batch_size < 1:
            from ..errors import ConfigurationError

            raise ConfigurationError("batch_size must be >= 1")
        self.batch_size = int(batch_size)
        self.model_id = model_id
        self._model: Any = None
        self._lock = threading.Lock()

    @abstractmethod
    def _load(self) -> Any:
        """Import the package and return the ready model."""

    @property
    def model(self) -> Any:
        """The loaded model (loads on first access)."""
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._model = self._load()
        return self._model

    def _in_batches(self, texts: list[str], encode: Callable[[list[str]], Any]) -> np.ndarray:
        """``encode`` over batches of ``batch_size`` texts, as one float32 ``(len(texts), dim)`` array. An empty
        or blank text is embedded as one space, so one bad item cannot fail a batch."""
        texts = [t if t.strip() else " " for t in texts]
        parts = [np.asarray(encode(texts[i : i + self.batch_size]), dtype=np.float32).reshape(-1, self.dim)
                 for i in range(0, len(texts), self.batch_size)]
        return np.concatenate(parts, axis=0)


def package_dir(name: str) -> Path | None:
    """The directory of an installed top-level package (a model package), found without importing (and
    running) it; None when it is not installed."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent

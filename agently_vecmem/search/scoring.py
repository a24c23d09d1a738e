"""Search maths shared by every signal: the dense product, standard units and stable top-k."""

from __future__ import annotations

import numpy as np

__all__ = ["at_positions", "dense_scores", "find_sorted", "top_k", "top_unordered", "zscore"]

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
        # no negated copy of the whole score vector (this is the exact-search hot path); sorting the k
        # indices makes the stable sort below break ties by position
        part = top_unordered(scores, k)
        part.sort()
    else:
        part = np.arange(n)
    return part[(-scores[part]).argsort(kind="stable")]


def find_sorted(ordered: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The index of each of ``values`` in the ascending array ``ordered``, ``-1`` where it is not there."""
    if ordered.size == 0:
        return np.full(values.shape, -1, dtype=np.int64)
    at = np.minimum(np.searchsorted(ordered, values), ordered.size - 1)
    return np.where(ordered[at] == values, at, -1)


def at_positions(rows: np.ndarray, values: np.ndarray, rest: float, positions: np.ndarray) -> np.ndarray:
    """``values`` at ``positions`` where they are listed in ``rows`` (ascending), ``rest`` elsewhere (float32)."""
    out = np.full(positions.size, rest, dtype=np.float32)
    at = find_sorted(rows, positions)
    hit = at >= 0
    out[hit] = values[at[hit]]
    return out


#: Rows per sampled score when :func:`top_unordered` finds its threshold.
_SAMPLE_STRIDE = 64


def top_unordered(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest scores, in no particular order (``argpartition``'s; ties at the k-th
    value may fall either way).

    Over many scores (the sketch's pass over 1M rows) a full ``argpartition`` took ~3 ms here: this takes the
    value ranked ~``2k`` in a strided sample of the scores as a threshold, and partitions only the scores at
    or above it (~0.7 ms); when fewer than ``k`` are (a sample unlike the whole), it partitions them all.
    """
    n = scores.shape[0]
    if n <= k:
        return np.arange(n)
    if n >= 32 * _SAMPLE_STRIDE and n >= 32 * k:
        sample = scores[::_SAMPLE_STRIDE]
        rank = min(sample.shape[0], 2 * k // _SAMPLE_STRIDE + 8)  # (8: a small k's threshold is not the sample's top)
        threshold = np.partition(sample, sample.shape[0] - rank)[sample.shape[0] - rank]
        above = np.flatnonzero(scores >= threshold)
        if above.shape[0] >= k:
            return above[scores[above].argpartition(above.shape[0] - k)[above.shape[0] - k:]]
    return scores.argpartition(n - k)[n - k:]

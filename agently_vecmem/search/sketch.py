"""A low-dimensional sketch of a large scope's vectors: where its dense candidates come from without reading
every full vector.

An exact dense pass reads every vector of a scope: at 1M records of 384 floats that is 1.5 GB per query,
~100 ms on this machine's memory bus whatever the code (``benchmarks/bench_pool.py``). The sketch keeps each
row projected on the 31 principal directions of a sample of the scope, plus the norm of what the projection
leaves out (32 floats for 384: a twelfth of the bytes), so one pass over it ranks every row approximately;
the best few thousand rows are then scored exactly from their full vectors. The same sample gives the dense
signal's mean and spread over the whole scope (what the fusion's standard units need) without the full pass.

A sketch belongs to the vector rows of a scope (``search.view._Rows``) and is shared by the snapshots on
them, as the rows are: appending rows projects only the new ones; a scope whose rows are copied (a
compaction after removals, a rebuild) gets a new sketch when it is next asked for one.
"""

from __future__ import annotations

import numpy as np

from ..errors import WorkspaceError
from .encoded import mapping_with_room, resident_bytes

__all__ = ["Sketch", "SKETCH_DIMS", "SAMPLE_ROWS", "RESIDUAL_WEIGHT"]

#: Floats in a row's code: its projection on ``SKETCH_DIMS - 1`` directions, then its residual's norm. A
#: multiple of 8: a BLAS matrix-vector product over 1M rows of 32 floats took 9 ms here, of 31 or 33 floats
#: 16-18 ms.
SKETCH_DIMS = 32
#: Rows of the scope kept whole to choose the projection and estimate the dense signal's mean and spread
#: (the spread's standard error is ~1/sqrt(2 * 8192), under 1%).
SAMPLE_ROWS = 8192
#: Weight of what the projection leaves out: a row ranks by ``p(q)·p(x) + RESIDUAL_WEIGHT · |q - p(q)|·|x -
#: p(x)|`` (at 1 the Cauchy-Schwarz upper bound of its cosine). Without it a record unlike most of the scope (a
#: user's fact among thousands of other sentences) projects poorly and is missed: on the probe at 100k records
#: the gold fact ranked in the sketch's top 2,000 for 53% of the questions, 91% at 0.5 and 94% at 1; 0.5 keeps
#: the most of the exact top 10 there and on the scale corpus (chosen on those two: ``benchmarks/RESULTS.md``,
#: "Large scopes: a pool of candidates").
RESIDUAL_WEIGHT = 0.5
#: Rows projected per matrix product when a sketch is built (bounds the temporary memory).
_CHUNK = 65536


class Sketch:
    """The projected rows of one scope's vectors (by row, like the vectors), with capacity to grow.

    Args:
        vectors: the rows ``[0, size)`` to sketch (unit vectors; holes of removed records included).
        capacity: rows to allocate (at least ``len(vectors)``).
        dims: floats per row's code: the projection on ``dims - 1`` directions (at most the vectors'
            dimension) and the norm of the rest.
        seed: the sample's seed (a sketch of the same rows is the same sketch).
    """

    __slots__ = ("basis", "codes", "sample", "size", "private_from")

    def __init__(self, vectors: np.ndarray, capacity: int, *, dims: int = SKETCH_DIMS, seed: int = 0) -> None:
        n, dim = vectors.shape
        rng = np.random.default_rng(seed)
        picked = np.sort(rng.choice(n, size=min(n, SAMPLE_ROWS), replace=False)) if n > SAMPLE_ROWS else np.arange(n)
        self.sample = np.ascontiguousarray(vectors[picked], dtype=np.float32)
        # principal directions of the rows about the origin (inner products are what is ranked)
        moment = self.sample.astype(np.float64).T @ self.sample.astype(np.float64)
        _, vecs = np.linalg.eigh(moment)
        self.basis = np.ascontiguousarray(vecs[:, ::-1][:, :min(dims - 1, dim)], dtype=np.float32)
        # a row's code: its projection, then the norm of the rest of it (the residual)
        self.codes = np.empty((max(capacity, n), self.basis.shape[1] + 1), dtype=np.float32)
        for start in range(0, n, _CHUNK):
            self._project(vectors[start:start + _CHUNK], start)
        self.size = n
        self.private_from: int | None = None  # as ``search.view._Rows.private_from``

    @classmethod
    def restored(cls, basis: np.ndarray, sample: np.ndarray, codes: np.ndarray, *, in_place: bool = False) -> Sketch:
        """A sketch from the parts :meth:`codes_of` and :attr:`basis` / :attr:`sample` gave (a persisted
        snapshot's): ``codes`` may be read-only (memory-mapped); an append copies them first, unless
        ``in_place`` and they are the first rows of a copy-on-write mapping with spare rows
        (:func:`~.encoded.mapping_with_room`): then appends write there, as the snapshot's vectors do.

        Raises:
            WorkspaceError: the parts do not fit together.
        """
        if basis.ndim != 2 or sample.ndim != 2 or codes.ndim != 2 or sample.shape[1] != basis.shape[0] \
                or codes.shape[1] != basis.shape[1] + 1:
            raise WorkspaceError(f"sketch parts do not fit: basis {basis.shape}, sample {sample.shape}, "
                                 f"codes {codes.shape}")
        sketch = cls.__new__(cls)
        sketch.basis = np.ascontiguousarray(basis, dtype=np.float32)
        sketch.sample = np.ascontiguousarray(sample, dtype=np.float32)
        sketch.size, sketch.private_from = int(codes.shape[0]), None
        room = mapping_with_room(codes) if in_place else None
        if room is not None:
            codes, sketch.private_from = room, sketch.size
        sketch.codes = codes
        return sketch

    def codes_of(self, rows: slice | np.ndarray) -> np.ndarray:
        """The codes of some rows (what a persisted snapshot keeps, in its record order)."""
        return self.codes[:self.size][rows]

    def _project(self, vectors: np.ndarray, at: int) -> None:
        """Write the codes of ``vectors`` into rows ``[at, at + len(vectors))``."""
        vectors = np.asarray(vectors, dtype=np.float32)
        out = self.codes[at:at + len(vectors)]
        np.matmul(vectors, self.basis, out=out[:, :-1])
        rest = np.einsum("ij,ij->i", vectors, vectors) - np.einsum("ij,ij->i", out[:, :-1], out[:, :-1])
        out[:, -1] = np.sqrt(np.maximum(rest, 0.0))

    def _query(self, query: np.ndarray) -> np.ndarray:
        """The query's side of a code: its projection, then ``RESIDUAL_WEIGHT`` times its residual's norm."""
        projected = query @ self.basis
        rest = float(query @ query) - float(projected @ projected)
        return np.append(projected, np.float32(RESIDUAL_WEIGHT * max(rest, 0.0) ** 0.5)).astype(np.float32)

    @property
    def nbytes(self) -> int:
        """Bytes held in this process: the projected rows (with their spare capacity; none when they are
        memory-mapped from a persisted snapshot, but those appended into its spare rows), the sample and the
        basis."""
        codes = self.codes if self.private_from is None else self.codes[:self.size]
        return resident_bytes(codes, self.private_from) + int(self.sample.nbytes + self.basis.nbytes)

    def append(self, n: int, vectors: np.ndarray) -> None:
        """Project ``vectors`` into rows ``[n, n + len(vectors))`` (``n`` is :attr:`size`; the caller holds the
        rows' lock, as for the vectors)."""
        m = len(vectors)
        if n + m > self.codes.shape[0] or not self.codes.flags.writeable:
            grown = np.empty((max(2 * self.codes.shape[0], n + m), self.codes.shape[1]), dtype=np.float32)
            grown[:n] = self.codes[:n]
            self.codes, self.private_from = grown, None
        if m:
            self._project(vectors, n)
        self.size = n + m

    def top_rows(self, query: np.ndarray, end: int, k: int) -> np.ndarray:
        """The ``k`` rows of ``[0, end)`` whose projection scores highest for ``query`` (unordered)."""
        end = min(end, self.size)
        if end <= k:
            return np.arange(end)
        # a BLAS matrix-vector product: on 1M x 32 rows 5-9 ms against einsum's 13 (benchmarks/RESULTS.md,
        # "Large scopes: a pool of candidates"); the full-vector product keeps einsum (search.scoring)
        approx = self.codes[:end] @ self._query(query)
        return approx.argpartition(end - k)[end - k:]

    def dense_moments(self, query: np.ndarray) -> tuple[float, float]:
        """The mean and standard deviation of the cosine of ``query`` to the scope's rows, estimated on the
        sample."""
        scores = self.sample @ np.asarray(query, dtype=np.float32)
        return float(scores.mean()), float(scores.std())

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

A sketch restored from a persisted snapshot also carries the rows at half width (bfloat16: the upper 16 bits
of each float32, rounded; 768 MB at 1M records of 384 floats, against 1.5 GB): the pool's candidates are
scored from them, so a worker reading a scope from its snapshot never touches the full rows' pages in a
query. A mapped page, once touched, stays in the process's resident set, and each query's few thousand
candidates are spread over the whole file (the kernel maps a large folio of the page cache, up to 2 MB, on a
touch): in a fresh 1M-record worker one pool query mapped 1.3 GB of the full rows. bfloat16 rather than
float16: numpy widens it with a copy (~1 ms for 5,000 rows) where float16 takes ~3 ms; its 8 significant
bits put a cosine within ~1e-4 of the float32 one (a component's relative error is at most ``2**-8``);
``benchmarks/bench_pool.py`` measures the top 10 against the exact path.
"""

from __future__ import annotations

import numpy as np

from ..errors import WorkspaceError
from .encoded import mapping_with_room, resident_bytes
from .scoring import top_unordered

__all__ = ["Sketch", "SKETCH_DIMS", "SAMPLE_ROWS", "RESIDUAL_WEIGHT", "to_bfloat16", "from_bfloat16"]

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

    __slots__ = ("basis", "codes", "sample", "size", "private_from", "half", "_moments")

    def __init__(self, vectors: np.ndarray, capacity: int, *, dims: int = SKETCH_DIMS, seed: int = 0) -> None:
        n, dim = vectors.shape
        rng = np.random.default_rng(seed)
        picked = np.sort(rng.choice(n, size=min(n, SAMPLE_ROWS), replace=False)) if n > SAMPLE_ROWS else np.arange(n)
        self.sample = np.ascontiguousarray(vectors[picked], dtype=np.float32)
        # principal directions of the rows about the origin (inner products are what is ranked): the eigenvectors
        # of the second moment
        self._moments: tuple[np.ndarray, np.ndarray] | None = _sample_moments(self.sample)
        _, vecs = np.linalg.eigh(self._moments[1])
        self.basis = np.ascontiguousarray(vecs[:, ::-1][:, :min(dims - 1, dim)], dtype=np.float32)
        # a row's code: its projection, then the norm of the rest of it (the residual)
        self.codes = np.empty((max(capacity, n), self.basis.shape[1] + 1), dtype=np.float32)
        for start in range(0, n, _CHUNK):
            self._project(vectors[start:start + _CHUNK], start)
        self.size = n
        self.private_from: int | None = None  # as ``search.view._Rows.private_from``
        #: the rows at half width (bfloat16 bits, ``uint16``), what the pool's scoring reads (a restored
        #: sketch's: module docstring)
        self.half: np.ndarray | None = None

    @classmethod
    def restored(cls, basis: np.ndarray, sample: np.ndarray, codes: np.ndarray, *, half: np.ndarray | None = None,
                 in_place: bool = False) -> Sketch:
        """A sketch from the parts :meth:`codes_of` and :attr:`basis` / :attr:`sample` gave (a persisted
        snapshot's), and ``half``: the same rows' vectors at half width (:func:`to_bfloat16`), when the
        snapshot has them.
        ``codes`` and ``half`` may be read-only (memory-mapped); an append copies them first, unless
        ``in_place`` and they are the first rows of copy-on-write mappings with spare rows
        (:func:`~.encoded.mapping_with_room`): then appends write there, as the snapshot's vectors do.

        Raises:
            WorkspaceError: the parts do not fit together.
        """
        if basis.ndim != 2 or sample.ndim != 2 or codes.ndim != 2 or sample.shape[1] != basis.shape[0] \
                or codes.shape[1] != basis.shape[1] + 1 or (half is not None and half.shape != (len(codes),
                                                                                              basis.shape[0])):
            raise WorkspaceError(f"sketch parts do not fit: basis {basis.shape}, sample {sample.shape}, "
                                 f"codes {codes.shape}, half rows {None if half is None else half.shape}")
        sketch = cls.__new__(cls)
        sketch.basis = np.ascontiguousarray(basis, dtype=np.float32)
        sketch.sample = np.ascontiguousarray(sample, dtype=np.float32)
        sketch.size, sketch.private_from, sketch._moments = int(codes.shape[0]), None, None
        if in_place:
            codes_room = mapping_with_room(codes)
            half_room = None if half is None else mapping_with_room(half)
            if codes_room is not None and (half is None or half_room is not None):  # (both, or neither in place)
                codes, half = codes_room, half_room
                sketch.private_from = sketch.size
        sketch.codes, sketch.half = codes, half
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

    def half_rows(self, rows: np.ndarray) -> np.ndarray:
        """The vectors of ``rows`` (of ``[0, size)``) from the half-width rows, as float32 (there must be
        half rows: :attr:`half`)."""
        assert self.half is not None
        # (``take`` rather than fancy indexing: ~1.1 against ~1.3 ms for 4,000 sorted rows of a mapped 1M here)
        return from_bfloat16(np.take(self.half, rows, axis=0))

    @property
    def nbytes(self) -> int:
        """Bytes held in this process: the projected rows and half-width rows (with their spare capacity;
        none when they are memory-mapped from a persisted snapshot, but those appended into its spare rows),
        the sample, its moments and the basis."""
        parts = [a for a in (self.codes, self.half) if a is not None]
        if self.private_from is not None:
            parts = [a[:self.size] for a in parts]
        own = self.sample.nbytes + self.basis.nbytes + sum(a.nbytes for a in self._moments or ())
        return sum(resident_bytes(a, self.private_from) for a in parts) + int(own)

    def append(self, n: int, vectors: np.ndarray) -> None:
        """Project ``vectors`` into rows ``[n, n + len(vectors))`` (and write them to the half-width rows,
        when there are some; ``n`` is :attr:`size`; the caller holds the rows' lock, as for the vectors).
        Codes with no room left are copied into this process's memory with room to double, and the half
        rows are dropped: the full rows run out of room with them and are copied too, and the pool then
        reads those."""
        m = len(vectors)
        half = self.half
        if n + m > self.codes.shape[0] or not self.codes.flags.writeable or (
                half is not None and (n + m > half.shape[0] or not half.flags.writeable)):
            grown = np.empty((max(2 * self.codes.shape[0], n + m), self.codes.shape[1]), dtype=np.float32)
            grown[:n] = self.codes[:n]
            self.codes, self.private_from, self.half = grown, None, None
        if m:
            self._project(vectors, n)
            if self.half is not None:
                self.half[n:n + m] = to_bfloat16(vectors)
        self.size = n + m

    def top_rows(self, query: np.ndarray, end: int, k: int) -> np.ndarray:
        """The ``k`` rows of ``[0, end)`` whose projection scores highest for ``query`` (unordered)."""
        end = min(end, self.size)
        if end <= k:
            return np.arange(end)
        # a BLAS matrix-vector product: on 1M x 32 rows 5-9 ms against einsum's 13 (benchmarks/RESULTS.md,
        # "Large scopes: a pool of candidates"); the full-vector product keeps einsum (search.scoring)
        return top_unordered(self.codes[:end] @ self._query(query), k)

    def dense_moments(self, query: np.ndarray) -> tuple[float, float]:
        """The mean and standard deviation of the cosine of ``query`` to the scope's rows, estimated on the
        sample: from the sample's mean vector ``m`` and second moment ``M`` (``q·m`` and ``sqrt(qᵀMq - (q·m)²)``,
        ~0.08 ms for 384 dimensions where a pass over the 8,192 sampled rows took ~1.7 ms here)."""
        moments = self._moments
        if moments is None:  # a restored sketch: once, from its sample
            moments = self._moments = _sample_moments(self.sample)
        mean_vector, second = moments
        q = np.asarray(query, dtype=np.float64)
        mean = float(q @ mean_vector)
        return mean, max(float(q @ (second @ q)) - mean * mean, 0.0) ** 0.5


def _sample_moments(sample: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mean vector and the second moment (``sampleᵀ·sample / n``) of a sketch's sample, in float64."""
    wide = sample.astype(np.float64)
    return wide.mean(axis=0), (wide.T @ wide) / max(len(wide), 1)


def to_bfloat16(vectors: np.ndarray) -> np.ndarray:
    """``vectors`` (float32) at half width: the upper 16 bits of each value, rounded to nearest even, as
    ``uint16`` (finite values; a unit vector's are)."""
    bits = np.ascontiguousarray(vectors, dtype=np.float32).view(np.uint32)
    return ((bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16)).astype(np.uint16)


def from_bfloat16(half: np.ndarray) -> np.ndarray:
    """The float32 values of :func:`to_bfloat16`'s ``uint16`` rows (the lower 16 bits zero)."""
    out = np.empty(half.shape, dtype=np.uint32)
    np.left_shift(half, 16, out=out, dtype=np.uint32)
    return out.view(np.float32)

"""Exact in-memory scope snapshots (what every signal of the engine scores) and search hits."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

import numpy as np

from ..filters import Scope, matches
from ..records import MemoryRecord
from .scoring import dense_scores, top_k

__all__ = ["Hit", "ScopeView", "record_order"]

T = TypeVar("T")


def record_order(record: MemoryRecord) -> tuple[float, str]:
    """Oldest first, ties by id: the one order of scans, exports and scope snapshots."""
    return (record.created_at, record.id)


class Hit(NamedTuple):
    """One search result: the record and its cosine similarity to the query (1.0 = identical).

    A NamedTuple (immutable) rather than a frozen dataclass: it is several times cheaper to build, which
    matters on the exact-search hot path (``benchmarks/RESULTS.md``, "Figures behind implementation choices").
    """

    record: MemoryRecord
    score: float


@dataclass(frozen=True, eq=False)
class ScopeView:
    """An immutable snapshot of every record in one scope, with its vectors, for exact search.

    The Workspace keeps these up to date on its own writes (copy on write), so a view is safe to use
    while other threads write: they get a new view, this one never changes. ``derived`` is a cache for
    structures computed from the snapshot (a lexical index, ...) that live exactly as long as it; see
    :meth:`cached`.

    Attributes:
        scope: the scope every record of the view belongs to.
        records: the records, in insertion order.
        vectors: ``(n, dim)`` float32 unit vectors, row ``i`` for ``records[i]`` (read-only).
        documents: the searchable text of each record.
        version: increases with every change of this scope's content.
        base: ``(derived, n)`` of an earlier snapshot whose ``n`` records are exactly this one's first ``n``
            (set when a write only appended records), so :meth:`cached` can extend a derived structure
            instead of rebuilding it over the whole scope.
    """

    scope: Scope
    records: tuple[MemoryRecord, ...]
    vectors: np.ndarray
    documents: tuple[str, ...]
    version: int = 0
    derived: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)
    base: tuple[dict[Any, Any], int] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.vectors.setflags(write=False)

    def __len__(self) -> int:
        return len(self.records)

    def cached(
        self,
        key: Any,
        build: Callable[[ScopeView], T],
        extend: Callable[[T, ScopeView, int], T] | None = None,
    ) -> T:
        """A structure derived from this snapshot, computed once.

        Args:
            key: its name in :attr:`derived`.
            build: computes it from the whole snapshot.
            extend: ``extend(previous, view, n)`` computes it from the same structure of the earlier
                snapshot whose records are this one's first ``n`` (the append-only write path: a 10k-record
                scope then costs the new records, not a rebuild). Must not modify ``previous``.
        """
        value = self.derived.get(key)
        if value is None:
            previous = self.base[0].get(key) if extend is not None and self.base is not None else None
            value = build(self) if previous is None else extend(previous, self, self.base[1])  # type: ignore[index,misc]
            self.derived[key] = value  # a race computes it twice, never wrongly
        return value

    def id_index(self) -> dict[str, int]:
        """``record id -> position`` in this snapshot (built once, extended on appends)."""
        return self.cached(
            "id_index",
            lambda v: {r.id: i for i, r in enumerate(v.records)},
            lambda old, v, n: {**old, **{r.id: i for i, r in enumerate(v.records[n:], start=n)}},
        )

    @property
    def ids(self) -> list[str]:
        return [r.id for r in self.records]

    def dense_scores(self, query_vector: np.ndarray) -> np.ndarray:
        """Cosine similarity of the query to every record (vectors are unit length)."""
        return dense_scores(self.vectors, query_vector)

    def search(self, query_vector: np.ndarray, k: int) -> list[Hit]:
        """Exact top-``k`` by cosine similarity."""
        scores = self.dense_scores(query_vector)
        order = top_k(scores, k)
        return list(map(Hit, map(self.records.__getitem__, order.tolist()), scores[order].tolist()))

    def with_records(
        self, records: list[MemoryRecord], vectors: np.ndarray, documents: list[str], version: int
    ) -> ScopeView | None:
        """The snapshot after ``records`` (with their vectors and documents) were written: records
        entering the scope are added, changed ones replaced, ones leaving it dropped. None when the
        write does not touch this scope."""
        clause = self.scope.where()
        index = self.id_index()
        inside = [matches(clause, rec.to_chroma()) for rec in records]
        known = [index.get(rec.id) for rec in records]
        added = [j for j, (i, ins) in enumerate(zip(known, inside, strict=True)) if i is None and ins]
        if all(i is None for i in known):  # the common write: new records only
            if not added:
                return None
            return self._appended([records[j] for j in added], np.asarray(vectors[added], dtype=np.float32),
                                  [documents[j] for j in added], version)
        recs, docs = list(self.records), list(self.documents)
        vecs = np.array(self.vectors)
        keep = np.ones(len(recs), dtype=bool)
        for j, (i, ins) in enumerate(zip(known, inside, strict=True)):
            if i is None:
                continue
            if ins:
                recs[i], docs[i], vecs[i] = records[j], documents[j], vectors[j]
            else:
                keep[i] = False
        new_recs = [r for r, k in zip(recs, keep, strict=True) if k] + [records[j] for j in added]
        new_docs = [d for d, k in zip(docs, keep, strict=True) if k] + [documents[j] for j in added]
        parts = [vecs[keep]] + ([np.asarray(vectors[added], dtype=np.float32)] if added else [])
        new_vecs = np.concatenate(parts, axis=0).reshape(len(new_recs), self.vectors.shape[1])
        return self._sorted(new_recs, new_vecs, new_docs, version)

    def _appended(
        self, records: list[MemoryRecord], vectors: np.ndarray, documents: list[str], version: int
    ) -> ScopeView:
        """The snapshot with new ``records`` added. When they sort after every existing record (new records
        usually do) the new snapshot extends this one's derived structures instead of rebuilding them."""
        new_recs = self.records + tuple(records)
        new_vecs = np.concatenate([self.vectors, vectors], axis=0)
        new_docs = self.documents + tuple(documents)
        tail = [record_order(r) for r in new_recs[max(len(self) - 1, 0):]]
        if all(x <= y for x, y in zip(tail, tail[1:], strict=False)):
            base = (self.derived, len(self)) if self.derived or self.base is None else self.base
            return ScopeView(self.scope, new_recs, new_vecs, new_docs, version, base=base)
        return self._sorted(new_recs, new_vecs, new_docs, version)

    def _sorted(
        self, records: Sequence[MemoryRecord], vectors: np.ndarray, documents: Sequence[str], version: int
    ) -> ScopeView:
        """A snapshot of this scope in the order a fresh load gives, so ties rank the same after a restart."""
        keys = [record_order(r) for r in records]
        perm = sorted(range(len(keys)), key=keys.__getitem__)
        return ScopeView(self.scope, tuple(records[i] for i in perm), np.ascontiguousarray(vectors[perm]),
                         tuple(documents[i] for i in perm), version)

    def without(self, ids: set[str], version: int) -> ScopeView | None:
        """The snapshot after hard-deleting ``ids``; None when none of them is in this scope."""
        keep = np.array([r.id not in ids for r in self.records], dtype=bool)
        if keep.all():
            return None
        return ScopeView(
            self.scope,
            tuple(r for r, k in zip(self.records, keep, strict=True) if k),
            np.array(self.vectors[keep]),
            tuple(d for d, k in zip(self.documents, keep, strict=True) if k),
            version,
        )

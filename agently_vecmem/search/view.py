"""Exact in-memory scope snapshots (what every signal of the engine scores) and search hits."""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any, NamedTuple, TypeVar, overload

import numpy as np

from ..errors import RecordValidationError
from ..filters import Scope, matches
from ..records import MemoryRecord
from .encoded import EncodedList, mapping_with_room, resident_bytes
from .scoring import dense_scores, top_k
from .sketch import Sketch

__all__ = ["Hit", "ScopeView", "keep_on_rewrite", "record_order"]

T = TypeVar("T")

#: A rule on ``(old, new)`` versions of a record rewritten in place (same document, vectors and sort
#: position): whether a derived structure built from the old snapshot is still right for the new one.
KeepRule = Callable[[MemoryRecord, MemoryRecord], bool]


class _Kept(NamedTuple):
    """How a derived structure survives a rewrite (:func:`keep_on_rewrite`)."""

    rule: KeepRule
    drop: Callable[[Any, np.ndarray, ScopeView], Any] | None


#: Derived structures (by key name: a ``view.derived`` key, or its first item when it is a tuple) that a
#: snapshot rewritten in place or with rows removed keeps (:func:`keep_on_rewrite`).
_KEPT_ON_REWRITE: dict[Any, _Kept] = {}

#: The ``extend`` of each derived structure (by key) that :meth:`ScopeView.cached` has been given: a rewrite
#: of an appended snapshot extends its base's structures to it first, then keeps them.
_EXTENDERS: dict[Any, Callable[[Any, Any, int], Any]] = {}


def _always(old: MemoryRecord, new: MemoryRecord) -> bool:
    return True


def keep_on_rewrite(name: Any, rule: KeepRule | None = None,
                    drop: Callable[[Any, np.ndarray, ScopeView], Any] | None = None) -> None:
    """Declare how the derived structure ``name`` (see :meth:`ScopeView.cached`) survives a write that
    rewrites records in place (same document, vectors and sort position: an importance change) or removes
    records from the scope (a supersede, a delete, a record moving out).

    Args:
        name: the structure's key in ``view.derived`` (or the first item of a tuple key).
        rule: ``rule(old, new)`` must hold for every record rewritten in place for the structure to be kept;
            None: it is computed from documents, vectors and record order alone, always kept.
        drop: ``drop(value, keep, view)`` gives the structure for the rows of ``view`` (the snapshot before
            the write) where the boolean array ``keep`` is True, identical to a build over them; None: a write
            that removes records rebuilds it.

    Structures not declared are rebuilt after any such write."""
    _KEPT_ON_REWRITE[name] = _Kept(rule or _always, drop)


#: The key of :meth:`ScopeView.decoded_records` in ``derived``: rebuilt after a rewrite in place (the records
#: changed), filtered on a removal.
DECODED_RECORDS = "decoded_records"
keep_on_rewrite(DECODED_RECORDS, lambda old, new: False,
                drop=lambda records, keep, _: tuple(r for r, k in zip(records, keep.tolist(), strict=True) if k))


def _key_name(key: Any) -> Any:
    return key[0] if isinstance(key, tuple) else key


E = TypeVar("E")

#: The smallest number of rows a scope's columns are allocated for (they double when full).
_MIN_CAPACITY = 16


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


class _Snapshot(Sequence[E]):
    """What one snapshot sees of a list its scope's snapshots share: ``len`` items, each one read by
    :meth:`_item`. Indexing (negative too), slicing (a tuple), iteration, equality with sequences."""

    __slots__ = ("_items",)

    _items: list[E]

    @abstractmethod
    def _item(self, index: int) -> E:
        """The item at ``index`` (``0 <= index < len``)."""

    @abstractmethod
    def _span(self, index: slice) -> tuple[E, ...]:
        """The items of a slice."""

    @overload
    def __getitem__(self, index: int) -> E: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[E, ...]: ...
    def __getitem__(self, index: int | slice) -> E | tuple[E, ...]:
        if isinstance(index, slice):
            return self._span(index)
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("snapshot index out of range")
        return self._item(index)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (_Snapshot, tuple, list)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self)!r})"


class Prefix(_Snapshot[E]):
    """The first ``n`` items of a list that only grows at its end: what one snapshot sees of its scope's
    records or documents (later appends are invisible to it)."""

    __slots__ = ("_n",)

    def __init__(self, items: list[E], n: int) -> None:
        self._items = items
        self._n = n

    def __len__(self) -> int:
        return self._n

    def _item(self, index: int) -> E:
        return self._items[index]

    def _span(self, index: slice) -> tuple[E, ...]:
        span = range(self._n)[index]
        if span.step == 1:
            return tuple(self._items[span.start:span.stop])
        return tuple(self._items[i] for i in span)

    def __iter__(self) -> Iterator[E]:
        return islice(self._items, self._n)


class Picked(_Snapshot[E]):
    """The items of a list at the positions ``rows`` lists (ascending): what a snapshot whose scope lost
    records sees of its columns' records or documents, which keep the removed ones as holes."""

    __slots__ = ("_rows",)

    def __init__(self, items: list[E], rows: np.ndarray) -> None:
        self._items = items
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    def _item(self, index: int) -> E:
        return self._items[int(self._rows[index])]

    def _span(self, index: slice) -> tuple[E, ...]:
        return tuple(map(self._items.__getitem__, self._rows[index].tolist()))

    def __iter__(self) -> Iterator[E]:
        return map(self._items.__getitem__, self._rows.tolist())


def _picked(items: list[E], n: int, rowmap: np.ndarray | None) -> list[E]:
    """The items a snapshot of ``n`` records sees, as a new list: the first ``n``, or those ``rowmap`` lists
    (of an :class:`~.encoded.EncodedList`: a new one sharing its buffer, nothing decoded)."""
    if rowmap is None:
        return items[:n]
    if isinstance(items, EncodedList):
        return items.picked(rowmap[:n])
    return list(map(items.__getitem__, rowmap[:n].tolist()))


class IdIndex:
    """``record id -> position`` in one snapshot: a view of its columns' shared index (``id -> row``) limited
    to the rows it reads (its first ``n``, or the rows ``rowmap`` lists after a removal)."""

    __slots__ = ("_index", "_n", "_rowmap")

    def __init__(self, index: dict[str, int], n: int, rowmap: np.ndarray | None = None) -> None:
        self._index, self._n, self._rowmap = index, n, rowmap

    def get(self, record_id: str, default: int | None = None) -> int | None:
        row = self._index.get(record_id)
        if row is None:
            return default
        rowmap = self._rowmap
        if rowmap is None:
            return row if row < self._n else default
        i = int(rowmap.searchsorted(row))
        return i if i < self._n and int(rowmap[i]) == row else default

    def __contains__(self, record_id: object) -> bool:
        return self.get(record_id) is not None  # type: ignore[arg-type]


class _Rows:
    """The vector rows (primary and every space) of one or more :class:`_Columns` of a scope. Rows
    ``[0, size)`` are written and never change; whichever columns reaches ``size`` first appends after it in
    place, any other copies (columns rewritten in place or with records removed share their source's rows).
    Its lock also guards the lists and id index the columns on these rows share."""

    __slots__ = ("vectors", "spaces", "size", "lock", "sketch", "private_from")

    def __init__(self, vectors: np.ndarray, spaces: dict[str, np.ndarray], size: int, *,
                 in_place: bool = False) -> None:
        #: rows from here on are this process's own pages of copy-on-write file mappings (None: not mapped so)
        self.private_from: int | None = None
        if in_place and size == len(vectors):  # a loaded snapshot's rows: append into the files' spare rows
            found = [mapping_with_room(a) for a in (vectors, *spaces.values())]
            roots = [root for root in found if root is not None]
            if len(roots) == len(found):  # (every space has room, or none is used)
                cap = min(len(root) for root in roots)
                vectors = roots[0][:cap]
                spaces = {name: root[:cap] for name, root in zip(spaces, roots[1:], strict=True)}
                self.private_from = size
        self.vectors, self.spaces, self.size = vectors, spaces, size
        self.lock = threading.Lock()
        self.sketch: Sketch | None = None  # the primary space's, built when a large scope is first searched

    def append(self, n: int, vectors: np.ndarray, spaces: Mapping[str, np.ndarray]) -> bool:
        """Write ``vectors`` (and the rows of every space) at row ``n`` when ``n`` is the end; False (nothing
        written) when rows were appended past ``n`` already. The caller holds :attr:`lock`."""
        m = len(vectors)
        if n != self.size:
            return False
        cap = self.vectors.shape[0]
        if n + m > cap:  # double: amortized O(1) per appended row
            new_cap = max(2 * cap, n + m, _MIN_CAPACITY)
            self.vectors = _grown(self.vectors, n, new_cap)
            self.spaces = {name: _grown(a, n, new_cap) for name, a in self.spaces.items()}
            self.private_from = None
        self.vectors[n:n + m] = vectors
        for name, a in self.spaces.items():
            a[n:n + m] = spaces[name]
        if self.sketch is not None:
            self.sketch.append(n, vectors)
        self.size = n + m
        return True

    def sketched(self) -> Sketch:
        """The primary space's :class:`~.sketch.Sketch` of rows ``[0, size)``, built on first use."""
        with self.lock:
            if self.sketch is None:
                self.sketch = Sketch(self.vectors[:self.size], self.vectors.shape[0])
            return self.sketch


class _Columns:
    """The records of successive snapshots of one scope, shared between them (append-only segments).

    Everything is kept by *row*: row ``p`` of :attr:`rows` holds the vectors of ``records[p]``, whose
    document is ``documents[p]`` and id ``ids[p]``; ``index`` maps ids to rows. A snapshot of ``n <= size``
    records sees its first ``n`` rows, or, after a removal, the ``n`` rows ``rowmap`` lists (the removed rows
    stay as holes until they outnumber an eighth of the kept ones, then the kept rows are copied once).
    Appending to the newest snapshot (``n == size``) writes the new records after the last row in place: a
    write costs the records written (amortized; the arrays double when full), not a copy of the scope. A
    removal shares every list, the id index and the vector rows and only drops positions from ``rowmap``; a
    rewrite in place (same ids, documents and vectors) shares all but the record list. Columns that share
    rows also share the lists' ends: only the one whose append reaches the shared rows first extends them
    (:class:`_Rows` decides), any other copies.
    """

    __slots__ = ("records", "documents", "rows", "size", "ids", "index", "rowmap", "row_end")

    def __init__(self, records: list[MemoryRecord], documents: list[str], rows: _Rows, size: int,
                 ids: list[str] | None = None, rowmap: np.ndarray | None = None, row_end: int | None = None,
                 index: dict[str, int] | None = None) -> None:
        self.records, self.documents, self.rows, self.size = records, documents, rows, size
        self.ids = ids  # the records' ids by row, when known (built on first use otherwise)
        self.index = index  # record id -> row, built on first use, extended on appends
        self.rowmap = rowmap  # position -> row (None: the same number), room to double
        self.row_end = size if row_end is None else row_end  # the rows these columns use: [0, row_end)

    def id_index(self) -> dict[str, int]:
        """``record id -> row`` of every written row (a snapshot ignores the rows it does not read)."""
        with self.rows.lock:  # the lists may be shared (and extended) by other columns on these rows
            if self.index is None:
                if self.ids is None:
                    self.ids = [r.id for r in self.records]
                ids = self.ids
                self.index = dict(zip(ids, range(len(ids)), strict=False))
            return self.index

    def known_ids(self, n: int, rowmap: np.ndarray | None) -> list[str] | None:
        """The ids of a snapshot of ``n`` records reading ``rowmap`` (a new list), when these columns know
        them: what columns built from those records are given, so their id index costs a ``dict`` build,
        not a pass over the records."""
        with self.rows.lock:
            ids = self.ids
            return None if ids is None else _picked(ids, n, rowmap)

    def updated(self, updates: Mapping[int, MemoryRecord], row_end: int) -> list[MemoryRecord]:
        """The record list with the records at some rows replaced (``updates``: row -> record): a copy of
        the first ``row_end`` rows, or the list itself when nothing is replaced."""
        if not updates:
            return self.records
        records = self.records[:row_end]
        for row, record in updates.items():
            records[row] = record
        return records

    def sharing(self, records: list[MemoryRecord], n: int, rowmap: np.ndarray | None, row_end: int) -> _Columns:
        """Columns of ``n`` records (at the rows ``rowmap`` lists, ascending; None: the first ``n``) that
        share these columns' vector rows, documents, ids and id index, with ``records`` as their record list
        (this one, or :meth:`updated`): a rewrite in place (same ids, documents and vectors) or a removal,
        whose rows stay as holes. No list is copied (but ``rowmap``, with room to grow)."""
        with self.rows.lock:
            ids, index = self.ids, self.index
        return _Columns(records, self.documents, self.rows, n, ids,
                        None if rowmap is None else _grown(rowmap, n, max(2 * n, _MIN_CAPACITY), np.int64),
                        row_end, index)

    @classmethod
    def of(cls, records: Sequence[MemoryRecord], documents: Sequence[str], vectors: np.ndarray,
           spaces: Mapping[str, np.ndarray], extra: int = 0, ids: list[str] | None = None, *,
           in_place: bool = False) -> _Columns:
        """New columns holding these records and rows, with room for ``extra`` more (an
        :class:`~.encoded.EncodedList` of records or documents is kept as it is: not decoded; ``in_place``:
        the rows are a loaded snapshot's, appended to in their files' spare rows, see :class:`ScopeView`)."""
        n = len(records)
        cap = max(n + extra, _MIN_CAPACITY) if extra else n
        rows = _Rows(_grown(vectors, n, cap), {name: _grown(m, n, cap) for name, m in spaces.items()}, n,
                     in_place=in_place and not extra)
        return cls(_listed(records), _listed(documents), rows, n, ids)

    def append(self, n: int, records: Sequence[MemoryRecord], documents: Sequence[str], vectors: np.ndarray,
               spaces: Mapping[str, np.ndarray], rowmap: np.ndarray | None) -> _Columns:
        """Columns whose first ``n + len(records)`` records are this snapshot's ``n`` (whose rows ``rowmap``
        gives) then the new ones: these columns extended in place when ``n`` is their newest size and their
        lists and rows end where they do, else a copy. A copy too when a new record's id is a row of these
        columns already (a removed record written again: its old row stays another snapshot's)."""
        m = len(records)
        index = self.id_index()
        rows = self.rows
        with rows.lock:
            end = self.row_end
            # the rows decide: lists are shared only by columns on the same rows, so the one whose append
            # reaches the rows' end is the one at the end of every list it shares
            if n == self.size and not any(r.id in index for r in records) and rows.append(end, vectors, spaces):
                if self.rowmap is not None:
                    if n + m > len(self.rowmap):
                        self.rowmap = _grown(self.rowmap, n, max(2 * len(self.rowmap), n + m), np.int64)
                    self.rowmap[n:n + m] = np.arange(end, end + m)
                self.records.extend(records)
                self.documents.extend(documents)
                if self.ids is not None:
                    self.ids.extend(r.id for r in records)
                index.update((r.id, i) for i, r in enumerate(records, start=end))
                self.size = n + m
                self.row_end = end + m
                return self
        out = _Columns.of(_picked(self.records, n, rowmap), _picked(self.documents, n, rowmap),
                          _at(rows.vectors, rowmap, n), {name: _at(a, rowmap, n) for name, a in rows.spaces.items()},
                          extra=max(n, m), ids=self.known_ids(n, rowmap))
        return out.append(n, records, documents, vectors, spaces, None)


def _listed(items: Sequence[E]) -> list[E]:
    """A column's own list of ``items``: a new ``list``, or the :class:`~.encoded.EncodedList` itself (it is
    never changed in place by anyone else: columns copy what they change)."""
    return items if isinstance(items, EncodedList) else list(items)  # type: ignore[return-value]


def _at(array: np.ndarray, rowmap: np.ndarray | None, n: int) -> np.ndarray:
    """The first ``n`` records' rows of ``array``: a slice, or gathered through ``rowmap``."""
    return array[:n] if rowmap is None else array[rowmap[:n]]


def _grown(array: np.ndarray, n: int, capacity: int, dtype: type = np.float32) -> np.ndarray:
    """A new array of ``capacity`` rows whose first ``n`` are ``array``'s (``array`` itself, made read-only,
    when it is exactly that already: a fresh load is not copied)."""
    if capacity == n == array.shape[0] and array.dtype == dtype and array.flags.c_contiguous:
        array.setflags(write=False)
        return array
    out: np.ndarray = np.empty((capacity,) + array.shape[1:], dtype=dtype)
    out[:n] = array[:n]
    return out


def _kept_rows(array: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``array[rows]`` (``rows`` ascending) in a new array with room to double. Copied run by run (a few
    removals leave a few long runs; a slice copy is as fast as ``memcpy``, a fancy index into a preallocated
    array twice as slow)."""
    n = len(rows)
    cuts = (np.flatnonzero(np.diff(rows) != 1) + 1).tolist()
    if len(cuts) > 256:
        return array[rows]
    out = np.empty((max(2 * n, _MIN_CAPACITY),) + array.shape[1:], dtype=np.float32)
    for a, b in zip([0, *cuts], [*cuts, n], strict=True):
        if b > a:
            out[a:b] = array[rows[a]:rows[a] + b - a]
    return out


def keeps_holes(holes: int, kept: int) -> bool:
    """Whether a removal leaves what it removed as holes in shared structures (else the kept part is
    copied): while the holes are at most an eighth of what is kept (scoring reads them, and they hold
    memory). The snapshot's rows and lists use it, and the BM25 index's postings."""
    return holes <= kept // 8


def _frozen(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.setflags(write=False)
    return view


class _SpaceColumns(Mapping[str, np.ndarray]):
    """``ScopeView.spaces`` of a snapshot whose rows have holes: a space is gathered when read."""

    __slots__ = ("_view",)

    def __init__(self, view: ScopeView) -> None:
        self._view = view

    def __getitem__(self, name: str) -> np.ndarray:
        return self._view._column(name)  # an unknown name: KeyError (from the rows' dict)

    def __iter__(self) -> Iterator[str]:
        return (name for name in self._view._rows if name is not None)

    def __len__(self) -> int:
        return len(self._view._rows) - 1


class ScopeView:
    """An immutable snapshot of every record in one scope, with its vectors, for exact search.

    The Workspace keeps these up to date on its own writes: a write makes a new snapshot and never changes
    this one, so a view is safe to use while other threads write. Snapshots of one scope share their rows
    (append-only segments, :class:`_Columns`): appending records costs the records appended, not a copy of
    the scope; rewriting records in place (same text) shares the vector rows and removing some (a supersede,
    a delete) leaves holes in them (scored, then skipped: :meth:`dense_scores`), and both keep the derived
    structures :func:`keep_on_rewrite` declares (filtered, not rebuilt). ``derived`` is a cache for
    structures computed from the snapshot (a lexical index, ...) that live exactly as long as it; see
    :meth:`cached`.

    Attributes:
        scope: the scope every record of the view belongs to.
        records: the records, oldest first (a read-only sequence).
        vectors: ``(n, dim)`` float32 unit vectors of the primary space, row ``i`` for ``records[i]`` (read-only).
        documents: the searchable text of each record.
        spaces: the store's other named vector spaces (:mod:`.spaces`): ``name -> (n, dim)`` unit vectors,
            rows aligned with ``records`` (read-only; empty when the store has none).
        version: increases with every change of this scope's content.
        base: ``(derived, n)`` of an earlier snapshot whose ``n`` records are exactly this one's first ``n``
            (set when a write only appended records), so :meth:`cached` can extend a derived structure
            instead of rebuilding it over the whole scope.

    A snapshot built from a persisted one's memory-mapped rows (``workspace.snapshots``) is made with
    ``in_place=True``: when every vector file was written with spare rows after its data and mapped
    copy-on-write (:func:`~.encoded.mapping_with_room`), appends write into those rows (this process's own
    copy of the pages written) instead of first copying the whole scope's rows into memory (1.5 GB at 1M
    records); the rows are copied only once the spare ones are used up.
    """

    __slots__ = ("scope", "version", "derived", "base", "_cols", "_n", "records", "documents", "_rowmap", "_rows",
                 "_gathered")

    def __init__(
        self,
        scope: Scope,
        records: Sequence[MemoryRecord],
        vectors: np.ndarray,
        documents: Sequence[str],
        version: int = 0,
        *,
        spaces: Mapping[str, np.ndarray] | None = None,
        base: tuple[dict[Any, Any], int] | None = None,
        ids: list[str] | None = None,
        in_place: bool = False,
        _cols: _Columns | None = None,
        _n: int | None = None,
    ) -> None:
        self.scope = scope
        self.version = version
        self.derived: dict[Any, Any] = {}
        self.base = base
        if _cols is None:
            n = len(records)
            vecs = np.asarray(vectors, dtype=np.float32)
            if n:
                vecs = vecs.reshape(n, -1)
            if len(documents) != n or any(len(m) != n for m in (spaces or {}).values()):
                raise RecordValidationError("a snapshot needs one document and one row of every space per record")
            if ids is not None and len(ids) != n:
                raise RecordValidationError(f"a snapshot of {n} records was given {len(ids)} ids")
            _cols = _Columns.of(records, documents, vecs,
                                {k: np.asarray(v, dtype=np.float32) for k, v in (spaces or {}).items()}, ids=ids,
                                in_place=in_place)
            _n = n
        assert _n is not None
        self._cols, self._n = _cols, _n
        rows = _cols.rows
        # the rows this snapshot reads: its first ``_n`` (or, after a removal, those ``_rowmap`` lists), and
        # the holes up to its columns' end when it is their newest (an append after it then writes in place)
        self._rowmap = None if _cols.rowmap is None else _frozen(_cols.rowmap[:_n])
        if self._rowmap is None:
            self.records: Sequence[MemoryRecord] = Prefix(_cols.records, _n)
            self.documents: Sequence[str] = Prefix(_cols.documents, _n)
        else:
            self.records, self.documents = Picked(_cols.records, self._rowmap), Picked(_cols.documents, self._rowmap)
        if _n == _cols.size:
            end = _cols.row_end
        else:
            end = _n if self._rowmap is None else int(self._rowmap[-1]) + 1 if _n else 0
        self._rows: dict[str | None, np.ndarray] = {None: _frozen(rows.vectors[:end]),
                                                    **{name: _frozen(a[:end]) for name, a in rows.spaces.items()}}
        self._gathered: dict[str | None, np.ndarray] = {}

    @property
    def vectors(self) -> np.ndarray:
        """``(n, dim)`` float32 unit vectors of the primary space, row ``i`` for ``records[i]`` (read-only)."""
        return self._column(None)

    @property
    def spaces(self) -> Mapping[str, np.ndarray]:
        """The store's other named vector spaces: ``name -> (n, dim)`` unit vectors aligned with ``records``."""
        if self._rowmap is None:
            return {name: a for name, a in self._rows.items() if name is not None}
        return _SpaceColumns(self)

    @property
    def dim(self) -> int:
        """The primary space's dimension."""
        rows = self._rows[None]
        return int(rows.shape[1]) if rows.ndim == 2 else 0

    @property
    def vector_bytes(self) -> int:
        """Bytes of vector rows this snapshot holds (the rows a removal left as holes included, and the
        sketch of a large scope's rows once built)."""
        rows = self._cols.rows
        sketch = rows.sketch
        return sum(resident_bytes(a, rows.private_from) for a in self._rows.values()) + sum(
            resident_bytes(a) for a in self._gathered.values()) + (0 if sketch is None else sketch.nbytes)

    @property
    def encoded(self) -> bool:
        """Whether the records stay encoded until read (a scope loaded from its persisted snapshot:
        :class:`~.encoded.EncodedList`) rather than held as objects."""
        return isinstance(self._cols.records, EncodedList)

    def decoded_records(self) -> Sequence[MemoryRecord]:
        """Every record as an object, in order, for a caller that reads them all on every use (an AgentExecution
        context source lists them): :attr:`records` itself, or, for a snapshot whose records stay encoded
        (:attr:`encoded`), decoded once and kept with the snapshot's derived structures (extended on appends,
        filtered on removals), and from then on counted as a decoded scope by the snapshot cache."""
        if not self.encoded:
            return self.records
        return self.cached(DECODED_RECORDS, lambda v: tuple(v.records), lambda old, v, n: old + tuple(v.records[n:]))

    def columns(self) -> tuple[Sequence[MemoryRecord], Sequence[str]]:
        """The records and documents of this snapshot as new lists, in order: what a persisted snapshot is
        written from (an :class:`~.encoded.EncodedList` stays one, its items not decoded)."""
        cols = self._cols
        return _picked(cols.records, self._n, self._rowmap), _picked(cols.documents, self._n, self._rowmap)

    def _column(self, space: str | None) -> np.ndarray:
        """One space's rows in record order: a slice of the shared rows, or (after a removal left holes)
        gathered once and kept; scoring never needs this (:meth:`dense_scores`, :meth:`rows`)."""
        rows = self._rows[space]
        if self._rowmap is None:
            return rows
        out = self._gathered.get(space)
        if out is None:
            out = self._gathered[space] = _frozen(rows[self._rowmap])
        return out

    def rows(self, positions: int | slice | np.ndarray | Sequence[int], space: str | None = None) -> np.ndarray:
        """The vectors (of the primary space, or of the named ``space``) of the records at ``positions``."""
        rows = self._rows[space]
        return rows[positions] if self._rowmap is None else rows[self._rowmap[positions]]

    def pool_rows(self, positions: np.ndarray) -> np.ndarray:
        """The primary vectors of the records at ``positions`` (a pool's candidates, :meth:`dense_pool`), as
        float32: from the sketch's half-width rows when it has them (a scope loaded from its persisted
        snapshot: its queries then never touch the full rows' pages, :mod:`.sketch`), else :meth:`rows`."""
        sketch = self._cols.rows.sketch
        if sketch is None or sketch.half is None:
            return self.rows(positions)
        return sketch.half_rows(positions if self._rowmap is None else self._rowmap[positions])

    def vector_sum(self, space: str | None = None, start: int = 0) -> np.ndarray:
        """The float64 sum of the vectors of records ``[start, n)`` (of the primary space or ``space``)."""
        rows = self._rows[space]
        part = rows[start:self._n] if self._rowmap is None else rows[self._rowmap[start:]]
        return part.sum(axis=0, dtype=np.float64)

    def __len__(self) -> int:
        return self._n

    def __repr__(self) -> str:
        return f"ScopeView({self.scope!r}, {self._n} records, version={self.version})"

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
            if extend is not None:
                _EXTENDERS.setdefault(key, extend)
            previous = self.base[0].get(key) if extend is not None and self.base is not None else None
            value = build(self) if previous is None else extend(previous, self, self.base[1])  # type: ignore[index,misc]
            self.derived[key] = value  # a race computes it twice, never wrongly
        return value

    def id_index(self) -> IdIndex:
        """``record id -> position`` in this snapshot (shared by the snapshots of the scope's columns and
        extended in place on appends: no copy per write)."""
        return IdIndex(self._cols.id_index(), self._n, self._rowmap)

    @property
    def ids(self) -> list[str]:
        """The records' ids, in order (a new list)."""
        ids = self._cols.known_ids(self._n, self._rowmap)
        return [r.id for r in self.records] if ids is None else ids

    def dense_scores(self, query_vector: np.ndarray, space: str | None = None) -> np.ndarray:
        """Cosine similarity of the query to every record (vectors are unit length), in the primary space or
        the named ``space`` (after a removal: over the shared rows, holes included, then picked)."""
        scores = dense_scores(self._rows[space], query_vector)
        return scores if self._rowmap is None else scores[self._rowmap]

    def dense_pool(self, query_vector: np.ndarray, k: int) -> np.ndarray:
        """The positions (ascending) of about the ``k`` records of the primary space nearest the query, found
        through the rows' sketch (:mod:`.sketch`: one pass over their codes, not over every full vector).
        Approximate: a record of the exact top ``k`` may be missing (the recall is measured in
        ``benchmarks/bench_pool.py``); score them with :meth:`rows`."""
        found = np.sort(self._cols.rows.sketched().top_rows(np.asarray(query_vector, dtype=np.float32),
                                                            len(self._rows[None]), k))
        if self._rowmap is None:
            return found[found < self._n]
        at = np.searchsorted(self._rowmap, found)
        inside = at < self._n
        inside[inside] = self._rowmap[at[inside]] == found[inside]
        return at[inside]

    def build_sketch(self) -> None:
        """Build the sketch of the scope's rows now (the first pool query would; :func:`~.candidates.warm_view`
        does before a large scope's snapshot is persisted)."""
        self._cols.rows.sketched()

    def built_sketch(self) -> Sketch | None:
        """The sketch of this snapshot's rows in record order, when one was built (what a persisted snapshot
        keeps: a fresh worker then skips building it); None otherwise."""
        sketch = self._cols.rows.sketch
        if sketch is None:
            return None
        positions = slice(0, self._n) if self._rowmap is None else self._rowmap
        return Sketch.restored(sketch.basis, sketch.sample, sketch.codes_of(positions))

    def adopt_sketch(self, sketch: Sketch) -> None:
        """Use ``sketch`` (of exactly this snapshot's rows, as :meth:`built_sketch` gave it) instead of
        building one on the first pool query. Only a fresh snapshot (no removals, nothing appended) adopts one.

        Raises:
            RecordValidationError: the sketch has another number of rows or dimension than the snapshot.
        """
        rows = self._cols.rows
        if sketch.size != self._n or rows.size != self._n or sketch.basis.shape[0] != self.dim:
            raise RecordValidationError(f"a sketch of {sketch.size} rows of dimension {sketch.basis.shape[0]} does "
                                        f"not fit a snapshot of {self._n} rows of dimension {self.dim}")
        with rows.lock:
            if rows.sketch is None:
                rows.sketch = sketch

    def dense_moments(self, query_vector: np.ndarray) -> tuple[float, float]:
        """The mean and standard deviation of the query's cosine over the scope's primary vectors, estimated
        on the sketch's sample (what :meth:`dense_pool`'s caller needs for standard units)."""
        return self._cols.rows.sketched().dense_moments(np.asarray(query_vector, dtype=np.float32))

    def search(self, query_vector: np.ndarray, k: int, *, pool_min_records: int = 0,
               pool_size: int = 2000) -> list[Hit]:
        """Top-``k`` by cosine similarity: exact; or, in a scope of ``pool_min_records`` records or more (0:
        never), among the ``pool_size`` nearest through the sketch (as :meth:`similar`)."""
        positions, scores = self._nearest(query_vector, pool_min_records, pool_size)
        order = top_k(scores, k)
        at = order if positions is None else positions[order]
        return list(map(Hit, map(self.records.__getitem__, at.tolist()), scores[order].tolist()))

    def _nearest(self, query_vector: np.ndarray, pool_min_records: int,
                 pool_size: int) -> tuple[np.ndarray | None, np.ndarray]:
        """The cosines of every record to the query (positions None), or, from ``pool_min_records`` records
        (not 0), of the ``pool_size`` nearest through the sketch and their positions."""
        query = np.asarray(query_vector, dtype=np.float32)
        if 0 < pool_min_records <= self._n:
            positions = self.dense_pool(query, pool_size)
            return positions, dense_scores(self.pool_rows(positions), query)
        return None, self.dense_scores(query)

    def similar(self, query_vector: np.ndarray, threshold: float, *, pool_min_records: int = 0,
                pool_size: int = 2000) -> tuple[np.ndarray, np.ndarray]:
        """The positions of the records whose cosine to the query is at least ``threshold``, most similar first
        (ties by position), and their cosines. Over every row; or, in a scope of ``pool_min_records`` records
        or more (0: never), among the ``pool_size`` nearest through the sketch (:meth:`dense_pool`, scored by
        :meth:`pool_rows`): a write's near-duplicate check then costs what a pooled query does, not a pass
        over every full vector."""
        positions, scores = self._nearest(query_vector, pool_min_records, pool_size)
        keep = np.flatnonzero(scores >= threshold)
        order = keep[np.argsort(-scores[keep], kind="stable")]
        return order if positions is None else positions[order], scores[order]

    def with_records(
        self, records: list[MemoryRecord], vectors: np.ndarray, documents: list[str], version: int,
        spaces: Mapping[str, np.ndarray] | None = None,
    ) -> ScopeView | None:
        """The snapshot after ``records`` (with their vectors, documents and the rows of every space of this
        snapshot in ``spaces``) were written: records entering the scope are added, changed ones replaced,
        ones leaving it dropped. None when the write does not touch this scope.

        Raises:
            RecordValidationError: ``spaces`` lacks a space this snapshot has (a write must carry every space).
        """
        spaces = spaces or {}
        missing = [name for name in self.spaces if name not in spaces]
        if missing:
            raise RecordValidationError(f"a write to a scope with vector spaces {sorted(self.spaces)} lacks {missing}")
        clause = self.scope.where()
        index = self.id_index()
        inside = [matches(clause, rec.to_chroma()) for rec in records]
        known = [index.get(rec.id) for rec in records]
        added = [j for j, (i, ins) in enumerate(zip(known, inside, strict=True)) if i is None and ins]

        def append_to(view: ScopeView) -> ScopeView:
            return view._appended([records[j] for j in added], np.asarray(vectors[added], dtype=np.float32),
                                  [documents[j] for j in added], version,
                                  {name: np.asarray(spaces[name][added], np.float32) for name in self.spaces})

        if all(i is None for i in known):  # the common write: new records only
            return append_to(self) if added else None
        stay = [(j, i) for j, i in enumerate(known) if i is not None]
        at = [j for j, _ in stay]
        kept = self._rewritten([records[j] for j in at], np.asarray(vectors)[at], [documents[j] for j in at],
                               {name: np.asarray(spaces[name])[at] for name in self.spaces},
                               [i for _, i in stay], [inside[j] for j in at], version)
        if kept is not None:  # records of the scope rewritten in place or leaving it, then the new ones
            return append_to(kept) if added else kept
        recs, docs = list(self.records), list(self.documents)
        mats = {"": np.array(self.vectors), **{name: np.array(a) for name, a in self.spaces.items()}}
        new_rows = {"": np.asarray(vectors, np.float32), **{name: np.asarray(spaces[name], np.float32)
                                                              for name in self.spaces}}
        keep = np.ones(len(recs), dtype=bool)
        for j, (i, ins) in enumerate(zip(known, inside, strict=True)):
            if i is None:
                continue
            if ins:
                recs[i], docs[i] = records[j], documents[j]
                for name, mat in mats.items():
                    mat[i] = new_rows[name][j]
            else:
                keep[i] = False
        new_recs = [r for r, k in zip(recs, keep, strict=True) if k] + [records[j] for j in added]
        new_docs = [d for d, k in zip(docs, keep, strict=True) if k] + [documents[j] for j in added]
        joined = {name: np.concatenate([mat[keep]] + ([new_rows[name][added]] if added else []), axis=0)
                  for name, mat in mats.items()}
        primary = joined.pop("")
        return self._sorted(new_recs, primary, new_docs, version, joined)

    def _rewritten(
        self, records: list[MemoryRecord], vectors: np.ndarray, documents: list[str],
        spaces: Mapping[str, np.ndarray], rows: list[int], inside: list[bool], version: int,
    ) -> ScopeView | None:
        """The snapshot after records of this scope were rewritten (``rows[j]`` is ``records[j]``'s position):
        each one either leaves the scope (``inside[j]`` False: a supersede) or keeps its document, vectors and
        sort position (an importance change). Nothing but the record list is copied: the new snapshot shares
        this one's vector rows, documents, ids and id index (so, when this is the newest snapshot, the append
        after it writes in place), a removal leaving holes (:meth:`_compacted`), and keeps the derived
        structures :func:`keep_on_rewrite` declares (the lexical index, filtered when records are removed),
        instead of a rebuild over the scope. None when a record changed more than that (the caller
        rebuilds)."""
        remove = np.zeros(self._n, dtype=bool)
        pairs: list[tuple[MemoryRecord, MemoryRecord]] = []
        updates: dict[int, MemoryRecord] = {}  # row -> its new record
        for j, i in enumerate(rows):
            if not inside[j]:
                remove[i] = True
                continue
            old = self.records[i]
            if (documents[j] != self.documents[i] or record_order(records[j]) != record_order(old)
                    or not np.array_equal(np.asarray(vectors[j], np.float32), self.rows(i))
                    or any(not np.array_equal(np.asarray(spaces[name][j], np.float32), self.rows(i, name))
                           for name in self.spaces)):
                return None
            pairs.append((old, records[j]))
            updates[i if self._rowmap is None else int(self._rowmap[i])] = records[j]
        if not remove.any():
            end = len(self._rows[None])
            cols = self._cols.sharing(self._cols.updated(updates, end), self._n, self._rowmap, end)
            return self._derive(cols, version, pairs, None)
        return self._compacted(updates, ~remove, version, pairs)

    def _compacted(self, updates: Mapping[int, MemoryRecord], keep: np.ndarray, version: int,
                   pairs: Sequence[tuple[MemoryRecord, MemoryRecord]] = ()) -> ScopeView:
        """The snapshot of this one's records where ``keep`` is True, some rewritten in place (``updates``:
        row -> record). Its columns share this snapshot's lists, id index and vector rows, the removed rows
        left as holes (:class:`_Columns`), until the holes outnumber an eighth of the kept rows: then the kept
        rows are copied, with room to grow."""
        kept = (np.arange(self._n) if self._rowmap is None else self._rowmap)[keep]
        n = len(kept)
        end = len(self._rows[None])
        records = self._cols.updated(updates, end)
        if keeps_holes(end - n, n):
            cols = self._cols.sharing(records, n, kept, end)
        else:
            rows = _Rows(_kept_rows(self._rows[None], kept),
                         {name: _kept_rows(self._rows[name], kept) for name in self.spaces}, n)
            cols = _Columns(_picked(records, n, kept), _picked(self._cols.documents, n, kept), rows, n,
                            self._cols.known_ids(n, kept))
        return self._derive(cols, version, pairs, keep)

    def _derive(self, cols: _Columns, version: int, pairs: Sequence[tuple[MemoryRecord, MemoryRecord]],
                keep: np.ndarray | None) -> ScopeView:
        """A snapshot on ``cols`` with the derived structures of this one that survive the write (those of its
        base, when it was appended to after they were built, extended to it first: the new records' cost)."""
        def carry(key: Any) -> Callable[[Any], Any] | None:
            """How the structure ``key`` passes to the new snapshot; None when it does not survive."""
            kept = _KEPT_ON_REWRITE.get(_key_name(key))
            if kept is None or not all(kept.rule(old, new) for old, new in pairs):
                return None
            if keep is None:
                return lambda value: value
            drop = kept.drop
            return None if drop is None else (lambda value: drop(value, keep, self))

        if self.base is not None:
            derived, n = self.base
            for key, previous in list(derived.items()):
                extend = _EXTENDERS.get(key)
                if key not in self.derived and extend is not None and carry(key) is not None:
                    self.derived[key] = extend(previous, self, n)
        view = ScopeView(self.scope, (), cols.rows.vectors, (), version, _cols=cols, _n=cols.size)
        for key, value in list(self.derived.items()):
            passed = carry(key)
            if passed is not None:
                view.derived[key] = passed(value)
        return view

    def _appended(
        self, records: list[MemoryRecord], vectors: np.ndarray, documents: list[str], version: int,
        spaces: Mapping[str, np.ndarray],
    ) -> ScopeView:
        """The snapshot with new ``records`` added. When they sort after every existing record (new records
        usually do) the rows are appended in place (:class:`_Columns`) and the new snapshot extends this one's
        derived structures instead of rebuilding them."""
        last = record_order(self.records[-1]) if self._n else None
        order = [record_order(r) for r in records]
        if (last is None or last <= order[0]) and all(x <= y for x, y in zip(order, order[1:], strict=False)):
            cols = self._cols.append(self._n, records, documents, vectors, spaces, self._rowmap)
            base = (self.derived, self._n) if self.derived or self.base is None else self.base
            return ScopeView(self.scope, (), vectors, (), version, base=base, _cols=cols, _n=self._n + len(records))
        recs = list(self.records) + list(records)
        joined = {name: np.concatenate([a, spaces[name]], axis=0) for name, a in self.spaces.items()}
        return self._sorted(recs, np.concatenate([self.vectors, vectors], axis=0), list(self.documents) + documents,
                            version, joined)

    def _sorted(
        self, records: Sequence[MemoryRecord], vectors: np.ndarray, documents: Sequence[str], version: int,
        spaces: Mapping[str, np.ndarray],
    ) -> ScopeView:
        """A snapshot of this scope in the order a fresh load gives, so ties rank the same after a restart."""
        keys = [record_order(r) for r in records]
        perm = sorted(range(len(keys)), key=keys.__getitem__)
        dim = self.dim
        return ScopeView(self.scope, tuple(records[i] for i in perm),
                         np.ascontiguousarray(vectors[perm]).reshape(len(perm), dim),
                         tuple(documents[i] for i in perm), version,
                         spaces={name: np.ascontiguousarray(a[perm]) for name, a in spaces.items()})

    def without(self, ids: set[str], version: int) -> ScopeView | None:
        """The snapshot after hard-deleting ``ids``; None when none of them is in this scope."""
        index = self.id_index()
        rows = [i for i in map(index.get, ids) if i is not None]
        if not rows:
            return None
        keep = np.ones(self._n, dtype=bool)
        keep[rows] = False
        return self._compacted({}, keep, version)

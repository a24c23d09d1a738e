"""A column of a scope kept encoded in a buffer and decoded item by item when read.

A scope loaded from its persisted snapshot (``workspace.snapshots``) does not turn every record into Python
objects: at 1M records that took ~10 s and ~1.3 GB per worker, when a query reads a few dozen of them (the hits,
and the rows a filter or a pool looks at). The records and documents stay in the snapshot's file (shared by
every worker of the machine through the OS page cache; read where needed, not mapped: ``workspace.snapshots``)
and an :class:`EncodedList` decodes an item when it is read. It behaves as the ``list`` the snapshot columns of
:mod:`.view` otherwise hold: items can be replaced (kept beside the buffer), appended (kept after it) and sliced,
all without decoding the rest.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar, overload

import numpy as np

__all__ = ["EncodedList", "encoded_items", "resident_bytes", "mapping_with_room"]

E = TypeVar("E")
_NONE = np.zeros(0, dtype=np.int64)


class EncodedList(Sequence[E]):
    """Items ``[0, n)`` encoded in ``buffer`` (item ``i`` is ``buffer[starts[i]:ends[i]]``, decoded by
    ``decode`` on every read), then items kept as objects (appended ones), with some encoded items replaced.

    Args:
        buffer: the encoded items (``bytes``, ``mmap.mmap`` or anything sliced into ``bytes``).
        starts: ``(n,)`` int64 start offset of each encoded item.
        ends: ``(n,)`` int64 end offset of each encoded item.
        decode: ``bytes -> item``.
    """

    __slots__ = ("_buffer", "_starts", "_ends", "_decode", "_replaced", "_tail")

    def __init__(self, buffer: Any, starts: np.ndarray, ends: np.ndarray, decode: Callable[[bytes], E], *,
                 replaced: dict[int, E] | None = None, tail: list[E] | None = None) -> None:
        self._buffer, self._starts, self._ends, self._decode = buffer, starts, ends, decode
        self._replaced: dict[int, E] = {} if replaced is None else replaced
        self._tail: list[E] = [] if tail is None else tail

    def __len__(self) -> int:
        return len(self._starts) + len(self._tail)

    @overload
    def __getitem__(self, index: int) -> E: ...

    @overload
    def __getitem__(self, index: slice) -> EncodedList[E]: ...

    def __getitem__(self, index: int | slice) -> E | EncodedList[E]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step == 1 and start == 0:  # a prefix (what a snapshot's copy is): views of the offsets
                stop = max(stop, 0)
                encoded = min(stop, len(self._starts))
                return EncodedList(self._buffer, self._starts[:encoded], self._ends[:encoded], self._decode,
                                   replaced={i: v for i, v in self._replaced.items() if i < encoded},
                                   tail=self._tail[:max(stop - len(self._starts), 0)])
            if step < 0:  # never used by the columns; decoded
                return EncodedList(b"", _NONE, _NONE, self._decode, tail=[self[i] for i in range(start, stop, step)])
            return self.picked(np.arange(start, stop, step, dtype=np.int64))
        i = self._position(index)
        encoded = len(self._starts)
        if i >= encoded:
            return self._tail[i - encoded]
        if i in self._replaced:
            return self._replaced[i]
        return self._decode(self._buffer[self._starts[i]:self._ends[i]])

    def __setitem__(self, index: int, value: E) -> None:
        i = self._position(index)
        encoded = len(self._starts)
        if i >= encoded:
            self._tail[i - encoded] = value
        else:
            self._replaced[i] = value

    def _position(self, index: int) -> int:
        n = len(self)
        i = int(index) + n if index < 0 else int(index)
        if not 0 <= i < n:
            raise IndexError(f"index {index} out of range for {n} items")
        return i

    def __iter__(self) -> Iterator[E]:
        return map(self.__getitem__, range(len(self)))

    def extend(self, items: Iterable[E]) -> None:
        """Append ``items`` (kept as objects, after the encoded ones)."""
        self._tail.extend(items)

    def append(self, item: E) -> None:
        self._tail.append(item)

    def picked(self, positions: np.ndarray | Sequence[int]) -> EncodedList[E]:
        """A new list of the items at ``positions`` (ascending), sharing the buffer: nothing is decoded."""
        positions = np.asarray(positions, dtype=np.int64)
        encoded = len(self._starts)
        cut = int(np.searchsorted(positions, encoded))
        base, rest = positions[:cut], positions[cut:]
        replaced = {}
        if self._replaced:
            where = {int(p): j for j, p in enumerate(base.tolist())}
            replaced = {where[i]: v for i, v in self._replaced.items() if i in where}
        return EncodedList(self._buffer, self._starts[base], self._ends[base], self._decode, replaced=replaced,
                           tail=[self._tail[int(p) - encoded] for p in rest.tolist()])

    def raw(self, index: int) -> bytes | None:
        """The encoded bytes of item ``index`` as stored, or None when it was replaced or appended (encode
        the item itself then)."""
        i = self._position(index)
        if i >= len(self._starts) or i in self._replaced:
            return None
        return bytes(self._buffer[self._starts[i]:self._ends[i]])

    def raw_items(self, block: int = 4096) -> Iterator[bytes | None]:
        """:meth:`raw` of every item in order, reading the buffer once per ``block`` items stored one after
        another (a snapshot's file is read with a system call per slice)."""
        encoded = len(self._starts)
        for a in range(0, encoded, block):
            starts, ends = self._starts[a:a + block], self._ends[a:a + block]
            if bool((starts[1:] == ends[:-1]).all()):
                first = int(starts[0])
                data = bytes(self._buffer[first:int(ends[-1])])
                parts: Iterable[bytes] = (data[s:e] for s, e in zip((starts - first).tolist(), (ends - first).tolist(),
                                                                     strict=True))
            else:
                parts = (bytes(self._buffer[s:e]) for s, e in zip(starts.tolist(), ends.tolist(), strict=True))
            for i, part in enumerate(parts, a):
                yield None if i in self._replaced else part
        yield from (None for _ in self._tail)

    def __repr__(self) -> str:
        return f"EncodedList({len(self)} items, {len(self._starts) - len(self._replaced)} encoded)"


def encoded_items(items: Sequence[E], encode: Callable[[E], bytes]) -> Iterator[bytes]:
    """The encoded form of each of ``items``: the stored bytes of an :class:`EncodedList` item that was not
    replaced (not decoded again), ``encode(item)`` otherwise."""
    if isinstance(items, EncodedList):
        for i, raw in enumerate(items.raw_items()):
            yield encode(items[i]) if raw is None else raw
    else:
        yield from map(encode, items)


def resident_bytes(array: np.ndarray, private_from: int | None = None) -> int:
    """Bytes of ``array`` in this process's own memory: none for an array memory-mapped from a file (a
    persisted snapshot's rows or sketch: the OS page cache holds them, shared by every process that maps them,
    and drops them under memory pressure), but its rows from ``private_from`` on when given (rows appended
    into the spare rows of a copy-on-write mapping, :func:`mapping_with_room`: each written page is this
    process's own copy)."""
    base: Any = array
    while base is not None:
        if isinstance(base, (np.memmap, mmap.mmap)):
            return 0 if private_from is None else int(array[private_from:].nbytes)
        base = getattr(base, "base", None)
    return int(array.nbytes)


def mapping_with_room(array: np.ndarray) -> np.ndarray | None:
    """The whole private copy-on-write file mapping ``array`` is the first rows of, when it has rows after
    them (a persisted snapshot's vector file, written with spare rows: ``workspace.snapshots``); None otherwise.

    Appending into those rows writes this process's own copy of the pages written (the file and every other
    process mapping it see nothing), so a scope loaded from its snapshot takes appends in place instead of
    copying every row of the file into memory first. Only the one owner of the loaded rows may use it."""
    root: Any = array
    while isinstance(root.base, np.ndarray):
        root = root.base
    if not isinstance(root, np.memmap) or root.mode != "c" or not root.flags.writeable:
        return None
    if root.dtype != array.dtype or root.shape[1:] != array.shape[1:] or root.shape[0] <= array.shape[0] \
            or not array.flags.c_contiguous \
            or array.__array_interface__["data"][0] != root.__array_interface__["data"][0]:
        return None
    return root

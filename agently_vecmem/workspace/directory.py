"""Per-scope id lists: a small scope's first read costs reads by id, not a pass over the whole collection.

Every filtered ``get`` of Chroma (embedded or server) costs time proportional to the collection, while a
``get`` by ids does not (``benchmarks/RESULTS.md``, "Many users on one store"). So each scope of a user
(``user, collection, memory_scope, session_id``; any status) keeps a *directory*: numbered entries, rows of
the store's own collection (id ``vecmem-dir:<key>:<n>``, metadata ``vecmem_dir``, no user: no read of
records ever matches them), each listing record ids written to the scope. A first read gets the entries by id,
then the records by id, and keeps those that still belong to the scope (a record that was deleted is not
returned; one that left the scope no longer matches). A put of new records adds its entry in the same Chroma
call as the records (no extra write).

The protocol, safe with several writer processes and no compare-and-swap:

* entries are numbered without gaps; Chroma's ``add`` keeps an existing id and ignores the new one, so a
  writer appends at the next free number, reads the entry back, and tries the next number when another
  writer took it (no entry is ever overwritten);
* a record is listed no later than it is written (its entry is added first, or in the same ``add`` call), so
  an acknowledged record is always listed; an id listed for a write that failed is harmless (it is not found,
  or does not match);
* a store's directories are complete: a store is created with them, and a store written before them gets
  one entry per scope listing all its records when it is migrated. So a scope without entries is empty.

Directories that grew past :data:`MAX_ENTRIES` entries (large, often-written scopes, whose filtered read costs
about as much as the scope itself) are not used for reads.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from ..records import DEFAULT_USER, MemoryRecord

__all__ = ["Directories", "Entry", "directory_key", "is_directory_row", "MAX_ENTRIES"]

logger = logging.getLogger(__name__)

#: Entries read per ``get``.
PAGE = 64
#: Entries written per Chroma call (its batch limit is 5,461 rows).
_BATCH = 5_000
#: Directories with more entries are not used for reads (the scope is read with a filter instead).
MAX_ENTRIES = 8 * PAGE
_PREFIX = "vecmem-dir:"
#: The metadata key that marks a directory row.
DIR_KEY = "vecmem_dir"


def is_directory_row(meta: dict[str, Any] | None) -> bool:
    """Whether Chroma metadata belongs to a directory entry (not a record)."""
    return bool(meta) and DIR_KEY in meta  # type: ignore[operator]


class Entry(NamedTuple):
    """One directory entry to add: its id, directory key, number and listed ids (as stored JSON)."""

    id: str
    key: str
    n: int
    text: str


def directory_key(user_id: str, collection: str, memory_scope: str, session_id: str | None) -> str:
    """The directory of one user's scope (all statuses), as a short stable id prefix."""
    raw = json.dumps([user_id, collection, memory_scope, session_id], ensure_ascii=False)
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:32]


def _record_key(record: MemoryRecord) -> str:
    return directory_key(record.user_id or DEFAULT_USER, record.collection, record.memory_scope, record.session_id)


def _meta_key(meta: dict[str, Any]) -> str:
    return directory_key(meta.get("user_id") or DEFAULT_USER, meta.get("collection", "memory"),
                         meta.get("memory_scope", ""), meta.get("session_id"))


def _entry_id(key: str, n: int) -> str:
    return f"{_PREFIX}{key}:{n}"


class Directories:
    """The directories of one store (see the module docstring).

    Args:
        collection: the store's Chroma collection.
        calls: runs one Chroma call, translating failures (``calls(what, fn, *args, **kwargs)``).
        dim: the collection's vector dimension (an entry carries a constant unit vector).
    """

    def __init__(self, collection: Any, calls: Callable[..., Any], dim: int) -> None:
        self.collection = collection
        self.calls = calls
        self.vector = [1.0] + [0.0] * (dim - 1)
        self._tail: dict[str, int] = {}  # key -> the next entry number this process expects to be free
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ reads
    def ids(self, key: str) -> list[str] | None:
        """Every record id listed for the scope (empty: the scope has no records), or None when the
        directory is too long to be worth reading (more than :data:`MAX_ENTRIES` entries)."""
        listed: list[str] = []
        start = 0
        while start < MAX_ENTRIES:
            wanted = [_entry_id(key, n) for n in range(start, start + PAGE)]
            res = self.calls("read of a scope directory", self.collection.get, ids=wanted, include=["documents"])
            found = dict(zip(res["ids"], res["documents"], strict=True))
            n = start
            while _entry_id(key, n) in found:
                listed += json.loads(found[_entry_id(key, n)] or "[]")
                n += 1
            with self._lock:
                self._tail[key] = max(self._tail.get(key, 0), n)
            if n < start + PAGE:
                return list(dict.fromkeys(listed))
            start += PAGE
        return None

    # ------------------------------------------------------------------ writes
    def entries_for(self, records: Iterable[MemoryRecord],
                    existing: dict[str, dict[str, Any]] | None = None) -> list[Entry]:
        """The entries that list ``records`` in their scopes, numbered at each directory's next free number
        (reserved in this process). A record already stored in the same scope (``existing``: id ->
        metadata) is listed already and needs none."""
        by_key: dict[str, list[str]] = {}
        for record in records:
            key = _record_key(record)
            old = (existing or {}).get(record.id)
            if old is None or _meta_key(old) != key:
                by_key.setdefault(key, []).append(record.id)
        entries = []
        for key, ids in by_key.items():
            n = self._next(key)
            with self._lock:
                self._tail[key] = n + 1
            entries.append(Entry(_entry_id(key, n), key, n, json.dumps(ids)))
        return entries

    def rows(self, entries: list[Entry]) -> tuple[list[str], list[list[float]], list[dict[str, Any]], list[str]]:
        """``(ids, embeddings, metadatas, documents)`` of ``entries``, to add beside records in one call."""
        return ([e.id for e in entries], [self.vector] * len(entries),
                [{DIR_KEY: e.key, "n": e.n} for e in entries], [e.text for e in entries])

    def add(self, entries: list[Entry]) -> None:
        """Add ``entries`` on their own (before the records they list are written), then :meth:`verify`."""
        if entries:
            ids, vectors, metas, docs = self.rows(entries)
            for start in range(0, len(ids), _BATCH):  # within Chroma's batch limit
                end = start + _BATCH
                self.calls("write of scope directories", self.collection.add, ids=ids[start:end],
                           embeddings=vectors[start:end], metadatas=metas[start:end], documents=docs[start:end])
            self.verify(entries)

    def verify(self, entries: list[Entry]) -> None:
        """Read ``entries`` back: one whose number another writer took first is appended again after it."""
        if not entries:
            return
        back = self.calls("read of scope directories", self.collection.get, ids=[e.id for e in entries],
                          include=["documents"])
        stored = dict(zip(back["ids"], back["documents"], strict=True))
        for e in entries:
            if stored.get(e.id) != e.text:
                self._append(e.key, json.loads(e.text), first=e.n + 1)

    def record_writes(self, records: Iterable[MemoryRecord]) -> None:
        """List ``records`` in their scopes' directories before they are written (their own call)."""
        self.add(self.entries_for(records))

    def backfill(self, metadatas: Iterable[tuple[str, dict[str, Any]]], batch: int) -> int:
        """Make the directories of a store written before them complete: one entry per scope listing every
        record (``(id, metadata)`` of the whole collection). Returns how many scopes were listed."""
        by_key: dict[str, list[str]] = {}
        for rid, meta in metadatas:
            if not is_directory_row(meta):
                by_key.setdefault(_meta_key(meta), []).append(rid)
        keys = list(by_key)
        for start in range(0, len(keys), batch):
            chunk = keys[start:start + batch]
            entries = [_entry_id(key, 0) for key in chunk]
            texts = [json.dumps(by_key[key]) for key in chunk]
            self.calls("write of scope directories", self.collection.add, ids=entries,
                       embeddings=[self.vector] * len(chunk), documents=texts,
                       metadatas=[{DIR_KEY: key, "n": 0} for key in chunk])
            back = self.calls("read of scope directories", self.collection.get, ids=entries, include=["documents"])
            stored = dict(zip(back["ids"], back["documents"], strict=True))
            for key, entry, text in zip(chunk, entries, texts, strict=True):
                if stored.get(entry) == text:
                    with self._lock:
                        self._tail[key] = max(self._tail.get(key, 0), 1)
                else:  # a writer's entry was already at 0 (a migration racing a new writer): append after it
                    self._append(key, by_key[key], first=1)
        return len(keys)

    def _next(self, key: str) -> int:
        with self._lock:
            known = self._tail.get(key)
        if known is not None:
            return known
        n = 0
        while True:  # probe a page at a time for the first free number
            page = n
            wanted = [_entry_id(key, i) for i in range(page, page + PAGE)]
            present = set(self.calls("read of a scope directory", self.collection.get, ids=wanted, include=[])["ids"])
            while _entry_id(key, n) in present:
                n += 1
            if n < page + PAGE:
                break
        with self._lock:
            self._tail[key] = n
        return n

    def _append(self, key: str, ids: list[str], *, first: int) -> None:
        """Add an entry listing ``ids`` at the first free number from ``first`` (read back: a number another
        writer took keeps its entry, and this one moves on)."""
        text = json.dumps(ids)
        n = first
        while True:
            entry = _entry_id(key, n)
            self.calls("write of a scope directory", self.collection.add, ids=[entry], embeddings=[self.vector],
                       documents=[text], metadatas=[{DIR_KEY: key, "n": n}])
            back = self.calls("read of a scope directory", self.collection.get, ids=[entry], include=["documents"])
            if back["documents"] and back["documents"][0] == text:
                break
            n += 1  # another writer's entry (or an identical one, which lists the same ids: still correct)
        with self._lock:
            self._tail[key] = max(self._tail.get(key, 0), n + 1)

"""The scope snapshots a process keeps, bounded: a byte budget, least recently used scopes evicted whole.

A :class:`~agently_vecmem.workspace.ChromaWorkspace` keeps one :class:`~agently_vecmem.search.view.ScopeView`
per scope it has read, current with every write. A service that serves many users and sessions would keep
every scope it ever touched; this cache keeps the most recently used ones within a byte budget. An evicted
scope is read again from Chroma on its next use, with every freshness guarantee of a first read.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import ConfigurationError
from ..search.view import DECODED_RECORDS, ScopeView

__all__ = ["DEFAULT_CACHE_BYTES", "CACHE_BYTES_ENV", "ViewCache", "default_budget", "view_bytes"]

logger = logging.getLogger(__name__)

#: The default budget: room for a few 100k-record scopes of 384-d vectors beside the embedding model in a
#: 4 GB worker (``benchmarks/RESULTS.md`` has the per-record cost).
DEFAULT_CACHE_BYTES = 1 << 30
#: Environment variable overriding :data:`DEFAULT_CACHE_BYTES` for workspaces that name no budget (e.g. every
#: worker of a service, or a test run forcing eviction with a tiny budget).
CACHE_BYTES_ENV = "AGENTLY_VECMEM_CACHE_BYTES"
#: Estimated bytes per record beside its vector: the record model, its document and the derived structures
#: (id index, lexical postings, neighbour links) built on the snapshot. Measured with ``tracemalloc``
#: (``benchmarks/bench_record_memory.py``): ~1.3 KB for records of 10-30 words now that stored records share
#: one fields-set (2.6-3.1 KB before); counted with room for longer texts.
_PER_RECORD = 2_048
#: The same for a scope loaded from its persisted snapshot, whose records and documents stay in the mapped
#: file until read (:attr:`ScopeView.encoded`): the ids, the id index, the items' offsets and the derived
#: structures, ~340 B per record measured the same way (``benchmarks/bench_record_memory.py``).
_PER_ENCODED_RECORD = 512
#: Estimated bytes of one snapshot beside its records (the objects and small arrays every view has; a
#: 4-record session view measured ~21 KB in all).
_PER_VIEW = 1_024


def default_budget() -> int:
    """:data:`CACHE_BYTES_ENV` if set, else :data:`DEFAULT_CACHE_BYTES`.

    Raises:
        ConfigurationError: the variable is not a non-negative integer.
    """
    text = os.environ.get(CACHE_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_CACHE_BYTES
    try:
        value = int(text)
    except ValueError:
        raise ConfigurationError(f"{CACHE_BYTES_ENV}={text!r} is not a number of bytes") from None
    if value < 0:
        raise ConfigurationError(f"{CACHE_BYTES_ENV} must be >= 0, got {value}")
    return value


def view_bytes(view: ScopeView) -> int:
    """An estimate of what a snapshot holds in this process's memory (its vectors of every space exactly, the
    rest per record and per snapshot). Rows mapped from a persisted snapshot, and records read from its file,
    are not counted: the OS page cache holds them, shared by every worker of the machine."""
    per_record = _PER_ENCODED_RECORD if view.encoded and DECODED_RECORDS not in view.derived else _PER_RECORD
    return _PER_VIEW + view.vector_bytes + per_record * len(view)


class ViewCache:
    """Scope snapshots by scope key, least recently used first, within ``budget`` bytes.

    Not thread-safe by itself: the workspace calls it under its lock.

    Args:
        budget: the most bytes of snapshots kept (see :func:`view_bytes`). A snapshot larger than the whole
            budget is used once and not kept (logged once).
    """

    def __init__(self, budget: int = DEFAULT_CACHE_BYTES) -> None:
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise ConfigurationError(f"cache_bytes must be a non-negative integer, got {budget!r}")
        self.budget = budget
        self._views: OrderedDict[tuple[Any, ...], ScopeView] = OrderedDict()
        self._bytes: dict[tuple[Any, ...], int] = {}
        # (user_id, session_id) of each cached scope -> its keys: a write finds the scopes its records can
        # belong to without looking at the others (user None: a workspace reading every user's records).
        self._routes: dict[tuple[str | None, str | None], set[tuple[Any, ...]]] = {}
        self.total = 0
        self.hits = self.misses = self.evictions = 0
        self._warned = False
        self._warn_lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._views)

    def __bool__(self) -> bool:
        return bool(self._views)

    def get(self, key: tuple[Any, ...]) -> ScopeView | None:
        """The cached snapshot (now the most recently used), or None (counted as a miss)."""
        view = self._views.get(key)
        if view is None:
            self.misses += 1
            return None
        self.hits += 1
        self._views.move_to_end(key)
        size = view_bytes(view)  # grown since it was counted? (its sketch built, its records decoded, ...)
        if size != self._bytes[key]:
            self._set(key, view, size)
            self._evict(keep=key)
        return view

    def add(self, key: tuple[Any, ...], view: ScopeView) -> None:
        """Keep a freshly loaded snapshot, evicting the least recently used ones to stay within the budget."""
        size = view_bytes(view)
        if size > self.budget:
            with self._warn_lock:
                if not self._warned:
                    self._warned = True
                    logger.warning("a scope of %d records (~%d MB) is larger than the snapshot budget (%d MB): it is "
                                   "read from Chroma on every use; raise cache_bytes to keep it", len(view),
                                   size >> 20, self.budget >> 20)
            return
        self._set(key, view, size)
        self._evict(keep=key)

    def replace(self, key: tuple[Any, ...], view: ScopeView) -> None:
        """A newer snapshot of a cached scope (after a write); its place in the order is kept."""
        if key in self._views:
            self._set(key, view, view_bytes(view))
            self._evict(keep=key)

    def items(self) -> Iterator[tuple[tuple[Any, ...], ScopeView]]:
        """A snapshot of the cached ``(key, view)`` pairs (safe to replace entries while iterating)."""
        return iter(list(self._views.items()))

    def routed(self, users: Iterable[str | None], sessions: Iterable[str | None]) -> list[tuple[tuple[Any, ...], ScopeView]]:
        """The cached ``(key, view)`` pairs whose scope belongs to one of ``users`` (or to every user) and to
        one of ``sessions`` (or to no single session): every scope a record of those users and sessions can
        be in. Costs the scopes returned, not the scopes cached."""
        users = set(users) | {None}
        sessions = set(sessions) | {None}
        out = []
        for user in users:
            for session in sessions:
                for key in self._routes.get((user, session), ()):
                    out.append((key, self._views[key]))
        return out

    def of_users(self, users: Iterable[str | None]) -> list[tuple[tuple[Any, ...], ScopeView]]:
        """The cached ``(key, view)`` pairs of scopes of ``users`` (and of every user), any session."""
        users = set(users) | {None}
        return [(key, view) for key, view in self._views.items() if view.scope.user_id in users]

    def clear(self) -> None:
        self._views.clear()
        self._bytes.clear()
        self._routes.clear()
        self.total = 0

    def stats(self) -> dict[str, int]:
        """``scopes``, ``bytes``, ``budget_bytes``, ``hits``, ``misses`` and ``evictions`` so far."""
        return {"scopes": len(self._views), "bytes": self.total, "budget_bytes": self.budget, "hits": self.hits,
                "misses": self.misses, "evictions": self.evictions}

    def _set(self, key: tuple[Any, ...], view: ScopeView, size: int) -> None:
        self.total += size - self._bytes.get(key, 0)
        if key not in self._views:
            self._routes.setdefault(_route(view), set()).add(key)
        self._views[key] = view
        self._bytes[key] = size

    def _pop(self, key: tuple[Any, ...]) -> None:
        view = self._views.pop(key)
        self.total -= self._bytes.pop(key)
        route = _route(view)
        keys = self._routes[route]
        keys.discard(key)
        if not keys:
            del self._routes[route]

    def _evict(self, *, keep: tuple[Any, ...]) -> None:
        while self.total > self.budget and len(self._views) > 1:
            key = next(iter(self._views))
            if key == keep:  # the one just used stays; evict the next oldest
                self._views.move_to_end(key)
                continue
            self._pop(key)
            self.evictions += 1


def _route(view: ScopeView) -> tuple[str | None, str | None]:
    return (view.scope.user_id, view.scope.session_id)

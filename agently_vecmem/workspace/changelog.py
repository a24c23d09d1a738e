"""Cross-process change markers for a shared Chroma (server, or any client passed in).

Every process that talks to one Chroma server keeps its own exact in-memory scope snapshots
(:class:`~agently_vecmem.search.view.ScopeView`). To keep them correct while other processes write, each
write also leaves markers in a small companion collection ``<collection>__vecmem_changes``, using only
Chroma's public client API (``get`` / ``add`` / ``upsert`` / ``delete``):

* an **entry** per write phase, never modified: ``intent`` (written *before* the records), ``commit``
  (written *after* them). Each entry carries the write's id (``op``), the writer's id, the writer's clock
  ``ts`` and the affected record ids (a JSON list; ``all=True`` instead for writes over
  :data:`MAX_IDS_PER_ENTRY` ids);
* one **head** record (id :data:`HEAD_ID`) upserted with a fresh random token after every commit entry.

A reader checks for changes with ONE point read of the head (:meth:`ChangeLog.poll`). When the token is the
one it saw last (and no periodic re-check is due) nothing was acknowledged since; otherwise it reads the
entries newer than ``last log read - LAG`` and refreshes only the records named by new ``commit`` entries.

Guarantees (all processes running this version; the clocks of all hosts within ``LAG / 2`` = 1.5 s of each
other, which NTP keeps far tighter):

* **Read-your-writes across processes**: once ``put`` / ``update`` / ``delete`` returned in process B (its
  commit entry and head are written before it returns), the next :meth:`ChangeLog.poll` in process A sees
  the new head, finds the commit entry (it is newer than ``A's last log read - LAG``) and refreshes those ids.
  A writer whose entry ``add`` took longer than ``LAG / 2`` writes the entry again with a fresh ``ts``, so an
  entry can never become visible "behind" a reader's window.
* **A writer that dies between its records and its commit marker** leaves an ``intent`` entry. Readers also
  read the log every :data:`RECHECK_SECONDS` even when the head did not change; an intent without commit
  older than :data:`INTENT_TIMEOUT` seconds is treated as committed (its ids are re-read). So such records
  (never acknowledged to anyone) reach every other process at its first read more than
  ``INTENT_TIMEOUT + RECHECK_SECONDS`` (65 s) after the intent. The writer's own snapshots take them at once.
  A process starting up reads the last ``INTENT_TIMEOUT + 2 * LAG`` seconds of the log once, so it also
  knows the intents still open when it loaded its scopes.
* **Entries are kept :data:`RETENTION` seconds** (writers delete older ones now and then). A reader whose
  last log read is older than that cannot know what it missed and reloads its scopes whole.
* **A head or entry written by another version, or corrupted**, makes the reader reload every cached scope
  whole, with a ``WARNING`` log record naming the marker: never a wrong result. (A writer from before change
  markers existed leaves none at all: every process writing one collection must run a version with them.)
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

__all__ = ["ChangeLog", "Changes", "HEAD_ID", "LOG_VERSION", "LAG", "RECHECK_SECONDS", "INTENT_TIMEOUT", "RETENTION",
           "MAX_IDS_PER_ENTRY", "log_collection_name"]

logger = logging.getLogger(__name__)

LOG_VERSION = 1
HEAD_ID = "__vecmem_head__"
#: Bound (seconds) on the time between an entry's ``ts`` and its visibility (an ``add`` slower than ``LAG / 2``
#: is written again) plus the clock skew between hosts. Readers re-read this much of the log.
LAG = 3.0
#: Readers read the log at least this often (seconds) even when the head did not change.
RECHECK_SECONDS = 5.0
#: An intent without commit this old (seconds) is treated as committed: its writer died or gave up.
INTENT_TIMEOUT = 60.0
#: Entries older than this (seconds) are deleted by writers; a reader idle longer reloads whole.
RETENTION = 3600.0
#: Writes naming more ids carry ``all=True``: readers reload their cached scopes whole (bulk imports).
MAX_IDS_PER_ENTRY = 1000
_COMPACT_EVERY = 300.0
_ENTRY_KINDS = ("intent", "commit")


def log_collection_name(collection: str) -> str:
    """The companion collection holding the change markers of ``collection``."""
    return f"{collection}__vecmem_changes"


@dataclass(frozen=True)
class Changes:
    """What a poll found: ``reload`` (drop every cached scope) or the record ids to re-read."""

    reload: bool = False
    ids: frozenset[str] = field(default_factory=frozenset)
    reason: str = ""

    def __bool__(self) -> bool:
        return self.reload or bool(self.ids)


_NOTHING = Changes()


class ChangeLog:
    """Writer and reader side of the change markers of one collection (one instance per Workspace).

    Args:
        collection: the companion Chroma collection (see :func:`log_collection_name`).
        call: ``call(what, fn, *args, **kw)`` runs a Chroma call and translates its errors.
        clock: the wall clock (tests inject a skewed or frozen one).
    """

    def __init__(self, collection: Any, call: Callable[..., Any], clock: Callable[[], float] = time.time) -> None:
        self.collection = collection
        self._call = call
        self._clock = clock
        self.writer = uuid.uuid4().hex
        self._rng = np.random.default_rng()
        self._last_compact = clock()
        # reader state
        self._head: str | None = None
        self._bad_heads: set[str] = set()
        self._log_read_at: float | None = None
        self._seen: dict[str, float] = {}
        self._pending: dict[str, tuple[float, frozenset[str] | None]] = {}
        self._committed: dict[str, float] = {}
        #: how many polls read only the head / also the log; how many reloads (tests and benchmarks read these)
        self.stats = {"polls": 0, "log_reads": 0, "reloads": 0, "refreshed_ids": 0}

    # ------------------------------------------------------------------ writer side
    def _entry_meta(self, kind: str, op: str, ids: Sequence[str], ts: float) -> dict[str, Any]:
        many = len(ids) > MAX_IDS_PER_ENTRY
        return {"v": LOG_VERSION, "kind": kind, "op": op, "writer": self.writer, "ts": ts,
                "ids": "" if many else json.dumps(list(ids)), "all": many}

    def _append(self, kind: str, op: str, ids: Sequence[str]) -> None:
        for _ in range(3):
            ts = self._clock()
            self._call(f"write of its {kind} marker", self.collection.add, ids=[f"{op}.{kind}.{uuid.uuid4().hex[:8]}"],
                       embeddings=self._rng.random((1, 2), dtype=np.float32) + 0.1,
                       metadatas=[self._entry_meta(kind, op, ids, ts)], documents=[""])
            if self._clock() - ts <= LAG / 2:
                return
            logger.debug("change marker %s.%s took %.1f s; writing it again", op, kind, self._clock() - ts)

    def begin(self, ids: Sequence[str]) -> str:
        """Write the ``intent`` entry of a write about to touch ``ids``; returns the write's id."""
        op = uuid.uuid4().hex
        self._append("intent", op, ids)
        return op

    def commit(self, op: str, ids: Sequence[str]) -> None:
        """Write the ``commit`` entry, then a new head token (the write is acknowledged after this)."""
        self._append("commit", op, ids)
        token = uuid.uuid4().hex
        self._call("write of its change head", self.collection.upsert, ids=[HEAD_ID], embeddings=[[1.0, 1.0]],
                   metadatas=[{"v": LOG_VERSION, "kind": "head", "token": token, "ts": self._clock()}],
                   documents=[""])
        self._compact()

    def _compact(self) -> None:
        now = self._clock()
        if now - self._last_compact < _COMPACT_EVERY:
            return
        self._last_compact = now
        try:
            self._call("compaction of its change log", self.collection.delete,
                       where={"ts": {"$lt": now - RETENTION}})
        except Exception as e:  # noqa: BLE001 - compaction is best effort; the next writer tries again
            logger.warning("could not compact the change log: %s", e)

    # ------------------------------------------------------------------ reader side
    def reset(self) -> None:
        """Start over from the store as it is now: every cached scope is dropped and will be loaded whole.
        The entries visible now are taken as applied (their records are in Chroma, so in any later load):
        a bulk entry seen here must not trigger another reload. Intents without commit stay pending (their
        writer may still die before committing)."""
        self._head = self._read_head()[0]
        now = self._clock()
        res = self._read_log(now - max(INTENT_TIMEOUT, LAG) - LAG)
        self._scan(res, now)
        self._log_read_at = now

    def _read_log(self, start: float) -> Any:
        self.stats["log_reads"] += 1
        return self._call("read of its change log", self.collection.get, where={"ts": {"$gte": start}},
                          include=["metadatas"])

    def _read_head(self) -> tuple[str | None, str]:
        """``(token, problem)``: the head token (None when no write happened yet) and why it is unusable."""
        res = self._call("read of its change head", self.collection.get, ids=[HEAD_ID], include=["metadatas"])
        if not res["ids"]:
            return None, ""
        meta = (res.get("metadatas") or [None])[0] or {}
        token = meta.get("token")
        if meta.get("v") != LOG_VERSION or not isinstance(token, str) or not token:
            return f"bad:{json.dumps(meta, sort_keys=True, default=str)}", f"change head {meta!r} is not version {LOG_VERSION}"
        return token, ""

    def poll(self) -> Changes:
        """One point read of the head; the log too when it changed or a re-check is due. Returns the changes
        since the last poll (call under the Workspace's lock)."""
        self.stats["polls"] += 1
        now = self._clock()
        if self._log_read_at is None:
            self.reset()
            return Changes(reload=True, reason="first poll")
        token, problem = self._read_head()
        if problem:
            if token in self._bad_heads:
                return _NOTHING
            self._bad_heads.add(token)  # type: ignore[arg-type]
            logger.warning("%s: reloading every cached scope", problem)
            return self._reload(problem)
        if token == self._head and now - self._log_read_at < RECHECK_SECONDS:
            return _NOTHING
        if now - self._log_read_at > RETENTION - LAG:
            return self._reload("idle longer than the change log's retention")
        start = self._log_read_at - LAG
        res = self._read_log(start)
        self._head, self._log_read_at = token, now
        changed, reload = self._scan(res, now)
        horizon = start - LAG
        for book in (self._seen, self._committed):
            for key in [k for k, ts in book.items() if ts < horizon]:
                del book[key]
        if reload:  # every entry of this read is accounted for: the reload is not repeated
            return self._reload(reload)
        self.stats["refreshed_ids"] += len(changed)
        return Changes(ids=frozenset(changed)) if changed else _NOTHING

    # ------------------------------------------------------------------ persisted snapshots (:mod:`.snapshots`)
    def position(self) -> dict[str, Any] | None:
        """Where this reader stands (its last log read): a snapshot current as of now saves this as its
        freshness token. None before the first poll."""
        if self._log_read_at is None:
            return None
        return {"kind": "log", "v": LOG_VERSION, "head": self._head, "at": self._log_read_at,
                "pending": bool(self._pending)}

    def changed_since(self, position: dict[str, Any]) -> frozenset[str] | None:
        """The ids written since a :meth:`position` (re-read them to catch a snapshot up), or None when that
        cannot be known: a bulk write, an unreadable entry, or a position older than the log keeps.

        Every entry from ``INTENT_TIMEOUT + LAG`` before the position counts, intents included (a write begun
        before it may have landed after); re-reading an id that did not change is harmless.
        """
        if position.get("kind") != "log" or position.get("v") != LOG_VERSION \
                or not isinstance(position.get("at"), (int, float)):
            return None
        head, problem = self._read_head()
        if problem:
            return None
        if head == position.get("head") and not position.get("pending"):
            return frozenset()  # nothing was acknowledged since, and no write was open then
        start = float(position["at"]) - LAG - INTENT_TIMEOUT
        if self._clock() - start > RETENTION - LAG:
            return None
        res = self._read_log(start)
        changed: set[str] = set()
        for eid, meta in zip(res["ids"], res.get("metadatas") or [], strict=False):
            if eid == HEAD_ID:
                continue
            meta = meta or {}
            if meta.get("v") != LOG_VERSION or meta.get("kind") not in _ENTRY_KINDS:
                return None
            ids = self._ids_of(meta)
            if ids is None or ids is False:
                return None
            changed |= ids
        return frozenset(changed)

    def _reload(self, reason: str) -> Changes:
        self.stats["reloads"] += 1
        self.reset()
        return Changes(reload=True, reason=reason)

    def _scan(self, res: Any, now: float) -> tuple[set[str], str]:
        """Account for the entries of a log read not seen before: ``(ids to re-read, reason to reload)``."""
        changed: set[str] = set()
        reload = ""
        for eid, meta in zip(res["ids"], res.get("metadatas") or [], strict=False):
            if eid == HEAD_ID or eid in self._seen:
                continue
            meta = meta or {}
            kind, op, ts = meta.get("kind"), meta.get("op"), meta.get("ts")
            ids = self._ids_of(meta)
            if meta.get("v") != LOG_VERSION or kind not in _ENTRY_KINDS or not isinstance(op, str) \
                    or not isinstance(ts, (int, float)) or ids is False:
                logger.warning("change log entry %r (%r) is not version %d: reloading every cached scope",
                               eid, meta, LOG_VERSION)
                self._seen[eid] = ts if isinstance(ts, (int, float)) else now
                reload = f"change log entry {eid!r} unreadable"
                continue
            self._seen[eid] = float(ts)
            if meta.get("writer") == self.writer:
                continue  # our own write: the views were updated when it was made
            if kind == "intent":
                if op not in self._committed:
                    self._pending[op] = (float(ts), ids)
                continue
            self._committed[op] = float(ts)
            self._pending.pop(op, None)
            if ids is None:
                reload = reload or "a bulk write"
            else:
                changed |= ids
        for op, (ts, ids) in list(self._pending.items()):
            if now - ts > INTENT_TIMEOUT:  # its writer died between the records and the commit
                del self._pending[op]
                self._committed[op] = ts
                if ids is None:
                    reload = reload or "an unfinished bulk write"
                else:
                    changed |= ids
        return changed, reload

    @staticmethod
    def _ids_of(meta: dict[str, Any]) -> frozenset[str] | None | Literal[False]:
        """The entry's ids; None for ``all``; False when unreadable."""
        if meta.get("all") is True:
            return None
        try:
            ids = json.loads(meta.get("ids", ""))
        except (TypeError, ValueError):
            return False
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            return False
        return frozenset(ids)

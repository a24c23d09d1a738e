"""What the memory browser reads from a store: filtered pages, record chains, hybrid search, sessions, a map.

Every read goes through :class:`Browser`, which wraps one :class:`~agently_vecmem.workspace.ChromaWorkspace`.
Pages are read with Chroma's ``get(where, limit, offset)`` so a page costs one page of records (plus a count
of the matching ids), never the whole scope. Search runs the real hybrid retrieval
(:func:`~agently_vecmem.search.candidates.retrieve_candidates`) over the scope's snapshot, as the memory
plugin does. Deleting goes through :func:`forget_records` (:meth:`ChromaWorkspace.forget`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from ..errors import ConfigurationError, RecordNotFoundError
from ..filters import ALL_SCOPES, Scope
from ..records import MEMORY_SCOPES, MemoryRecord, iso_time
from ..search.candidates import retrieve_candidates
from ..search.multilingual import multilingual_cjk_query, multilingual_dense_scores
from ..workspace.chroma import ChromaWorkspace

__all__ = ["RecordFilter", "Page", "Browser", "forget_records", "record_json", "parse_day", "MAX_PAGE"]

logger = logging.getLogger(__name__)

MAX_PAGE = 500
STATUSES = ("active", "superseded", "deleted")
MAP_POINTS = 3_000
_FACETS_TTL = 30.0
_COUNT_TTL = 5.0


def parse_day(text: str | None, *, end: bool = False) -> float | None:
    """``YYYY-MM-DD`` (UTC) as epoch seconds: the day's start, or with ``end`` the next day's start.

    Raises:
        ConfigurationError: not a date.
    """
    if not text:
        return None
    try:
        day = datetime.strptime(text.strip(), "%Y-%m-%d").replace(tzinfo=timezone.utc)
    except ValueError:
        raise ConfigurationError(f"invalid date {text!r}; use YYYY-MM-DD") from None
    return day.timestamp() + (86_400.0 if end else 0.0)


@dataclass(frozen=True)
class RecordFilter:
    """The records view's filters, validated once; compiled to one Chroma ``where``.

    Attributes:
        scope: ``GLOBAL_MEMORY``, ``SESSION_MEMORY`` or None (both).
        session: only this ``session_id``.
        tags: records carrying every one of these tags.
        status: ``active``, ``superseded``, ``deleted`` or None (any).
        extracted: True for extracted memories, False for raw turns, None for both.
        date_from, date_to: ``[from, to)`` in epoch seconds on ``date_field``.
        date_field: ``created_at`` or ``occurred_at``.
    """

    scope: str | None = None
    session: str | None = None
    tags: tuple[str, ...] = ()
    status: str | None = None
    extracted: bool | None = None
    date_from: float | None = None
    date_to: float | None = None
    date_field: str = "created_at"

    def __post_init__(self) -> None:
        if self.scope is not None and self.scope not in MEMORY_SCOPES:
            raise ConfigurationError(f"unknown scope {self.scope!r}; use one of {', '.join(MEMORY_SCOPES)}")
        if self.status is not None and self.status not in STATUSES:
            raise ConfigurationError(f"unknown status {self.status!r}; use one of {', '.join(STATUSES)}")
        if self.date_field not in ("created_at", "occurred_at"):
            raise ConfigurationError("date field must be created_at or occurred_at")

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> RecordFilter:
        """From URL query parameters (``scope session tag status kind from to date_field``); blanks are unset."""
        def get(name: str) -> str | None:
            value = (query.get(name) or "").strip()
            return value or None

        kind = get("kind")
        if kind not in (None, "raw", "extracted"):
            raise ConfigurationError(f"unknown kind {kind!r}; use raw or extracted")
        tags = tuple(t.strip() for t in (get("tag") or "").split(",") if t.strip())
        return cls(scope=get("scope"), session=get("session"), tags=tags, status=get("status"),
                   extracted=None if kind is None else kind == "extracted",
                   date_from=parse_day(get("from")), date_to=parse_day(get("to"), end=True),
                   date_field=get("date_field") or "created_at")

    def where(self, *, only_memory: bool = False) -> dict[str, Any] | None:
        """The conditions of the filter (the :mod:`agently_vecmem.filters` grammar), or None for every record.

        Chroma scans its metadata once per clause, so redundant clauses are left out: the collection clause
        when ``only_memory`` (the store holds nothing but memory records), the scope clause when a session
        is named (only SESSION_MEMORY records carry a ``session_id``).
        """
        cond: dict[str, Any] = {} if only_memory else {"collection": {"$eq": "memory"}}
        if self.scope and not (self.scope == "SESSION_MEMORY" and self.session):
            cond["memory_scope"] = {"$eq": self.scope}
        if self.session:
            cond["session_id"] = {"$eq": self.session}
        if self.status:
            cond["status"] = {"$eq": self.status}
        if self.extracted is not None:
            cond["extracted"] = {"$eq": self.extracted}
        if self.tags:
            cond["tags"] = [{"$contains": tag} for tag in self.tags]
        dates = []
        if self.date_from is not None:
            dates.append({"$gte": float(self.date_from)})
        if self.date_to is not None:
            dates.append({"$lt": float(self.date_to)})
        if dates:
            cond[self.date_field] = dates
        return cond or None

    def key(self) -> tuple[Any, ...]:
        return (self.scope, self.session, self.tags, self.status, self.extracted, self.date_from, self.date_to,
                self.date_field)


@dataclass(frozen=True)
class Page:
    """One page of records, newest first (by storage order: the order records were first written)."""

    records: list[MemoryRecord]
    total: int
    offset: int
    limit: int


def record_json(record: MemoryRecord) -> dict[str, Any]:
    """A record as the API returns it (all fields, plus ISO dates)."""
    data = record.model_dump(mode="json")
    data.pop("vector_index", None)
    data["created"] = iso_time(record.created_at)
    data["occurred"] = iso_time(record.occurred_at) if record.occurred_at is not None else None
    return data


def forget_records(ws: ChromaWorkspace, ids: Sequence[str]) -> int:
    """Erase records for good (:meth:`ChromaWorkspace.forget`: with the older versions of each, gone from every
    read and, on an embedded store, from the store's files; recorded in the erasure audit). The one call the
    browser's forget uses.

    Returns:
        How many records were erased (the versions of a memory included).
    """
    return ws.forget(ids=list(ids)).erased


@dataclass
class Browser:
    """Read model of the memory browser over one Workspace (thread-safe; caches are small and expire).

    Args:
        ws: the store.
        model: a chat model for the Ask view (None: the deterministic path).
    """

    ws: ChromaWorkspace
    model: Any = None
    _counts: dict[tuple[Any, ...], tuple[float, int]] = field(default_factory=dict, repr=False)
    _facets: tuple[float, dict[str, Any]] | None = field(default=None, repr=False)
    _only_memory: tuple[float, bool] | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def invalidate(self) -> None:
        """Drop cached counts and facets (after a write)."""
        with self._lock:
            self._counts.clear()
            self._facets = None
            self._only_memory = None

    def where(self, flt: RecordFilter) -> dict[str, Any] | None:
        """The filter's ``where`` for this store (without the collection clause when it is redundant)."""
        now = time.monotonic()
        with self._lock:
            known = self._only_memory
        if known is None or now - known[0] >= _FACETS_TTL:
            other = self.ws.page(where={"collection": {"$ne": "memory"}}, limit=1)
            known = (now, not other)
            with self._lock:
                self._only_memory = known
        return flt.where(only_memory=known[1])

    def count(self, flt: RecordFilter) -> int:
        """How many records match (ids only; cached briefly per filter)."""
        now = time.monotonic()
        with self._lock:
            hit = self._counts.get(flt.key())
        if hit is not None and now - hit[0] < _COUNT_TTL:
            return hit[1]
        n = self.ws.count(where=self.where(flt))
        with self._lock:
            if len(self._counts) > 256:
                self._counts.clear()
            self._counts[flt.key()] = (now, n)
        return n

    # ------------------------------------------------------------------ records
    def page(self, flt: RecordFilter, *, offset: int = 0, limit: int = 50) -> Page:
        """One page of matching records, newest first, read with Chroma's ``limit``/``offset``."""
        if limit < 1 or limit > MAX_PAGE:
            raise ConfigurationError(f"limit must be 1..{MAX_PAGE}")
        if offset < 0:
            raise ConfigurationError("offset must be >= 0")
        total = self.count(flt)
        # Chroma returns matches in storage order (oldest first): newest first is a mirrored window.
        end = total - offset
        if end <= 0:
            return Page([], total, offset, limit)
        start = max(0, end - limit)
        records = self.ws.page(where=self.where(flt), limit=end - start, offset=start)
        records.reverse()
        return Page(records, total, offset, limit)

    def record(self, record_id: str) -> MemoryRecord:
        """One record by id, any status. Raises :class:`RecordNotFoundError`."""
        return self.ws.get(record_id)

    def chain(self, record: MemoryRecord, *, limit: int = 50) -> list[MemoryRecord]:
        """The supersede chain through ``record``, oldest first (follows ``supersedes`` back and
        ``superseded_by`` forward; stops at a missing link or a cycle)."""
        seen = {record.id}
        back = self._follow(record, "supersedes", seen, limit)
        fwd = self._follow(record, "superseded_by", seen, limit)
        # Records replaced by this one whose own link is all there is (supersedes unset on the new one).
        return [*reversed(back), record, *fwd]

    def _follow(self, record: MemoryRecord, link: str, seen: set[str], limit: int) -> list[MemoryRecord]:
        """The records reached from ``record`` along ``link`` (``supersedes`` or ``superseded_by``), nearest
        first; stops at a missing record, a record already in ``seen`` (a cycle) or ``limit`` records."""
        out: list[MemoryRecord] = []
        cur = record
        while (nxt := getattr(cur, link)) and nxt not in seen and len(out) < limit:
            found = self.ws.get_many([nxt], include_inactive=True)
            if not found:
                break
            cur = found[0]
            seen.add(cur.id)
            out.append(cur)
        return out

    # ------------------------------------------------------------------ search
    def scope_of(self, scope: str | None, session: str | None) -> Scope:
        """The hard scope of a search or map: GLOBAL by default, a session's memory when one is named."""
        if scope == "SESSION_MEMORY" or (scope is None and session):
            if not session:
                raise ConfigurationError("pick a session to search SESSION_MEMORY")
            return Scope.session_memory(session)
        if scope not in (None, "GLOBAL_MEMORY"):
            raise ConfigurationError(f"unknown scope {scope!r}; use one of {', '.join(MEMORY_SCOPES)}")
        return Scope.global_memory()

    def search(self, query: str, scope: Scope, *, k: int = 20, tags: Sequence[str] = ()) -> dict[str, Any]:
        """Hybrid retrieval over the scope's active records, with every candidate's score breakdown."""
        if not query.strip():
            raise ConfigurationError("type something to search for")
        view = self.ws.view(scope)
        qvec = self.ws.embed_query(query)
        found = retrieve_candidates(view, query, qvec, k=max(1, min(k, 200)), tags=list(tags))
        multilingual = bool(found) and multilingual_dense_scores(view, query) is not None
        return {
            "query": query,
            "scope": {"memory_scope": scope.memory_scope, "session_id": scope.session_id},
            "scope_size": len(view),
            "dense_signal": "multilingual" if multilingual else "stored vectors",
            "cjk_query": multilingual or multilingual_cjk_query(view, query),
            "hits": [{"rank": c.rank, "score": round(c.score, 4), "dense": round(c.dense, 4),
                      "lexical": round(c.lexical, 4), "fused": round(c.components.get("fused", c.score), 4),
                      "components": {k_: round(v, 4) for k_, v in c.components.items()},
                      "record": record_json(c.record)} for c in found],
        }

    # ------------------------------------------------------------------ sessions
    def facets(self) -> dict[str, Any]:
        """Session ids (with record counts) and tags of the store, cached for a few seconds.

        Chroma has no "distinct", so this reads every record's metadata once per expiry.
        """
        now = time.monotonic()
        with self._lock:
            if self._facets is not None and now - self._facets[0] < _FACETS_TTL:
                return self._facets[1]
        sessions: Counter[str] = Counter()
        raw: Counter[str] = Counter()
        tags: Counter[str] = Counter()
        for record in self.ws.scan(scope=ALL_SCOPES, where={"collection": {"$eq": "memory"}}):
            sid = record.session_id
            if sid:
                sessions[sid] += 1
                if not record.extracted:
                    raw[sid] += 1
            for tag in record.tags:
                tags[tag] += 1
        out = {
            "sessions": [{"id": s, "records": n, "raw_turns": raw[s]} for s, n in sorted(sessions.items())],
            "tags": [t for t, _ in tags.most_common(200)],
        }
        with self._lock:
            self._facets = (now, out)
        return out

    def session_exists(self, session_id: str) -> bool:
        """Whether any record names this session (one ids-only read, at most one id)."""
        return bool(self.ws.page(where={"session_id": {"$eq": session_id}}, limit=1))

    def session(self, session_id: str, *, limit: int = 500) -> dict[str, Any]:
        """A session's raw turns (``extracted=False``) beside the memories extracted from them (its
        SESSION_MEMORY records and GLOBAL records whose provenance names the session), oldest first.

        Raises:
            RecordNotFoundError: no record names this session.
        """
        if not self.session_exists(session_id):
            raise RecordNotFoundError(f"unknown session {session_id!r}")
        records = self.ws.page(where={"session_id": {"$eq": session_id}}, limit=limit * 4)
        glob = self.ws.page(scope=Scope.global_memory(include_inactive=True), limit=20_000)
        records += [r for r in glob if r.provenance.session_id == session_id]
        records.sort(key=lambda r: (r.created_at, r.id))
        turns = [r for r in records if not r.extracted][:limit]
        memories = [r for r in records if r.extracted][:limit]
        return {"session_id": session_id, "turns": [record_json(r) for r in turns],
                "memories": [record_json(r) for r in memories]}

    # ------------------------------------------------------------------ map
    def projection(self, scope: Scope, *, color_by: str = "session", max_points: int = MAP_POINTS) -> dict[str, Any]:
        """A 2-D PCA projection (SVD of the centred vectors) of a scope's active records.

        Large scopes are thinned to ``max_points`` evenly spaced records before projecting.
        """
        if color_by not in ("session", "tag"):
            raise ConfigurationError("colour by session or tag")
        view = self.ws.view(scope)
        n = len(view)
        idx = np.arange(n) if n <= max_points else np.linspace(0, n - 1, max_points).astype(np.int64)
        vecs = np.asarray(view.rows(idx), dtype=np.float64)
        if len(idx) >= 2:
            centred = vecs - vecs.mean(axis=0)
            _, s, vt = np.linalg.svd(centred, full_matrices=False)
            comps = vt[:2] if vt.shape[0] >= 2 else np.vstack([vt, np.zeros_like(vt)])
            xy = centred @ comps.T
            total = float((s ** 2).sum()) or 1.0
            explained = [round(float(v) ** 2 / total, 4) for v in s[:2]]
        else:
            xy = np.zeros((len(idx), 2))
            explained = [0.0, 0.0]
        points = []
        for (x, y), i in zip(xy.tolist(), idx.tolist(), strict=True):
            rec = view.records[i]
            group = (rec.provenance.session_id or rec.session_id or "(none)") if color_by == "session" else (
                rec.tags[0] if rec.tags else "(untagged)")
            points.append({"id": rec.id, "x": round(x, 5), "y": round(y, 5), "group": group,
                           "summary": rec.summary})
        return {"scope": {"memory_scope": scope.memory_scope, "session_id": scope.session_id},
                "total": n, "shown": len(points), "color_by": color_by, "explained_variance": explained,
                "points": points}

    # ------------------------------------------------------------------ writes
    def forget(self, ids: Sequence[str]) -> int:
        """Forget records (see :func:`forget_records`) and drop cached counts."""
        try:
            return forget_records(self.ws, ids)
        finally:
            self.invalidate()

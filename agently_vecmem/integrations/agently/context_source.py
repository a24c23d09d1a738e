"""agently 4.1.4.2+: VecMemory's memories as a ``ContextSource`` for AgentExecution runs.

AgentExecution runs (``agent.input(q).start()``) do not call ``prepare_request``: Agently calls
``create_context_source`` once per run, attaches the source to the run's TaskContext, enumerates its
descriptors without the question (the profile carries none; the index ranks them structurally, in enumeration
order, and offers at most 256 to a selector model call) and then reads the blocks it keeps. The question reaches
a source only in ``async_read_scoped(query=...)``. So this source carries VecMemory's ranking in a read:

* **Pinned snapshot.** The source reads the two visible scopes (active ``GLOBAL_MEMORY`` + this session's
  ``SESSION_MEMORY``) once, when it is created. ``source_revision`` (a digest of the visible records' id,
  status and update time), every descriptor page and every read come from that snapshot, so a write during the
  run cannot trip Agently's consistency checks; the next run sees it.
* **The recall block.** Descriptor ``vecmem:recall`` (ref :data:`RECALL_REF`) is ``required=True``: Agently
  reads it before, and whatever, the selector replies. Its scoped read runs VecMemory's retrieval pipeline for the
  question on the pinned snapshot — plan and rerank with the plugin's model when one is configured, with the
  documented fallbacks, deterministic hybrid retrieval otherwise — and returns the ranked memories, best
  first, whole items fitted to ``max_chars`` and always ``complete`` (a required block that is not complete
  fails the run). The descriptor announces a small ``estimated_chars`` for the same reason. A read without a
  query (``async_read_exact``) returns the most important, newest memories. Retrieval never fails the run: on
  any error the block holds the most important, newest memories and a diagnostic names the error.
* **Optional record blocks** (``session.memory.VecMemory.context_source.offer_records``, default False): every
  visible record is also offered, most important first, then newest, as an optional block the selector may
  add; ``async_read_exact`` / ``async_read_scoped`` read one authorized record (anything outside the two
  scopes is a ``PermissionError``), capped at ``retrieve.budget.item_chars`` and ``max_chars``.
* **Change feed** (``async_changes``): Agently's index derives a new revision's descriptors from the last one
  it cached; only records added, changed or removed since are sent (a bounded registry of recent revisions
  remembers what each one listed). An unknown revision raises, and Agently enumerates in full.

Each read and enumeration appends a ``context_source`` diagnostic to the plugin's history.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from contextlib import nullcontext
from typing import Any

from agently.types.data import (  # type: ignore[attr-defined,unused-ignore]  # agently 4.1.4.2+ only
    ContextSourceChange,
    ContextSourceChangeSet,
    ContextSourceDescriptor,
    ContextSourceDescriptorPage,
    ContextSourceRead,
)

from ...errors import ConfigurationError, RecordNotFoundError, ScopeAccessError
from ...filters import Scope
from ...memory import pipeline
from ...memory.context import CallContext
from ...memory.packaging import limit_text
from ...memory.retrieval import RetrievalRequest
from ...records import MemoryRecord

__all__ = ["VecMemoryContextSource", "record_text", "RECALL_KEY", "RECALL_REF"]

RECALL_KEY = "vecmem:recall"
RECALL_REF = "vecmem-recall"
#: what the recall descriptor announces: Agently drops (and then fails the run on) a required block whose
#: estimate exceeds the read limit; the read itself always fits the limit it is given.
RECALL_ESTIMATE = 64
RECALL_HEADER = "Long-term memories (VecMemory, most relevant first):"
NO_MEMORY = "No stored memory matched this request."
#: how many (source, revision) listings the change feed remembers, over all sources of the process
_FEED_REVISIONS = 32
_FEED: OrderedDict[tuple[str, str], tuple[tuple[Any, ...], dict[str, tuple[Any, ...]]]] = OrderedDict()
_FEED_LOCK = threading.Lock()


def record_text(record: MemoryRecord, max_chars: int) -> str:
    """The text a context block carries for one memory (scope label, summary, body), capped."""
    text = f"[{record.memory_scope}] {record.summary}\n{record.content()}"
    return text if len(text) <= max_chars else text[: max(0, max_chars - 12)].rstrip() + " [truncated]"


def _view_digest(view: Any) -> str:
    digest = hashlib.sha256()
    for record in view.decoded_records():
        digest.update(f"{record.id}|{record.status}|{record.updated_at!r}\n".encode())
    return digest.hexdigest()


def _item_line(scope: str, item: Mapping[str, Any]) -> str:
    """One memory of the recall block (a packaged retrieval item)."""
    date = f" ({item['date']})" if item.get("date") else ""
    line = f"[{scope}]{date} {item['summary']}"
    bare = (item["summary"], json.dumps({"summary": item["summary"]}, ensure_ascii=False))
    return line + (f"\n{item['content']}" if item["content"] and item["content"] not in bare else "")


class _PinnedStore:
    """The store as retrieval sees it inside one run: scope views from the source's snapshot, the rest live."""

    def __init__(self, store: Any, views: Mapping[Any, Any]) -> None:
        self._store, self._pinned = store, views

    def view(self, scope: Scope) -> Any:
        pinned = self._pinned.get(scope.key)
        return self._store.view(scope) if pinned is None else pinned

    def consistent(self) -> Any:
        return nullcontext(self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class VecMemoryContextSource:
    """ContextSource over a VecMemory plugin's store for one session and one run (see the module docstring).

    Args:
        plugin: the session's VecMemory plugin (its store, settings, model and diagnostics history).
        session: the Session whose ``SESSION_MEMORY`` is visible.

    Raises:
        ConfigurationError: the session has no id.
        MemoryModeError: the plugin has no store.
    """

    source_kind = "session_memory"

    def __init__(self, plugin: Any, session: Any) -> None:
        session_id = str(getattr(session, "id", "") or "").strip()
        if not session_id:
            raise ConfigurationError("a VecMemory context source needs a session with an id")
        self.plugin = plugin
        self.session_id = session_id
        self.scopes = (Scope.global_memory(), Scope.session_memory(session_id))
        store = plugin.require_store()
        where = store.path or store.collection_name
        self.source_id = f"vecmem:{hashlib.sha256(f'{where}|{session_id}'.encode()).hexdigest()[:16]}"
        config = plugin.config()
        self.offer_records = bool(config.context_source.offer_records)
        self.recall = bool(config.retrieve.enabled)
        with store.consistent():
            self._views = store.views(*self.scopes)
        digest = hashlib.sha256(session_id.encode())
        for view in self._views.values():
            digest.update(view.cached("vecmem_context_revision", _view_digest).encode())
        self._records = sorted((r for view in self._views.values() for r in view.decoded_records()),
                               key=lambda r: (-r.importance, -r.created_at, r.id))
        self._by_id = {r.id: r for r in self._records}
        self._revision = f"vecmem-rev:{digest.hexdigest()[:32]}"
        self._remember_listing()

    # ------------------------------------------------------------------ the pinned snapshot
    @property
    def source_revision(self) -> str:
        return self._revision

    @property
    def records(self) -> list[MemoryRecord]:
        """The visible records of the snapshot, most important first, then newest (descriptor order)."""
        return list(self._records)

    def _item_chars(self) -> int:
        return int(self.plugin.config().retrieve.budget.item_chars)

    def _authorized(self, source_ref: str) -> MemoryRecord:
        record_id = str(source_ref or "").strip()
        if not record_id:
            raise ConfigurationError("source_ref cannot be empty.")
        record = self._by_id.get(record_id)
        if record is None:
            raise ScopeAccessError(
                f"memory {record_id!r} is not visible to session {self.session_id!r} (only active GLOBAL_MEMORY "
                "and this session's SESSION_MEMORY are)"
            )
        return record

    def _note(self, operation: str, **details: Any) -> None:
        self.plugin.diagnostics.append({"phase": "context_source", "operation": operation,
                                        "revision": self._revision, **details})

    # ------------------------------------------------------------------ descriptors
    def _keys(self) -> list[str]:
        keys = [RECALL_KEY] if self.recall else []
        return keys + ([f"vecmem:{r.id}" for r in self._records] if self.offer_records else [])

    def _descriptor(self, key: str, projection: int, item_chars: int) -> ContextSourceDescriptor:
        if key == RECALL_KEY:
            return ContextSourceDescriptor(
                descriptor_key=RECALL_KEY, source_id=self.source_id, source_revision=self._revision,
                source_ref=RECALL_REF, role="state", title="VecMemory recall",
                summary="Long-term memories VecMemory retrieves for this request, most relevant first.",
                estimated_chars=RECALL_ESTIMATE, required=True, priority=100,
                metadata={"kind": "vecmem_recall", "visible": len(self._records)},
            )
        record = self._by_id[key.removeprefix("vecmem:")]
        text = record_text(record, item_chars)
        return ContextSourceDescriptor(
            descriptor_key=key, source_id=self.source_id, source_revision=self._revision, source_ref=record.id,
            role="state", title=record.summary[:200] or record.id, summary=record.summary[:500],
            estimated_chars=len(text), index_text=text[:projection],
            content_digest=hashlib.sha256(text.encode("utf-8")).hexdigest(),
            metadata={"record_id": record.id, "memory_scope": record.memory_scope, "kind": record.kind,
                      "session_id": record.session_id, "tags": tuple(record.tags),
                      "importance": record.importance},
        )

    def enumerate_descriptors(self, *, profile: Mapping[str, Any], cursor: str | None,
                              limit: int) -> ContextSourceDescriptorPage:
        """Synchronous :meth:`async_enumerate_descriptors`: the recall descriptor, then (``offer_records``)
        one per visible record."""
        page_size = int(limit)
        if page_size <= 0:
            raise ConfigurationError("limit must be a positive integer.")
        try:
            offset = int(cursor or 0)
        except (TypeError, ValueError) as error:
            raise ConfigurationError("VecMemory descriptor cursor is invalid.") from error
        if offset < 0:
            raise ConfigurationError("VecMemory descriptor cursor cannot be negative.")
        projection = int(profile.get("projection_max_chars") or 2000)
        keys = self._keys()
        item_chars = self._item_chars()
        descriptors = tuple(self._descriptor(k, projection, item_chars) for k in keys[offset: offset + page_size])
        next_offset = offset + len(descriptors)
        self._note("enumerate", visible=len(self._records), returned=len(descriptors), offset=offset)
        return ContextSourceDescriptorPage(
            source_id=self.source_id, source_revision=self._revision, descriptors=descriptors,
            next_cursor=str(next_offset) if next_offset < len(keys) else None,
        )

    async def async_enumerate_descriptors(self, *, profile: Mapping[str, Any], cursor: str | None,
                                          limit: int) -> ContextSourceDescriptorPage:
        return await asyncio.to_thread(self.enumerate_descriptors, profile=profile, cursor=cursor, limit=limit)

    # ------------------------------------------------------------------ change feed
    def _listing(self) -> dict[str, tuple[Any, ...]]:
        """What a descriptor's content depends on, per key (the change feed compares two of these)."""
        out: dict[str, tuple[Any, ...]] = {}
        for key in self._keys():
            record = self._by_id.get(key.removeprefix("vecmem:"))
            out[key] = ("recall",) if record is None else (record.status, record.updated_at, record.importance)
        return out

    def _shape(self, projection: int = 2000) -> tuple[Any, ...]:
        return (self._item_chars(), projection, self.offer_records, self.recall)

    def _remember_listing(self) -> None:
        with _FEED_LOCK:
            key = (self.source_id, self._revision)
            if key not in _FEED:
                _FEED[key] = (self._shape(), self._listing())
            _FEED.move_to_end(key)
            while len(_FEED) > _FEED_REVISIONS:
                _FEED.popitem(last=False)

    def changes(self, *, from_revision: str, to_revision: str,
                profile: Mapping[str, Any]) -> ContextSourceChangeSet:
        """Synchronous :meth:`async_changes`.

        Raises:
            RecordNotFoundError: ``to_revision`` is not this source's, ``from_revision`` is no longer remembered, or
                the descriptors' shape changed since (Agently then enumerates in full).
        """
        if to_revision != self._revision:
            raise RecordNotFoundError(f"this source is pinned at {self._revision}, not {to_revision}")
        projection = int(profile.get("projection_max_chars") or 2000)
        with _FEED_LOCK:
            old = _FEED.get((self.source_id, from_revision))
        if old is None:
            raise RecordNotFoundError(f"revision {from_revision} is no longer remembered")
        shape, before = old
        if shape != self._shape(projection):
            raise RecordNotFoundError("the descriptors' shape changed (item_chars, projection or offered blocks)")
        item_chars = self._item_chars()
        changes = [ContextSourceChange(operation="upsert", descriptor_key=key,
                                       descriptor=self._descriptor(key, projection, item_chars))
                   for key, fingerprint in self._listing().items() if before.get(key) != fingerprint]
        changes += [ContextSourceChange(operation="remove", descriptor_key=key)
                    for key in before.keys() - set(self._keys())]
        self._note("changes", from_revision=from_revision, changes=len(changes))
        return ContextSourceChangeSet(source_id=self.source_id, from_revision=from_revision,
                                      to_revision=to_revision, changes=tuple(changes))

    async def async_changes(self, *, from_revision: str, to_revision: str,
                            profile: Mapping[str, Any]) -> ContextSourceChangeSet:
        return await asyncio.to_thread(self.changes, from_revision=from_revision, to_revision=to_revision,
                                       profile=profile)

    # ------------------------------------------------------------------ the recall block
    def ranked(self, query: str | None) -> tuple[list[tuple[str, str]], dict[str, Any]]:
        """The memories the recall block holds for ``query``, best first, as ``(record id, text)``, and how
        they were chosen. Never raises: a failed retrieval gives the most important, newest memories."""
        details: dict[str, Any] = {"visible": len(self._records)}
        q = (query or "").strip()
        if q and self._records:
            try:
                return self._retrieve(q, details)
            except Exception as e:  # noqa: BLE001 - memory must never fail the user's run
                details.update(fallback="importance_newest", reason="retrieval_failed",
                               error_type=type(e).__name__, error=str(e)[:300])
        else:
            details.update(fallback="importance_newest", reason="no_query" if self._records else "no_memory")
        item_chars = self._item_chars()
        return [(r.id, record_text(r, item_chars)) for r in self._records], details

    def _retrieve(self, query: str, details: dict[str, Any]) -> tuple[list[tuple[str, str]], dict[str, Any]]:
        config = self.plugin.config()
        model = self.plugin.model(config)
        call = CallContext(config, _PinnedStore(self.plugin.require_store(), self._views), model,
                           plugin_name=self.plugin.name)
        q = limit_text(query, config.retrieve_plan.fallback_query_chars)
        retrieved = pipeline.retrieve(call, RetrievalRequest(session_id=self.session_id, prompt_text=q, query=q))
        ranked = sorted(((float(item.get("score", 0.0)), name, item)
                         for name, pkg in retrieved.packages.items() for item in pkg.items),
                        key=lambda t: -t[0])
        diag = pipeline.retrieval_diagnostics(call, retrieved)
        details.update(fallback=None, degraded=diag["degraded"], plan=diag["plan"], model_calls=diag["model_calls"],
                       rerank={name: pkg["rerank"] for name, pkg in diag["packages"].items()})
        return [(str(item["source_ref"]["id"]), _item_line(name, item)) for _score, name, item in ranked], details

    def _recall(self, query: str | None, max_chars: int) -> ContextSourceRead:
        max_chars = int(max_chars)
        if max_chars <= 0:
            raise ConfigurationError("max_chars must be positive.")
        memories, details = self.ranked(query)
        content, used = RECALL_HEADER, []
        for record_id, line in memories:
            if len(content) + 1 + len(line) > max_chars:
                continue  # whole items only; a shorter one further down may still fit
            content += "\n" + line
            used.append(record_id)
        if not used:
            content = NO_MEMORY[:max_chars]
        read = ContextSourceRead(
            source_id=self.source_id, source_revision=self._revision, source_ref=RECALL_REF, content=content,
            completeness="complete", content_digest=hashlib.sha256(content.encode("utf-8")).hexdigest(),
            refs=tuple(dict.fromkeys(used)) or (RECALL_REF,),
            metadata={"memories": len(used), "ranked": len(memories), "fallback": details.get("fallback")},
        )
        self._note("recall", query=(query or "")[:200], memories=len(used), ranked=len(memories),
                   refs=list(dict.fromkeys(used)), max_chars=max_chars, **details)
        return read

    # ------------------------------------------------------------------ reads
    def _read(self, source_ref: str, *, start: int, max_chars: int, query: str | None) -> ContextSourceRead:
        if source_ref == RECALL_REF:
            return self._recall(query, max_chars)
        if int(max_chars) <= 0:
            raise ConfigurationError("max_chars must be positive.")
        if int(start) < 0:
            raise ConfigurationError("range_start cannot be negative.")
        record = self._authorized(source_ref)
        text = record_text(record, self._item_chars())
        if query:
            found = text.lower().find(str(query).lower(), start)
            if found >= 0:  # a window that starts a little before the match
                start = max(start, found - max(0, int(max_chars) // 4))
        chunk = text[start: start + int(max_chars)]
        end = start + len(chunk)
        complete = start == 0 and end >= len(text)
        self._note("read", ref=record.id, chars=len(chunk))
        return ContextSourceRead(
            source_id=self.source_id, source_revision=self._revision, source_ref=record.id, content=chunk,
            completeness="complete" if complete else "truncated",
            next_range_start=end if end < len(text) else None,
            content_digest=hashlib.sha256(text.encode("utf-8")).hexdigest(),
            metadata={"offset": start, "size": len(chunk), "total_size": len(text),
                      "memory_scope": record.memory_scope},
        )

    async def async_read_exact(self, source_ref: str, *, max_chars: int, representation: str | None = None,
                               range_start: int = 0) -> ContextSourceRead:
        return await asyncio.to_thread(self._read, source_ref, start=range_start, max_chars=max_chars, query=None)

    async def async_read_scoped(self, source_ref: str, *, query: str, max_chars: int,
                                representation: str | None = None, range_start: int = 0) -> ContextSourceRead:
        return await asyncio.to_thread(self._read, source_ref, start=range_start, max_chars=max_chars, query=query)

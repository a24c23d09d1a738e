"""agently 4.1.4.2+: VecMemory's records as a ``ContextSource`` for AgentExecution runs.

AgentExecution runs do not call ``prepare_request``; they attach the session memory plugin's context source to
a TaskContext, whose index and reader select and package blocks within their own budget. This source exposes
exactly what VecMemory's retrieval may see for one session — active ``GLOBAL_MEMORY`` records plus this
session's ``SESSION_MEMORY`` — read from the plugin's ChromaWorkspace scope snapshots:

* ``source_revision`` is a digest of the visible records (id, status, update time), so it changes on every
  write that adds, replaces, supersedes or deletes one of them;
* descriptors come most important first, then newest, then by id (a stable order for paging);
* ``async_read_exact`` / ``async_read_scoped`` read one authorized record (anything outside the two scopes is
  a ``PermissionError``, as in AgentlyMemory's source); a record's text is capped at VecMemory's
  ``retrieve.budget.item_chars``, and no read returns more than ``max_chars``.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping
from typing import Any

from agently.types.data import ContextSourceDescriptor, ContextSourceDescriptorPage, ContextSourceRead

from ...errors import ConfigurationError, ScopeAccessError
from ...filters import Scope
from ...records import MemoryRecord

__all__ = ["VecMemoryContextSource", "record_text"]


def record_text(record: MemoryRecord, max_chars: int) -> str:
    """The text a context block carries for one memory (scope label, summary, body), capped."""
    text = f"[{record.memory_scope}] {record.summary}\n{record.content()}"
    return text if len(text) <= max_chars else text[: max(0, max_chars - 12)].rstrip() + " [truncated]"


def _view_digest(view: Any) -> str:
    digest = hashlib.sha256()
    for record in view.records:
        digest.update(f"{record.id}|{record.status}|{record.updated_at!r}\n".encode())
    return digest.hexdigest()


class VecMemoryContextSource:
    """Fixed-scope ContextSource over a VecMemory plugin's store for one session (see the module docstring).

    Args:
        plugin: the session's VecMemory plugin (its store and settings are read on every call, so a re-bound
            store or changed budget applies at once).
        session: the Session whose ``SESSION_MEMORY`` is visible.
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
        scope_digest = hashlib.sha256(f"{where}|{session_id}".encode()).hexdigest()[:16]
        self.source_id = f"vecmem:{scope_digest}"

    # ------------------------------------------------------------------ snapshot
    def _snapshot(self) -> tuple[str, list[MemoryRecord]]:
        """(revision, visible records in descriptor order) from one read of each scope (one freshness check)."""
        views = list(self.plugin.require_store().views(*self.scopes).values())
        digest = hashlib.sha256(self.session_id.encode())
        for view in views:
            digest.update(view.cached("vecmem_context_revision", _view_digest).encode())
        records = [r for view in views for r in view.records]
        records.sort(key=lambda r: (-r.importance, -r.created_at, r.id))
        return f"vecmem-rev:{digest.hexdigest()[:32]}", records

    @property
    def source_revision(self) -> str:
        return self._snapshot()[0]

    def _item_chars(self) -> int:
        return int(self.plugin.config().retrieve.budget.item_chars)

    def _authorized(self, source_ref: str, records: list[MemoryRecord]) -> MemoryRecord:
        """The visible record ``source_ref`` among ``records`` (a snapshot's), or ScopeAccessError."""
        record_id = str(source_ref or "").strip()
        if not record_id:
            raise ConfigurationError("source_ref cannot be empty.")
        for record in records:
            if record.id == record_id:
                return record
        raise ScopeAccessError(
            f"memory {record_id!r} is not visible to session {self.session_id!r} (only active GLOBAL_MEMORY "
            "and this session's SESSION_MEMORY are)"
        )

    # ------------------------------------------------------------------ ContextSource protocol
    def enumerate_descriptors(self, *, profile: Mapping[str, Any], cursor: str | None,
                              limit: int) -> ContextSourceDescriptorPage:
        """Synchronous :meth:`async_enumerate_descriptors`."""
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
        revision, records = self._snapshot()
        item_chars = self._item_chars()
        descriptors = []
        for record in records[offset: offset + page_size]:
            text = record_text(record, item_chars)
            descriptors.append(ContextSourceDescriptor(
                descriptor_key=f"vecmem:{record.id}",
                source_id=self.source_id,
                source_revision=revision,
                source_ref=record.id,
                role="state",
                title=record.summary[:200] or record.id,
                summary=record.summary[:500],
                estimated_chars=len(text),
                index_text=text[:projection],
                content_digest=hashlib.sha256(text.encode("utf-8")).hexdigest(),
                metadata={"record_id": record.id, "memory_scope": record.memory_scope, "kind": record.kind,
                          "session_id": record.session_id, "tags": tuple(record.tags),
                          "importance": record.importance},
            ))
        next_offset = offset + len(descriptors)
        self.plugin.diagnostics.append({"phase": "context_source", "operation": "enumerate",
                                        "revision": revision, "visible": len(records),
                                        "returned": len(descriptors), "offset": offset})
        return ContextSourceDescriptorPage(
            source_id=self.source_id, source_revision=revision, descriptors=tuple(descriptors),
            next_cursor=str(next_offset) if next_offset < len(records) else None,
        )

    async def async_enumerate_descriptors(self, *, profile: Mapping[str, Any], cursor: str | None,
                                          limit: int) -> ContextSourceDescriptorPage:
        return await asyncio.to_thread(self.enumerate_descriptors, profile=profile, cursor=cursor, limit=limit)

    def _read(self, source_ref: str, *, start: int, max_chars: int, query: str | None) -> ContextSourceRead:
        if int(max_chars) <= 0:
            raise ConfigurationError("max_chars must be positive.")
        if int(start) < 0:
            raise ConfigurationError("range_start cannot be negative.")
        revision, records = self._snapshot()
        record = self._authorized(source_ref, records)
        text = record_text(record, self._item_chars())
        if query:
            found = text.lower().find(str(query).lower(), start)
            if found >= 0:  # a window that starts a little before the match
                start = max(start, found - max(0, int(max_chars) // 4))
        chunk = text[start: start + int(max_chars)]
        end = start + len(chunk)
        complete = start == 0 and end >= len(text)
        return ContextSourceRead(
            source_id=self.source_id, source_revision=revision, source_ref=record.id, content=chunk,
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

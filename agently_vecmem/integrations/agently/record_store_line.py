"""agently 4.1.4.2+: the ``chroma`` RecordStore backend provider and VecMemory bound with ``memory_store=``.

* :class:`ChromaRecordStoreBackend` — the ``RecordStoreBackend`` protocol (``root``, ``put``, ``get_data``,
  ``search``, ``capabilities``) plus the reads AgentlyMemory and AgentExecution use (``get``, ``get_record``,
  ``read_bounded``, ``stream_read``, ``ref_envelope``), over the shared
  :class:`~agently_vecmem.integrations.agently.records.ChromaRecords`. Registered on
  ``agently.base.record_store_registry`` as provider ``"chroma"``, so Agently's own AgentlyMemory keeps its
  records in Chroma::

      from agently.base import record_store_registry
      agent.use_record_store(record_store_registry.create("./.agently/memory", provider="chroma",
                                                          mode="read_write"))

* :class:`RecordStoreVecMemory` — the ``VecMemory`` mode of this line: ``use_memory(mode="VecMemory",
  memory_store=...)`` takes a ChromaWorkspace (see :func:`~agently_vecmem.integrations.agently.records.chroma_store`
  for a path or server address), a RecordStore on the ``chroma`` provider or this backend. Without one it
  uses the agent's record store only when that is a Chroma one. A later ``activate_session()`` /
  ``use_record_store()`` re-binds another Chroma store, never a non-Chroma one (kept, with a warning and a
  ``bind`` diagnostic).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from ...errors import ConfigurationError, MemoryModeError, RecordNotFoundError, WorkspaceError
from ...workspace.resolve import chroma_workspace_of
from .common import PROVIDER_NAME, AgentlyVecMemory
from .records import ChromaRecordsBackend

__all__ = [
    "ChromaRecordStoreBackend",
    "RecordStoreVecMemory",
    "create_record_store_backend",
    "register",
    "unregister",
    "is_registered",
]

logger = logging.getLogger(__name__)


class ChromaRecordStoreBackend(ChromaRecordsBackend):
    """Agently RecordStore backend storing records in a ChromaWorkspace.

    Takes the arguments of :class:`~agently_vecmem.integrations.agently.records.ChromaRecordsBackend`; ``root``
    is the store root (default ``.agently/records/chroma``, or the given workspace's path): the embedded
    Chroma store is ``<root>/chroma``.
    """

    name = PROVIDER_NAME

    def _open_root(self, root: str | os.PathLike[str] | None, *, create: bool, mode: str, workspace: Any,
                   host: str | None) -> Path:
        if root is None and workspace is not None:
            root = workspace.path or Path(".agently") / "records" / f"chroma-{workspace.collection_name}"
        self._root = Path(root or Path(".agently") / "records" / "chroma").expanduser().resolve()
        if not create and not self._root.exists() and workspace is None and host is None:
            raise WorkspaceError(f"RecordStore root does not exist: {self._root} (pass create=True)")
        return self._root

    @property
    def root(self) -> Path:
        return self._root

    def __repr__(self) -> str:
        return f"ChromaRecordStoreBackend({str(self._root)!r}, workspace={self.vecmem_workspace!r})"

    async def put(self, content: Any, *, collection: str, kind: str | None = None, summary: str | None = None,
                  scope: dict[str, Any] | None = None, source: dict[str, Any] | None = None,
                  meta: dict[str, Any] | None = None, indexed: bool = False, vector: bool = False,
                  **_: Any) -> dict[str, Any]:
        """Store one record (always embedded: ``indexed``/``vector`` need no extra work); returns its ref."""
        return await super().put(content, collection=collection, kind=kind, summary=summary, scope=scope,
                                 source=source, meta=meta)

    def _envelope(self, ref: dict[str, Any]) -> dict[str, Any]:
        return {
            "record_store_id": f"chroma:{self._root}", "kind": str(ref.get("kind") or "record"),
            "collection": str(ref.get("collection")), "record_id": str(ref["id"]), "version": None,
            "content_ref": ref.get("path"), "digest": ref.get("sha256"), "size": int(ref.get("size") or 0),
            "created_at": str(ref.get("created_at") or ""),
            "policy_labels": list((ref.get("meta") or {}).get("policy_labels") or []),
            "backend_capabilities": {"bounded_read": True, "stream_read": True},
        }

    async def ref_envelope(self, ref_or_id: Any) -> dict[str, Any]:
        try:
            record = await asyncio.to_thread(self.records.lookup, ref_or_id)
        except FileNotFoundError as e:
            raise RecordNotFoundError(f"RecordStore record not found: {ref_or_id}") from e
        return self._envelope(self.records.ref(record))

    async def read_bounded(self, ref_or_path: Any, *, offset: int = 0, limit: int | None = None) -> dict[str, Any]:
        """Agently's ``RecordContentSegment`` of the record's text."""
        def read() -> dict[str, Any]:
            record, segment = self.records.read_bounded(ref_or_path, offset=offset, limit=limit)
            return {"ref": self._envelope(self.records.ref(record)), **segment}

        return await asyncio.to_thread(read)

    async def stream_read(self, ref_or_path: Any, *, offset: int = 0, limit: int | None = None,
                          chunk_size: int = 65536) -> AsyncIterator[dict[str, Any]]:
        if chunk_size <= 0:
            raise ConfigurationError("chunk_size must be positive")
        consumed = 0
        while limit is None or consumed < limit:
            size = chunk_size if limit is None else min(chunk_size, limit - consumed)
            segment = await self.read_bounded(ref_or_path, offset=offset + consumed, limit=size)
            yield segment
            consumed += segment["size"]
            if segment["eof"] or segment["size"] == 0:
                return

    def capabilities(self) -> dict[str, Any]:
        """Agently's ``RecordStoreCapabilities`` (+ what this backend adds: vectors, cosine, the embedder)."""
        return {
            "root": str(self._root),
            "mode": "read_only" if self.read_only else "read_write",
            "external_read": False,
            "external_write": False,
            "private_write": not self.read_only,
            "materialized_components": ["embedding", "records", "vector"],
            "backend": PROVIDER_NAME,
            "vector_similarity": "cosine",
            "embedder_model": self.embedder.model_id,
            "supports_remote_backend": self.vecmem_workspace.mode == "server",
        }


def create_record_store_backend(*, root: Any = None, create: bool = True, mode: str = "read_write",
                                **options: Any) -> ChromaRecordStoreBackend:
    """The provider factory registered as ``"chroma"``: ``(*, root, create, mode, **provider_options)``."""
    return ChromaRecordStoreBackend(root, create=create, mode=mode, **options)


def _what_to_pass(store: Any) -> str:
    got = "no memory store" if store is None else f"a {type(store).__name__} that is not on Chroma"
    return (
        f"Session memory mode 'VecMemory' needs a Chroma store, got {got}. Pass "
        "memory_store=chroma_store('./path' or 'http://host:port') (from agently_vecmem.agently) or a "
        "ChromaWorkspace to use_memory(mode='VecMemory', memory_store=...), or bind the agent to "
        "record_store_registry.create(path, provider='chroma', mode='read_write') with use_record_store()."
    )


class RecordStoreVecMemory(AgentlyVecMemory):
    """VecMemory for agently 4.1.4.2+ (``memory_store=`` protocol, ContextSource for AgentExecution runs).

    Plain requests retrieve and inject through :meth:`prepare_request`, turns are stored by :meth:`after_turn`
    (the same pipeline and diagnostics as on 4.1.4.1); AgentExecution runs read memory through
    :meth:`create_context_source`.

    Raises:
        MemoryModeError: no Chroma store was given and the agent's record store is not a Chroma one.
    """

    def __init__(self, *, memory_store: Any = None, **kwargs: Any) -> None:
        workspace = chroma_workspace_of(memory_store)
        if workspace is None:
            raise MemoryModeError(_what_to_pass(memory_store))
        kwargs.pop("workspace", None)
        super().__init__(workspace=workspace, **kwargs)
        self.memory_store = memory_store

    def bind_memory_store(self, memory_store: Any) -> None:
        """Re-bind to another Chroma store; a non-Chroma one is refused (kept store, warning, diagnostic)."""
        workspace = chroma_workspace_of(memory_store)
        if workspace is None:
            logger.warning("VecMemory keeps its Chroma store: %s", _what_to_pass(memory_store))
            self.diagnostics.append({"phase": "bind", "degraded": False, "reason": "non_chroma_store_ignored",
                                     "offered": type(memory_store).__name__})
            return
        self.bind_workspace(workspace)
        self.memory_store = memory_store

    def create_context_source(self, *, session: Any = None, settings: Any = None, **_: Any) -> Any:
        """A ContextSource for one AgentExecution run: this session's visible memory (GLOBAL + its own
        SESSION_MEMORY) pinned when the run starts, with a required recall block ranked by VecMemory's retrieval
        for the run's question (see :mod:`.context_source`)."""
        from .context_source import VecMemoryContextSource

        return VecMemoryContextSource(self, session or self.session)


def register(Agently: Any, name: str) -> None:
    """Register :func:`create_record_store_backend` as RecordStore backend provider ``name``."""
    from agently.base import record_store_registry  # type: ignore[attr-defined,unused-ignore]  # agently 4.1.4.2+ only

    # Agently calls providers with keywords; its Protocol spells `root` positional-or-keyword
    record_store_registry.register_backend_provider(name, create_record_store_backend)  # type: ignore[arg-type,unused-ignore]


def unregister(Agently: Any, name: str) -> None:
    from agently.base import record_store_registry  # type: ignore[attr-defined,unused-ignore]  # agently 4.1.4.2+ only

    record_store_registry.unregister_backend_provider(name)


def is_registered(Agently: Any, name: str) -> bool:
    from agently.base import record_store_registry  # type: ignore[attr-defined,unused-ignore]  # agently 4.1.4.2+ only

    return name in record_store_registry.list_backend_providers()

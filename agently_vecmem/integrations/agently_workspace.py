"""agently 4.1.3.9–4.1.4.1: the ``chroma`` Workspace provider (``Agently.workspace`` registry).

:class:`ChromaWorkspaceBackend` implements the part of the ``WorkspaceBackend`` protocol that ``Workspace``,
``Workspace.retrieve`` and the built-in ``AgentlyMemory`` use — ``put``, ``search``, ``get``, ``get_data``,
``get_record``, ``capabilities`` and a ``vector_index`` (:class:`ChromaVectorIndex`) with real vectors, so
``retrieve(method="vector"|"hybrid")`` searches by meaning — as async wrappers over the shared
:class:`~agently_vecmem.integrations.agently_records.ChromaRecords` (record layout and filter semantics are
described there). Imports nothing from ``agently``: the registration is in :func:`register`.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, WorkspaceError
from .agently_records import ChromaRecords, ChromaVectorIndex, shared_workspace

__all__ = ["ChromaWorkspaceBackend", "ChromaVectorIndex", "create_backend", "register", "unregister",
           "is_registered"]

_READ_ONLY_MODES = {"read", "read_only", "readonly"}


class ChromaWorkspaceBackend:
    """Agently Workspace backend storing records in a ChromaWorkspace.

    Args:
        root: Workspace root directory (default ``.agently/workspaces/chroma``). The embedded Chroma store
            is ``<root>/chroma``; ``<root>/files`` is the Workspace's editable file area.
        create: create the root when missing (else a missing root is an error).
        mode: ``read_write`` or ``read_only``.
        embedder: ``"minilm"`` (default), ``"onnx"``, ``"hash"`` or an Embedder object.
        workspace: an existing :class:`~agently_vecmem.workspace.ChromaWorkspace` to use as is.
        host, port: use a Chroma server instead of the embedded store.
        collection: the Chroma collection name.

    Raises:
        ConfigurationError: an unknown option or embedder name.
        WorkspaceError: the store cannot be opened.
    """

    name = "chroma"

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        create: bool = True,
        mode: str = "read_write",
        embedder: Any = None,
        workspace: Any = None,
        host: str | None = None,
        port: int = 8000,
        collection: str = "vecmem_memory",
        **options: Any,
    ) -> None:
        if options:
            raise ConfigurationError(
                f"unknown chroma provider option(s) {sorted(options)}; accepted: embedder, workspace, host, "
                "port, collection"
            )
        self.mode = mode
        self.read_only = mode in _READ_ONLY_MODES
        self.root = Path(root or Path(".agently") / "workspaces" / "chroma").expanduser().resolve()
        if not create and not self.root.exists():
            raise WorkspaceError(f"Workspace root does not exist: {self.root} (pass create=True)")
        self.content_root = self.root / "content"
        self.files_root = self.root / "files"
        if not self.read_only:
            self.files_root.mkdir(parents=True, exist_ok=True)
        if workspace is None:
            workspace = shared_workspace(self.root / "chroma", embedder=embedder, host=host, port=port,
                                         collection=collection, read_only=self.read_only)
        self.vecmem_workspace = workspace
        self.embedder = workspace.embedder
        self.records = ChromaRecords(workspace, read_only=self.read_only)
        self.vector_index = ChromaVectorIndex(self)
        self.workspace_id = f"chroma:{self.root}"

    def __repr__(self) -> str:
        return f"ChromaWorkspaceBackend({str(self.root)!r}, workspace={self.vecmem_workspace!r})"

    async def put(self, content: Any, *, collection: str, kind: str | None = None, summary: str | None = None,
                  scope: dict[str, Any] | None = None, source: dict[str, Any] | None = None,
                  meta: dict[str, Any] | None = None) -> dict[str, Any]:
        """Store one record; returns its Agently RecordRef."""
        return await asyncio.to_thread(self.records.put, content, collection=collection, kind=kind,
                                       summary=summary, scope=scope, source=source, meta=meta)

    async def search(self, query: str | None = None, filters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Deterministic search with Agently's filter semantics."""
        return await asyncio.to_thread(self.records.search, query, filters or {})

    async def get(self, ref_or_path: Any) -> str:
        """The record's content as text (a memory's payload as JSON)."""
        record = await asyncio.to_thread(self.records.lookup, ref_or_path)
        return self.records.text(record)

    async def get_data(self, ref_or_path: Any) -> Any:
        """The record's payload: parsed JSON for JSON payloads (AgentlyMemory's memory dict), else text."""
        record = await asyncio.to_thread(self.records.lookup, ref_or_path)
        return self.records.data(record)

    async def get_record(self, record_id: str) -> dict[str, Any] | None:
        """The ref of a record id, or None."""
        try:
            record = await asyncio.to_thread(self.records.lookup, record_id)
        except FileNotFoundError:
            return None
        return self.records.ref(record)

    def capabilities(self) -> dict[str, Any]:
        """What this backend supports (Agently's capability keys; unsupported features are False)."""
        return {
            "backend": "chroma",
            "read_only": self.read_only,
            "root": str(self.root),
            "content_root": str(self.content_root),
            "structured_get_data": True,
            "metadata_filters": True,
            "text_search": True,
            "vector_search": True,
            "vector_similarity": "cosine",
            "embedder_model": self.embedder.model_id,
            "links_query": False,
            "checkpoint_lookup": False,
            "runtime_event_store": False,
            "supports_lease": False,
            "supports_remote_backend": self.vecmem_workspace.mode == "server",
        }


def create_backend(*, root: Any = None, create: bool = True, mode: str = "read_write", **options: Any) -> Any:
    """The provider factory registered as ``"chroma"``: ``(*, root, create, mode, **provider_options)``."""
    return ChromaWorkspaceBackend(root, create=create, mode=mode, **options)


def register(Agently: Any, name: str) -> None:
    """Register :func:`create_backend` as Workspace provider ``name``."""
    Agently.workspace.register_backend_provider(name, create_backend)


def unregister(Agently: Any, name: str) -> None:
    if name in Agently.workspace.list_backend_providers():
        Agently.workspace.unregister_backend_provider(name)


def is_registered(Agently: Any, name: str) -> bool:
    return name in Agently.workspace.list_backend_providers()

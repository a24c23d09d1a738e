"""agently 4.1.3.9–4.1.4.1: the ``chroma`` Workspace provider (``Agently.workspace`` registry).

:class:`ChromaWorkspaceBackend` implements the part of the ``WorkspaceBackend`` protocol that ``Workspace``,
``Workspace.retrieve`` and the built-in ``AgentlyMemory`` use — ``put``, ``search``, ``get``, ``get_data``,
``get_record``, ``capabilities`` and a ``vector_index`` (:class:`ChromaVectorIndex`) with real vectors, so
``retrieve(method="vector"|"hybrid")`` searches by meaning — as async wrappers over the shared
:class:`~agently_vecmem.integrations.agently.records.ChromaRecords` (record layout and filter semantics are
described there). Imports nothing from ``agently``: the registration is in :func:`register`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ...errors import WorkspaceError
from .records import ChromaRecordsBackend, ChromaVectorIndex

__all__ = ["ChromaWorkspaceBackend", "ChromaVectorIndex", "create_backend", "register", "unregister",
           "is_registered"]


class ChromaWorkspaceBackend(ChromaRecordsBackend):
    """Agently Workspace backend storing records in a ChromaWorkspace.

    Takes the arguments of :class:`~agently_vecmem.integrations.agently.records.ChromaRecordsBackend`; ``root``
    is the Workspace root directory (default ``.agently/workspaces/chroma``): the embedded Chroma store is
    ``<root>/chroma``, ``<root>/files`` the Workspace's editable file area.
    """

    name = "chroma"

    def _open_root(self, root: str | os.PathLike[str] | None, *, create: bool, mode: str, workspace: Any,
                   host: str | None) -> Path:
        self.mode = mode
        self.root = Path(root or Path(".agently") / "workspaces" / "chroma").expanduser().resolve()
        if not create and not self.root.exists():
            raise WorkspaceError(f"Workspace root does not exist: {self.root} (pass create=True)")
        self.content_root = self.root / "content"
        self.files_root = self.root / "files"
        if not self.read_only:
            self.files_root.mkdir(parents=True, exist_ok=True)
        self.workspace_id = f"chroma:{self.root}"
        return self.root

    def __repr__(self) -> str:
        return f"ChromaWorkspaceBackend({str(self.root)!r}, workspace={self.vecmem_workspace!r})"

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

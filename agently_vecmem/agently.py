"""``import agently_vecmem.agently`` registers the ``VecMemory`` SessionMemory mode and the ``chroma`` store
provider the installed Agently understands (a Workspace provider on 4.1.3.9–4.1.4.1, a RecordStore backend
provider on 4.1.4.2+; see :mod:`agently_vecmem.integrations.agently`)."""

from __future__ import annotations

from .integrations.agently import (
    AgentlyVecMemory,
    ChromaWorkspaceBackend,
    chroma_record_backend,
    chroma_store,
    host_line,
    install,
    is_installed,
    uninstall,
)

__all__ = ["AgentlyVecMemory", "ChromaWorkspaceBackend", "chroma_store", "chroma_record_backend", "host_line", "install", "uninstall",
           "is_installed"]

install()

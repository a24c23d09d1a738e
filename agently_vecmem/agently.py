"""``import agently_vecmem.agently`` registers the ``chroma`` Workspace provider and the ``VecMemory``
SessionMemory mode with Agently (see :mod:`agently_vecmem.integrations.agently`)."""

from __future__ import annotations

from .integrations.agently import (
    AgentlyVecMemory,
    ChromaWorkspaceBackend,
    install,
    is_installed,
    uninstall,
)

__all__ = ["AgentlyVecMemory", "ChromaWorkspaceBackend", "install", "uninstall", "is_installed"]

install()

"""One answer to "which ChromaWorkspace is behind what the user passed?"."""

from __future__ import annotations

from typing import Any

from ..errors import MemoryModeError
from .chroma import ChromaWorkspace

__all__ = ["chroma_workspace_of", "require_chroma_workspace"]


def chroma_workspace_of(obj: Any) -> ChromaWorkspace | None:
    """The ChromaWorkspace behind ``obj``, or None when ``obj`` is no Chroma store of ours.

    Accepts a ChromaWorkspace; anything exposing it as ``vecmem_workspace`` (our Agently backends); and an
    Agently Workspace (4.1.3.9–4.1.4.1) or RecordStore (4.1.4.2+) whose backend is one of ours. A lazily
    configured Agently store is opened only when its provider is ``chroma``: one on another provider is
    left unopened (opening it would create its files).

    Raises:
        MemoryModeError: a lazy ``chroma`` store of Agently's cannot be opened.
    """
    if isinstance(obj, ChromaWorkspace):
        return obj
    ws = getattr(obj, "vecmem_workspace", None)
    if isinstance(ws, ChromaWorkspace):
        return ws
    backend = getattr(obj, "_backend", None)  # an Agently RecordStore's bound backend, once materialized
    if backend is None:
        provider = getattr(obj, "_provider", None)  # a lazy Agently store names its provider
        if provider is not None and provider != "chroma":
            return None
        try:
            backend = getattr(obj, "backend", None)
        except Exception as e:  # noqa: BLE001 - 4.1.4.10 rejects every lazy provider= RecordStore
            raise MemoryModeError(
                f"this agently store cannot open its 'chroma' provider ({type(e).__name__}: {e}); bind "
                "agent.use_record_store(chroma_record_backend(path), mode='read_write') instead"
            ) from e
    ws = getattr(backend, "vecmem_workspace", None)
    return ws if isinstance(ws, ChromaWorkspace) else None


def require_chroma_workspace(obj: Any) -> ChromaWorkspace:
    """:func:`chroma_workspace_of`, or a :class:`MemoryModeError` saying how to bind one."""
    ws = chroma_workspace_of(obj)
    if ws is None:
        raise MemoryModeError(
            f"Session memory mode 'VecMemory' needs a ChromaWorkspace, got {type(obj).__name__}. "
            "Pass workspace=ChromaWorkspace(path) to use_memory(...), or with Agently use "
            "agent.use_workspace(path, provider='chroma')."
        )
    return ws

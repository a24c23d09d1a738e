"""agently-vecmem: long-term vector memory for Agently, backed by Chroma.

Importing the package is cheap: chromadb, torch and openai load only when a Workspace, an embedder or
a model client is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import (
    ConfigurationError,
    EmbedderMismatchError,
    MemoryModeError,
    ModelError,
    RecordNotFoundError,
    RecordValidationError,
    ScopeError,
    StructuredOutputError,
    VecMemError,
    WorkspaceError,
    WorkspaceLockedError,
)
from .filters import ALL_SCOPES, Scope
from .records import MemoryRecord, Provenance, VectorIndexMeta

if TYPE_CHECKING:
    from .workspace import ChromaWorkspace

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "ALL_SCOPES",
    "ChromaWorkspace",
    "ConfigurationError",
    "EmbedderMismatchError",
    "MemoryModeError",
    "MemoryRecord",
    "ModelError",
    "Provenance",
    "RecordNotFoundError",
    "RecordValidationError",
    "Scope",
    "ScopeError",
    "StructuredOutputError",
    "VecMemError",
    "VectorIndexMeta",
    "WorkspaceError",
    "WorkspaceLockedError",
]

_LAZY = {
    "ChromaWorkspace": ("agently_vecmem.workspace", "ChromaWorkspace"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'agently_vecmem' has no attribute {name!r}")

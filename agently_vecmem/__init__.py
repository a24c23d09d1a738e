"""agently-vecmem: long-term vector memory for Agently, backed by Chroma.

Importing the package is cheap: chromadb, torch and openai load only when a Workspace, an embedder or
a model client is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import (
    ConfigurationError,
    ConfigurationTypeError,
    DataFileError,
    EmbedderMismatchError,
    HistoryImportError,
    HttpError,
    MemoryModeError,
    ModelError,
    RecordContentNotFoundError,
    RecordNotFoundError,
    RecordValidationError,
    ReplyParseError,
    ScopeAccessError,
    ScopeError,
    SessionDataError,
    StructuredOutputError,
    UsageError,
    VecMemError,
    WorkspaceError,
    WorkspaceLockedError,
)
from .filters import ALL_SCOPES, Scope
from .records import MemoryRecord, Provenance, VectorIndexMeta

if TYPE_CHECKING:
    from .embedders import Embedder, OpenAIEmbedder, SentenceTransformerEmbedder
    from .llm import ChatModel, OpenAIChatModel
    from .memory.config import VecMemorySettings
    from .memory.plugin import VecMemory
    from .session import Prompt, Session, register_memory_plugin
    from .settings import Settings
    from .workspace import ChromaWorkspace

__version__ = "0.2.0"

__all__ = [
    "__version__",
    "ALL_SCOPES",
    "ChatModel",
    "ChromaWorkspace",
    "Embedder",
    "OpenAIChatModel",
    "OpenAIEmbedder",
    "Prompt",
    "SentenceTransformerEmbedder",
    "Session",
    "Settings",
    "VecMemory",
    "VecMemorySettings",
    "register_memory_plugin",
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
    "ConfigurationTypeError",
    "DataFileError",
    "ReplyParseError",
    "SessionDataError",
    "UsageError",
    "RecordContentNotFoundError",
    "ScopeAccessError",
    "HistoryImportError",
    "HttpError",
]

_LAZY = {
    "ChromaWorkspace": ("agently_vecmem.workspace", "ChromaWorkspace"),
    "Embedder": ("agently_vecmem.embedders", "Embedder"),
    "SentenceTransformerEmbedder": ("agently_vecmem.embedders", "SentenceTransformerEmbedder"),
    "OpenAIEmbedder": ("agently_vecmem.embedders", "OpenAIEmbedder"),
    "ChatModel": ("agently_vecmem.llm", "ChatModel"),
    "OpenAIChatModel": ("agently_vecmem.llm", "OpenAIChatModel"),
    "VecMemory": ("agently_vecmem.memory.plugin", "VecMemory"),
    "VecMemorySettings": ("agently_vecmem.memory.config", "VecMemorySettings"),
    "Session": ("agently_vecmem.session", "Session"),
    "Prompt": ("agently_vecmem.session", "Prompt"),
    "register_memory_plugin": ("agently_vecmem.session", "register_memory_plugin"),
    "Settings": ("agently_vecmem.settings", "Settings"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'agently_vecmem' has no attribute {name!r}")

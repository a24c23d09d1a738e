"""Session: chat history, context window, memo, resize handlers, memory plugins, import/export.

``agently_vecmem.Session`` mirrors ``agently.core.Session`` (4.1.4.1) without importing Agently; see
``DIFFERENCES.md`` in this folder for the deliberate differences.
"""

from __future__ import annotations

from .driver import ChatTurn, achat
from .export import SessionDataError
from .handlers import default_analysis_handler, simple_cut_handler, simple_cut_window
from .messages import ChatMessage, context_length, message_length
from .prompt import Prompt
from .recording import resolve_contents
from .registry import (
    MemoryPlugin,
    get_memory_plugin,
    list_memory_plugins,
    register_memory_plugin,
    unregister_memory_plugin,
)
from .session import SESSION_DEFAULTS, Session

__all__ = [
    "Session",
    "SESSION_DEFAULTS",
    "ChatMessage",
    "ChatTurn",
    "Prompt",
    "MemoryPlugin",
    "SessionDataError",
    "register_memory_plugin",
    "unregister_memory_plugin",
    "get_memory_plugin",
    "list_memory_plugins",
    "resolve_contents",
    "default_analysis_handler",
    "simple_cut_handler",
    "simple_cut_window",
    "message_length",
    "context_length",
    "achat",
]

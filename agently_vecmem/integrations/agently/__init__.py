"""Plug agently-vecmem into Agently: the ``VecMemory`` SessionMemory mode and a ``chroma`` store provider.

The shared part of the Agently integration (model resolution, the plugin, registration); one module per
host line holds the line's storage API:

* agently 4.1.3.9–4.1.4.1 (Workspace API): :mod:`.agently_workspace` — the ``chroma`` Workspace provider.
* agently 4.1.4.2+ (RecordStore API): :mod:`.agently_recordstore` — the ``chroma`` RecordStore backend
  provider, ``memory_store=`` binding and a ContextSource for AgentExecution runs (:mod:`.agently_context`).

Both sit on one :class:`~agently_vecmem.workspace.ChromaWorkspace` through :mod:`.agently_records`.
Nothing happens on import; call :func:`install` (or ``import agently_vecmem.agently``, which calls it)::

    from agently import Agently
    import agently_vecmem.agently  # noqa: F401  (registers "chroma" and "VecMemory" for this release)

    agent = Agently.create_agent()
    agent.set_settings("OpenAICompatible", {"base_url": "http://127.0.0.1:8000/v1", "model": "qwen2.5",
                                            "api_key": "x"})
    agent.activate_session(session_id="support-demo")
    # 4.1.3.9-4.1.4.1:
    agent.use_workspace("./.agently/memory", provider="chroma")
    agent.activated_session.use_memory(mode="VecMemory")     # or the built-in mode="AgentlyMemory"
    # 4.1.4.2+:
    from agently_vecmem.agently import chroma_store
    agent.activated_session.use_memory(mode="VecMemory", memory_store=chroma_store("./.agently/memory"))

Options of the ``chroma`` provider (``provider_options``): ``embedder`` (``"minilm"`` default, ``"onnx"``,
``"hash"`` or an Embedder), ``workspace`` (an existing ChromaWorkspace), ``host``/``port`` (Chroma server),
``collection``.

VecMemory under Agently calls the agent's configured model: the ``OpenAICompatible`` settings (``base_url``,
``model``, ``api_key`` or ``auth``, ``full_url``, ``headers``) read through the session's settings chain.
Without a usable model (Agently's default ``api.openai.com`` without a key, another requester) it runs the
deterministic path and records a ``model_unavailable`` diagnostic; it never fails the user's request for that.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ...errors import ConfigurationError
from .common import (
    MODE_NAME,
    PROVIDER_NAME,
    RECORD_STORE_LINE,
    SUPPORTED,
    WORKSPACE_LINE,
    AgentlyVecMemory,
    agently_model_resolver,
    model_settings_from_agently,
)
from .records import chroma_store
from .workspace_line import ChromaVectorIndex, ChromaWorkspaceBackend

__all__ = [
    "PROVIDER_NAME",
    "MODE_NAME",
    "AgentlyVecMemory",
    "ChromaWorkspaceBackend",
    "ChromaVectorIndex",
    "chroma_store",
    "chroma_record_backend",
    "host_line",
    "agently_model_resolver",
    "model_settings_from_agently",
    "install",
    "uninstall",
    "is_installed",
]

logger = logging.getLogger(__name__)

_install_lock = threading.Lock()


def _agently() -> tuple[Any, str]:
    """(Agently, line) of the installed release.

    Raises:
        ConfigurationError: agently is missing or has neither storage API.
    """
    try:
        from agently import Agently
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ConfigurationError(f"agently is not installed: pip install 'agently-vecmem[agently]' ({SUPPORTED})") from e
    if hasattr(getattr(Agently, "workspace", None), "register_backend_provider"):
        return Agently, WORKSPACE_LINE
    try:
        from agently.base import record_store_registry  # type: ignore[attr-defined,unused-ignore]  # agently 4.1.4.2+ only
    except ImportError:
        record_store_registry = None  # type: ignore[assignment,unused-ignore]  # a registry on 4.1.4.2+
    if hasattr(record_store_registry, "register_backend_provider"):
        return Agently, RECORD_STORE_LINE
    raise ConfigurationError(
        "this agently release has neither the Workspace provider registry (4.1.3.9-4.1.4.1) nor the "
        f"RecordStore backend registry (4.1.4.2+); agently-vecmem needs {SUPPORTED}"
    )


def host_line() -> str:
    """``"workspace"`` (agently 4.1.3.9–4.1.4.1) or ``"record_store"`` (4.1.4.2+) for the installed release."""
    return _agently()[1]


def chroma_record_backend(location: Any = None, *, embedder: Any = None, collection: str = "vecmem_memory",
                          read_only: bool = False, user: str | None = None) -> Any:
    """A ``chroma`` RecordStore backend (agently 4.1.4.2+) for ``agent.use_record_store(..., mode="read_write")``.

    Args:
        location: the Chroma store directory, or a server as ``http://HOST:PORT`` (as :func:`chroma_store`).
        embedder: as :func:`chroma_store`.
        collection: as :func:`chroma_store`.
        read_only: as :func:`chroma_store`.
        user: binds the backend to one user's memory, as :func:`chroma_store`.

    Example:
        >>> agent.use_record_store(chroma_record_backend("./.agently/memory/chroma"), mode="read_write")  # doctest: +SKIP
    """
    from .record_store_line import ChromaRecordStoreBackend

    workspace = chroma_store(location, embedder=embedder, collection=collection, read_only=read_only, user=user)
    return ChromaRecordStoreBackend(workspace=workspace, mode="read_only" if read_only else "read_write")


def _line_module(line: str) -> Any:
    if line == WORKSPACE_LINE:
        from . import workspace_line

        return workspace_line
    from . import record_store_line

    return record_store_line


def _plugin_class(line: str) -> type:
    if line == WORKSPACE_LINE:
        return AgentlyVecMemory
    from .record_store_line import RecordStoreVecMemory

    return RecordStoreVecMemory


def is_installed() -> bool:
    """Whether both registrations are in place."""
    Agently, line = _agently()
    return _line_module(line).is_registered(Agently, PROVIDER_NAME) and _has_mode(Agently.plugin_manager)


def install() -> None:
    """Register the ``chroma`` store provider and the ``VecMemory`` SessionMemory mode (idempotent).

    On 4.1.3.9–4.1.4.1 the provider is a Workspace provider (``agent.use_workspace(path, provider="chroma")``);
    on 4.1.4.2+ a RecordStore backend provider (``record_store_registry.create(path, provider="chroma")``).

    Raises:
        ConfigurationError: agently is missing or has an incompatible version.
    """
    Agently, line = _agently()
    plugin = _plugin_class(line)
    with _install_lock:
        _line_module(line).register(Agently, PROVIDER_NAME)
        manager = Agently.plugin_manager
        current = manager.get_plugin("SessionMemory", MODE_NAME) if _has_mode(manager) else None
        if current is not plugin:
            # activate=False: the SessionMemory activate setting is left alone (modes are chosen by name).
            manager.register("SessionMemory", plugin, activate=False)


def uninstall() -> None:
    """Remove both registrations (idempotent). Stores and sessions already built keep working."""
    Agently, line = _agently()
    with _install_lock:
        _line_module(line).unregister(Agently, PROVIDER_NAME)
        if _has_mode(Agently.plugin_manager):
            Agently.plugin_manager.unregister("SessionMemory", MODE_NAME)


def _has_mode(manager: Any) -> bool:
    try:
        return MODE_NAME in manager.get_plugin_list("SessionMemory")
    except (KeyError, ValueError, TypeError):
        return False

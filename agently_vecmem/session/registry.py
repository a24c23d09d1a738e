"""Memory plugin registry: ``Session.use_memory(mode=...)`` looks plugins up here.

The standalone counterpart of ``Agently.plugin_manager.register("SessionMemory", Cls)``. A plugin class
carries its mode string in ``name`` and its defaults in ``DEFAULT_SETTINGS``; on registration
``DEFAULT_SETTINGS["$global"]`` is merged *under* :data:`agently_vecmem.settings.global_settings` (values a
user already set there win), so ``settings.get("session.memory.<Name>.x")`` inherits the defaults.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol, runtime_checkable

from ..errors import ConfigurationError, MemoryModeError
from ..settings import deep_merge, global_settings

__all__ = [
    "MemoryPlugin",
    "register_memory_plugin",
    "unregister_memory_plugin",
    "get_memory_plugin",
    "list_memory_plugins",
]

logger = logging.getLogger(__name__)

_plugins: dict[str, type[Any]] = {}
_lock = threading.Lock()


@runtime_checkable
class MemoryPlugin(Protocol):
    """What ``Session`` needs from a memory plugin (Agently's ``SessionMemory`` protocol).

    Constructed as ``cls(session=..., workspace=..., plugin_manager=..., settings=...)``. A plugin that
    cannot work without storage sets ``requires_workspace = True``; the session then refuses to call it
    without a Workspace and says how to pass one.
    """

    name: ClassVar[str]
    DEFAULT_SETTINGS: ClassVar[dict[str, Any]]
    workspace: Any

    def bind_workspace(self, workspace: Any) -> None: ...

    async def prepare_request(self, *, prompt: Any, session: Any, settings: Any) -> dict[str, Any]: ...

    async def after_turn(
        self,
        *,
        session: Any,
        user_content: str | None,
        assistant_content: str | None,
        result: Any,
        settings: Any,
    ) -> dict[str, Any]: ...


def _apply_defaults(cls: type[Any]) -> None:
    defaults = getattr(cls, "DEFAULT_SETTINGS", None) or {}
    if not isinstance(defaults, Mapping):
        raise ConfigurationError(f"{cls.__name__}.DEFAULT_SETTINGS must be a dict, got {type(defaults).__name__}.")
    for key, value in (defaults.get("$global") or {}).items():
        current = global_settings.get(key)
        if isinstance(value, Mapping):
            merged = deep_merge(value, current) if isinstance(current, Mapping) else dict(value)
            global_settings.set(key, merged)
        elif current is None:
            global_settings.set(key, value)


def register_memory_plugin(cls: type[Any]) -> type[Any]:
    """Register a memory plugin class under ``cls.name`` (replacing an earlier one of that name).

    Usable as a class decorator.

    Raises:
        ConfigurationError: ``cls.name`` is missing or empty.
    """
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name.strip():
        raise ConfigurationError(
            f"Memory plugin {getattr(cls, '__name__', cls)!r} needs a non-empty class attribute 'name' "
            "(the mode string for Session.use_memory(mode=...))."
        )
    with _lock:
        if name in _plugins and _plugins[name] is not cls:
            logger.info("Replacing memory plugin %r: %r -> %r", name, _plugins[name], cls)
        _plugins[name] = cls
        _apply_defaults(cls)
    return cls


def unregister_memory_plugin(name: str) -> None:
    """Remove a plugin; unknown names are ignored. Defaults already merged into settings stay."""
    with _lock:
        _plugins.pop(name, None)


#: Plugins shipped with the package, registered on first use (their imports are heavier).
_BUILTIN = {"VecMemory": "agently_vecmem.memory.plugin:VecMemory"}


def get_memory_plugin(name: str) -> type[Any]:
    """Return the plugin class registered as ``name``.

    Raises:
        MemoryModeError: no plugin has that name (Agently's message text).
    """
    with _lock:
        cls = _plugins.get(name)
    if cls is None and name in _BUILTIN:
        import importlib

        module, attr = _BUILTIN[name].split(":")
        cls = register_memory_plugin(getattr(importlib.import_module(module), attr))
    if cls is None:
        raise MemoryModeError(
            f"SessionMemory mode '{name}' is not registered. Registered modes: {list_memory_plugins()}. "
            "Register a plugin class with agently_vecmem.session.register_memory_plugin(cls)."
        )
    return cls


def list_memory_plugins() -> list[str]:
    """Names of all registered plugins, sorted."""
    with _lock:
        return sorted(set(_plugins) | set(_BUILTIN))

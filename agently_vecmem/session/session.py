"""``Session``: chat history, context window, memo, resize handlers, memory plugin, import/export.

A drop-in for ``agently.core.Session`` (4.1.4.1) that does not need Agently installed. Every operation is
written once as an ``async_*`` coroutine; the sync spelling runs it through
:func:`agently_vecmem._sync.run_sync` (``asyncio.run``, or a worker thread inside a running loop).
"""

from __future__ import annotations

import copy
import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from uuid import uuid4

from .._sync import maybe_await, run_sync
from ..errors import ConfigurationError, MemoryModeError
from ..settings import Settings, SettingsNamespace, global_settings
from . import driver
from .export import dump_json, dump_yaml, parse_session_data, read_session_source
from .handlers import SIMPLE_CUT, default_analysis_handler, simple_cut_handler
from .messages import ChatMessage, to_messages
from .recording import format_value, resolve_contents
from .registry import get_memory_plugin

__all__ = ["Session", "SESSION_DEFAULTS"]

logger = logging.getLogger(__name__)

#: Defaults shown under ``session.*`` (Agently's ``_default_settings.yaml``). They sit *under* the settings
#: chain instead of being written into it, so a parent value set after the session exists is still seen.
SESSION_DEFAULTS: dict[str, Any] = {"max_length": None, "input_keys": None, "reply_keys": None}

Handler = Callable[..., Any]


def _deprecated(old: str, new: str) -> None:
    warnings.warn(
        f"Session.{old}() is deprecated and will be removed in a future version; use Session.{new}() instead.",
        DeprecationWarning,
        stacklevel=3,
    )


class Session:
    """Multi-turn chat container: ``full_context`` (everything) and ``context_window`` (what is sent).

    Args:
        id: session id; a random hex id when omitted.
        auto_resize: run the analysis/resize pipeline after every history change.
        settings: a dict (becomes a child of the global settings) or a :class:`Settings` (the session
            settings become its child, so reads inherit and writes stay local).
        plugin_manager: passed through to memory plugins (Agently compatibility); unused here.
        workspace: Workspace used by the memory plugin.
        workspace_provider: called lazily to get a Workspace when none was given.

    Example:
        >>> s = Session(settings={"session": {"max_length": 200}})
        >>> _ = s.add_chat_history({"role": "user", "content": "hi"})
        >>> s.context_window
        [{'role': 'user', 'content': 'hi'}]
    """

    def __init__(
        self,
        id: str | None = None,
        *,
        auto_resize: bool = True,
        settings: Mapping[str, Any] | Settings | Any | None = None,
        plugin_manager: Any = None,
        workspace: Any = None,
        workspace_provider: Callable[[], Any] | None = None,
    ) -> None:
        self.id: str = id if id is not None else uuid4().hex
        self._auto_resize = bool(auto_resize)
        self.plugin_manager = plugin_manager
        self._memory_workspace = workspace
        self._workspace_provider = workspace_provider
        if settings is None or isinstance(settings, Mapping):
            self.settings = Settings(settings or {}, parent=global_settings, name=f"session:{self.id}")
        else:
            self.settings = Settings(parent=settings, name=f"session:{self.id}")
        self.session_settings: SettingsNamespace = self.settings.namespace("session", defaults=SESSION_DEFAULTS)
        self._analysis_handler: Handler = default_analysis_handler
        self._resize_handlers: dict[str, Handler] = {SIMPLE_CUT: simple_cut_handler}
        self._full_context: list[ChatMessage] = []
        self._context_window: list[ChatMessage] = []
        self._memo: Any = None
        self._memory_plugin: Any = None
        self._memory_mode: str | None = None

    def __repr__(self) -> str:
        return (
            f"Session(id={self.id!r}, messages={len(self._full_context)}, window={len(self._context_window)}, "
            f"memory_mode={self._memory_mode!r})"
        )

    # -- state -----------------------------------------------------------------------------------------

    @property
    def auto_resize(self) -> bool:
        return self._auto_resize

    @auto_resize.setter
    def auto_resize(self, value: bool) -> None:
        self._auto_resize = bool(value)

    @property
    def full_context(self) -> list[ChatMessage]:
        """A copy of every message, oldest first (dicts with ``role``/``content``)."""
        return [message.copy() for message in self._full_context]

    @property
    def context_window(self) -> list[ChatMessage]:
        """A copy of the messages sent with the next request."""
        return [message.copy() for message in self._context_window]

    @property
    def memo(self) -> Any:
        """A copy of the memo a resize handler maintains (``None`` until one sets it)."""
        try:
            return copy.deepcopy(self._memo)
        except Exception as e:  # noqa: BLE001 - a non-copyable user object: hand it out as is, logged
            logger.debug("memo of session %r is not deep-copyable (%s); returning it uncopied",
                         self.id, type(e).__name__)
            return self._memo

    @property
    def memory(self) -> Any:
        """The memory plugin instance, or ``None``."""
        return self._memory_plugin

    @property
    def memory_mode(self) -> str | None:
        """The mode string given to :meth:`use_memory`, or ``None``."""
        return self._memory_mode

    # -- history ---------------------------------------------------------------------------------------

    async def _after_change(self) -> Session:
        if self._auto_resize:
            await self.async_resize()
        return self

    async def async_add_chat_history(self, chat_history: Any) -> Session:
        """Append one message or a list of messages to both the full context and the window."""
        messages = to_messages(chat_history)
        self._full_context.extend(messages)
        self._context_window.extend(message.copy() for message in messages)
        return await self._after_change()

    async def async_set_chat_history(self, chat_history: Any) -> Session:
        """Replace both the full context and the window with the given message(s)."""
        messages = to_messages(chat_history)
        self._full_context = messages
        self._context_window = [message.copy() for message in messages]
        return await self._after_change()

    async def async_reset_chat_history(self) -> Session:
        """Clear the full context and the window (the memo is kept)."""
        self._full_context = []
        self._context_window = []
        return await self._after_change()

    async def async_clean_context_window(self) -> Session:
        """Clear the window only; the full context is kept."""
        self._context_window = []
        return await self._after_change()

    async def async_clean_window_context(self) -> Session:
        """Alias of :meth:`async_clean_context_window`."""
        return await self.async_clean_context_window()

    def add_chat_history(self, chat_history: Any) -> Session:
        """Sync :meth:`async_add_chat_history`."""
        return run_sync(self.async_add_chat_history(chat_history))

    def set_chat_history(self, chat_history: Any) -> Session:
        """Sync :meth:`async_set_chat_history`."""
        return run_sync(self.async_set_chat_history(chat_history))

    def reset_chat_history(self) -> Session:
        """Sync :meth:`async_reset_chat_history`."""
        return run_sync(self.async_reset_chat_history())

    def clean_context_window(self) -> Session:
        """Sync :meth:`async_clean_context_window`."""
        return run_sync(self.async_clean_context_window())

    clean_window_context = clean_context_window

    # -- resize pipeline -------------------------------------------------------------------------------

    def register_analysis_handler(self, analysis_handler: Handler | None) -> Session:
        """Set the analysis handler; ``None`` restores the default (``simple_cut`` over ``max_length``)."""
        if analysis_handler is not None and not callable(analysis_handler):
            raise ConfigurationError(f"An analysis handler must be callable, got {type(analysis_handler).__name__}.")
        self._analysis_handler = default_analysis_handler if analysis_handler is None else analysis_handler
        return self

    def register_resize_handler(self, strategy_name: str, resize_handler: Handler) -> Session:
        """Register (or replace) the resize handler for ``strategy_name``; sync or async."""
        if not isinstance(strategy_name, str) or not strategy_name.strip():
            raise ConfigurationError("strategy_name must be a non-empty string.")
        if not callable(resize_handler):
            raise ConfigurationError(f"A resize handler must be callable, got {type(resize_handler).__name__}.")
        self._resize_handlers[strategy_name] = resize_handler
        return self

    def register_execution_handlers(self, strategy_name: str, execution_handler: Handler) -> Session:
        """Deprecated alias of :meth:`register_resize_handler`."""
        _deprecated("register_execution_handlers", "register_resize_handler")
        return self.register_resize_handler(strategy_name, execution_handler)

    def _handler_args(self) -> tuple[Any, ...]:
        return (self.full_context, self.context_window, self.memo, self.session_settings)

    async def async_analyze_context(self) -> str | None:
        """Ask the analysis handler which resize strategy to run (``None``: none)."""
        return await maybe_await(self._analysis_handler, *self._handler_args())

    async def async_run_resize_strategy(self, strategy_name: str) -> None:
        """Run one resize strategy and apply its ``(full, window, memo)`` result (``None`` = keep).

        An unknown name only warns (``warnings.warn``), as in Agently.

        Raises:
            ConfigurationError: the handler did not return a 3-tuple.
        """
        handler = self._resize_handlers.get(strategy_name)
        if handler is None:
            warnings.warn(
                f"Can not find strategy '{strategy_name}' in resize handlers dictionary in Session <{self.id}>.",
                stacklevel=2,
            )
            return
        result = await maybe_await(handler, *self._handler_args())
        if not isinstance(result, (tuple, list)) or len(result) != 3:
            raise ConfigurationError(
                f"Resize handler '{strategy_name}' must return (full_context | None, context_window | None, "
                f"memo | None), got {result!r:.200}."
            )
        new_full, new_window, new_memo = result
        if new_full is not None:
            self._full_context = to_messages(new_full)
        if new_window is not None:
            self._context_window = to_messages(new_window)
        if new_memo is not None:
            self._memo = new_memo

    async def async_execute_strategy(self, strategy_name: str) -> None:
        """Deprecated alias of :meth:`async_run_resize_strategy`."""
        _deprecated("async_execute_strategy", "async_run_resize_strategy")
        await self.async_run_resize_strategy(strategy_name)

    async def async_resize(self) -> None:
        """Analyse, then run the chosen strategy if any."""
        strategy_name = await self.async_analyze_context()
        if strategy_name is not None:
            await self.async_run_resize_strategy(strategy_name)

    def analyze_context(self) -> str | None:
        """Sync :meth:`async_analyze_context`."""
        return run_sync(self.async_analyze_context())

    def run_resize_strategy(self, strategy_name: str) -> None:
        """Sync :meth:`async_run_resize_strategy`."""
        return run_sync(self.async_run_resize_strategy(strategy_name))

    def execute_strategy(self, strategy_name: str) -> None:
        """Deprecated sync alias of :meth:`async_run_resize_strategy`."""
        _deprecated("execute_strategy", "run_resize_strategy")
        return run_sync(self.async_run_resize_strategy(strategy_name))

    def resize(self) -> None:
        """Sync :meth:`async_resize`."""
        return run_sync(self.async_resize())

    # -- memory plugin ---------------------------------------------------------------------------------

    def _resolve_memory_workspace(self) -> Any:
        if self._memory_workspace is None and callable(self._workspace_provider):
            workspace = self._workspace_provider()
            if workspace is not None:
                self._memory_workspace = workspace
        return self._memory_workspace

    def bind_memory_workspace(self, workspace: Any) -> Session:
        """Use ``workspace`` for memory from now on (re-binds an attached plugin)."""
        self._memory_workspace = workspace
        if self._memory_plugin is not None and hasattr(self._memory_plugin, "bind_workspace"):
            self._memory_plugin.bind_workspace(workspace)
        return self

    def use_memory(self, *, mode: str = "VecMemory", workspace: Any = None, **options: Any) -> Session:
        """Attach the memory plugin registered as ``mode`` (replacing any earlier one).

        Args:
            mode: a name given to :func:`~agently_vecmem.session.registry.register_memory_plugin`.
            workspace: the Workspace to store memories in; defaults to the session's workspace or
                ``workspace_provider()``.
            **options: passed to the plugin's constructor (e.g. ``model=`` for VecMemory).

        Returns:
            ``self``.

        Raises:
            MemoryModeError: ``mode`` is not registered.
        """
        plugin_class = get_memory_plugin(mode)
        if workspace is not None:
            self._memory_workspace = workspace
        else:
            workspace = self._resolve_memory_workspace()
        self._memory_plugin = plugin_class(
            session=self, workspace=workspace, plugin_manager=self.plugin_manager, settings=self.settings,
            **options,
        )
        self._memory_mode = mode
        logger.debug("Session %s uses memory mode %s (workspace=%r)", self.id, mode, workspace)
        return self

    def _ready_plugin(self) -> Any:
        plugin = self._memory_plugin
        if getattr(plugin, "workspace", None) is None:
            workspace = self._resolve_memory_workspace()
            if workspace is not None and hasattr(plugin, "bind_workspace"):
                plugin.bind_workspace(workspace)
        if getattr(plugin, "requires_workspace", False) and getattr(plugin, "workspace", None) is None:
            raise MemoryModeError(
                f"Session memory mode '{self._memory_mode}' requires a Workspace. Pass workspace=... to "
                "Session.use_memory(...), call Session.bind_memory_workspace(...), or give the Session a "
                "workspace_provider."
            )
        return plugin

    async def async_prepare_memory(self, prompt: Any, settings: Any = None) -> dict[str, Any]:
        """Let the memory plugin prepare a request (it may ``prompt.set("GLOBAL_MEMORY", [...])``).

        Returns:
            The plugin's diagnostics dict, or ``{}`` without a plugin.

        Raises:
            MemoryModeError: the plugin needs a Workspace and none is available.
        """
        if self._memory_plugin is None:
            return {}
        plugin = self._ready_plugin()
        return await plugin.prepare_request(
            prompt=prompt, session=self, settings=settings if settings is not None else self.settings
        )

    async def async_after_memory_turn(
        self,
        *,
        user_content: str | None,
        assistant_content: str | None,
        result: Any = None,
        settings: Any = None,
        occurred_at: Any = None,
    ) -> dict[str, Any]:
        """Hand a finished turn to the memory plugin (extraction/storage).

        ``occurred_at`` (the turn's time, default now) is passed on only when given, so plugins without
        the keyword keep working.

        Returns:
            The plugin's diagnostics dict, or ``{}`` without a plugin.

        Raises:
            MemoryModeError: the plugin needs a Workspace and none is available.
        """
        if self._memory_plugin is None:
            return {}
        plugin = self._ready_plugin()
        return await plugin.after_turn(
            session=self,
            user_content=user_content,
            assistant_content=assistant_content,
            result=result,
            settings=settings if settings is not None else self.settings,
            **({} if occurred_at is None else {"occurred_at": occurred_at}),
        )

    # -- request helpers -------------------------------------------------------------------------------

    @staticmethod
    def apply_request_prefix(prompt: Any, activated_session: Session | None) -> None:
        """Put the window into ``prompt["chat_history"]`` and the memo under ``"CHAT SESSION MEMO"``."""
        if activated_session is None:
            return
        if "chat_history" in prompt:
            del prompt["chat_history"]
        prompt.set("chat_history", activated_session.context_window)
        memo = activated_session.memo
        if memo is not None:
            prompt.set("CHAT SESSION MEMO", memo)

    #: ``resolve_contents(prompt_data, result_data, input_keys, reply_keys, agent_prompt_data=None)``.
    resolve_contents = staticmethod(resolve_contents)
    format_session_value = staticmethod(format_value)

    @staticmethod
    async def resolve_finally_contents(
        result: Any, settings: Any, agent_prompt: Any = None
    ) -> tuple[str | None, str | None]:
        """Agently-shaped wrapper: ``result`` has ``.prompt`` and ``async_get_data()``."""
        data = await maybe_await(result.async_get_data)
        return resolve_contents(
            result.prompt,
            data,
            settings.get("session.input_keys", None),
            settings.get("session.reply_keys", None),
            agent_prompt,
        )

    # -- agent-free driver -----------------------------------------------------------------------------

    async def achat(
        self, user_text: str, *, model: Any, system: str | None = None, occurred_at: Any = None, **options: Any
    ) -> str:
        """One chat turn without an agent; see :func:`agently_vecmem.session.driver.achat`.

        ``occurred_at``: the turn's time (epoch seconds, datetime or ISO 8601 string; default now), kept on
        the recorded messages and the turn's memories.
        """
        return await driver.achat(self, user_text, model=model, system=system, occurred_at=occurred_at, **options)

    def chat(
        self, user_text: str, *, model: Any, system: str | None = None, occurred_at: Any = None, **options: Any
    ) -> str:
        """Sync :meth:`achat`."""
        return run_sync(self.achat(user_text, model=model, system=system, occurred_at=occurred_at, **options))

    # -- import / export -------------------------------------------------------------------------------

    def to_serializable_session_data(self) -> dict[str, Any]:
        """The export dict: ``id, auto_resize, full_context, context_window, memo, session_settings``.

        A message recorded with a time (``chat(..., occurred_at=...)``) carries it as ``time`` (ISO 8601,
        UTC); Agently's ChatMessage accepts the extra key, and loading restores it.
        """
        return {
            "id": self.id,
            "auto_resize": self._auto_resize,
            "full_context": [message.export() for message in self._full_context],
            "context_window": [message.export() for message in self._context_window],
            "memo": self._memo,
            "session_settings": self.session_settings.data,
        }

    def get_json_session(self) -> str:
        """JSON export (``indent=2, ensure_ascii=False``)."""
        return dump_json(self.to_serializable_session_data())

    def get_yaml_session(self) -> str:
        """YAML export (key order kept)."""
        return dump_yaml(self.to_serializable_session_data())

    to_json = get_json_session
    to_yaml = get_yaml_session

    def _load(self, data: Mapping[str, Any]) -> Session:
        state = parse_session_data(data)
        if state.id is not None:
            self.id = state.id
        if state.auto_resize is not None:
            self._auto_resize = state.auto_resize
        self._full_context = state.full_context
        self._context_window = state.context_window
        if state.has_memo:
            self._memo = state.memo
        if state.session_settings is not None:
            self.session_settings.update(state.session_settings)
        return self

    def load_json_session(
        self, path_or_content: str | Path, *, session_key_path: str | None = None, encoding: str | None = "utf-8"
    ) -> Session:
        """Load a JSON (json5) export from a file path or text; see :func:`read_session_source`."""
        data = read_session_source(path_or_content, fmt="json", session_key_path=session_key_path, encoding=encoding)
        return self._load(data)

    def load_yaml_session(
        self, path_or_content: str | Path, *, session_key_path: str | None = None, encoding: str | None = "utf-8"
    ) -> Session:
        """Load a YAML export from a file path or text; see :func:`read_session_source`."""
        data = read_session_source(path_or_content, fmt="yaml", session_key_path=session_key_path, encoding=encoding)
        return self._load(data)

    load_json = load_json_session
    load_yaml = load_yaml_session

    def load_session_data(self, data: Mapping[str, Any] | Sequence[Any]) -> Session:
        """Load an already parsed export dict."""
        if not isinstance(data, Mapping):
            raise ConfigurationError(f"Session data must be a dict, got {type(data).__name__}.")
        return self._load(data)

"""VecMemory: the SessionMemory plugin — model-owned judgment, deterministic storage and budgets.

``prepare_request`` (before each model request): plan → hybrid candidates per scope → rerank with retry
→ the documented fallbacks → budgeted packages injected as ``GLOBAL_MEMORY`` / ``SESSION_MEMORY``.
``after_turn`` (after each completed turn): extract → consolidate (exact duplicates dropped without the
model; near-duplicates judged ADD / UPDATE / SUPERSEDE / NOOP; replaced records are kept as superseded)
→ store. A turn whose extraction failed is stored raw, marked ``extracted=False``.

The stages and their typed values are in :mod:`.pipeline` (read it top to bottom); this class adapts
them to the SessionMemory protocol: settings, the model, the Workspace and the diagnostics history.
Each call gets its own :class:`~.context.CallContext` (its own model budget and scope snapshots).

The logic is synchronous (the model client and Chroma are blocking); the async protocol methods run it
in a worker thread, so there is one implementation and nothing is bound to an event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import ConfigurationError, MemoryModeError
from ..filters import Scope
from ..records import MemoryRecord, turn_time
from ..workspace.chroma import ChromaWorkspace
from ..workspace.resolve import require_chroma_workspace
from . import pipeline
from .config import VecMemorySettings, resolve_settings
from .context import CallContext
from .packaging import fallback_query, limit_text, prompt_text
from .remembering import Turn
from .retrieval import SCOPE_NAMES, RetrievalRequest

__all__ = ["VecMemory", "ModelResolver"]

logger = logging.getLogger(__name__)

#: Returns the chat model for a plugin's settings, or None for the deterministic path.
ModelResolver = Callable[[Any, VecMemorySettings], Any]


def default_model_resolver(settings: Any, resolved: VecMemorySettings) -> Any:
    """A model from ``session.memory.VecMemory.model`` ({model, base_url, api_key, timeout, max_retries}),
    or None."""
    if resolved.model is None:
        return None
    from ..llm.factory import make_chat_model

    return make_chat_model(resolved.model, from_env=True)


class VecMemory:
    """Vector long-term memory for a Session (mode name ``VecMemory``).

    Args:
        session: the Session this plugin serves.
        workspace: a :class:`~agently_vecmem.workspace.ChromaWorkspace` (or an Agently Workspace on the
            ``chroma`` provider); may be bound later with :meth:`bind_workspace`.
        plugin_manager: Agently's plugin manager (unused outside Agently).
        settings: the Session's settings; ``session.memory.VecMemory.*`` is read on every call.
        model: a :class:`~agently_vecmem.llm.ChatModel`; default: resolved from settings. None → the
            deterministic path (no plan, no rerank, raw-turn memories).
        model_resolver: how to find the model when none is given (integrations override it).

    Example:
        >>> session = Session(id="s1").use_memory(mode="VecMemory", workspace=ws)   # doctest: +SKIP
    """

    name = "VecMemory"
    DEFAULT_SETTINGS: dict[str, Any] = {}  # defaults live in VecMemorySettings (see resolve_settings)
    requires_workspace = True

    def __init__(
        self,
        *,
        session: Any = None,
        workspace: Any = None,
        plugin_manager: Any = None,
        settings: Any = None,
        model: Any = None,
        model_resolver: ModelResolver | None = None,
        **_: Any,
    ) -> None:
        self.session = session
        self.plugin_manager = plugin_manager
        self.settings = settings if settings is not None else getattr(session, "settings", None)
        self._model = model
        self._model_resolver = model_resolver or default_model_resolver
        self.workspace: Any = None
        self._store: ChromaWorkspace | None = None
        if workspace is not None:
            self.bind_workspace(workspace)
        self.diagnostics: deque[dict[str, Any]] = deque(maxlen=self.config().diagnostics.history)

    # ------------------------------------------------------------------ Agently plugin protocol
    @staticmethod
    def _on_register() -> None:
        return None

    @staticmethod
    def _on_unregister() -> None:
        return None

    def bind_workspace(self, workspace: Any) -> None:
        """Attach the storage (validated at once, so a wrong object fails here, not mid-request)."""
        self._store = require_chroma_workspace(workspace)
        self.workspace = workspace

    def bind_memory_store(self, store: Any) -> None:
        """Agently 4.1.4.2+ name of :meth:`bind_workspace`."""
        self.bind_workspace(store)

    def create_context_source(self, **_: Any) -> None:
        """Agently 4.1.4.2+ hook; VecMemory injects through prepare_request instead."""
        return None

    async def prepare_request(self, *, prompt: Any, session: Any = None, settings: Any = None) -> dict[str, Any]:
        """Retrieve memories for the coming request and inject them into ``prompt``."""
        return await asyncio.to_thread(self.prepare_request_sync, prompt=prompt, session=session)

    async def after_turn(
        self,
        *,
        session: Any = None,
        user_content: str | None = None,
        assistant_content: str | None = None,
        result: Any = None,
        settings: Any = None,
        occurred_at: Any = None,
    ) -> dict[str, Any]:
        """Extract, consolidate and store memories of a completed turn (``occurred_at``: see after_turn_sync)."""
        return await asyncio.to_thread(
            self.after_turn_sync, session=session, user_content=user_content, assistant_content=assistant_content,
            occurred_at=turn_time(occurred_at),
        )

    # ------------------------------------------------------------------ helpers
    def config(self) -> VecMemorySettings:
        """The validated settings in force now."""
        return resolve_settings(self.settings, name=self.name)

    def model(self, config: VecMemorySettings | None = None) -> Any:
        """The chat model, or None for the deterministic path."""
        if self._model is None:
            self._model = self._model_resolver(self.settings, config or self.config())
        return self._model

    def require_store(self) -> ChromaWorkspace:
        """The bound store, or a :class:`MemoryModeError` saying how to bind one."""
        if self._store is None:
            raise MemoryModeError(
                "Session memory mode 'VecMemory' requires a Workspace. Pass workspace=... to "
                "Session.use_memory(...) or activate the Session from an Agent with workspace support."
            )
        return self._store

    def _record(self, phase: str, diagnostics: dict[str, Any], config: VecMemorySettings) -> dict[str, Any]:
        """Keep the diagnostics of a call (bounded by ``diagnostics.history``) and return them."""
        if self.diagnostics.maxlen != config.diagnostics.history:
            self.diagnostics = deque(self.diagnostics, maxlen=config.diagnostics.history)
        if self._store is not None:  # which user the call served (a multi-user store serves many)
            diagnostics = {**diagnostics, "user_id": self._store.user_id, "cache": self._store.cache_stats()}
        self.diagnostics.append({"phase": phase, **diagnostics})
        return diagnostics

    def _call(self, config: VecMemorySettings) -> CallContext:
        """A fresh context (budget, timer, snapshots) for one call."""
        return CallContext(config, self.require_store(), self.model(config), plugin_name=self.name)

    # ------------------------------------------------------------------ prepare_request
    def prepare_request_sync(self, *, prompt: Any, session: Any = None) -> dict[str, Any]:
        """Synchronous :meth:`prepare_request`."""
        session = session or self.session
        config = self.config()
        if not config.retrieve.enabled:
            return {"enabled": False, "reason": "retrieve_disabled"}
        call = self._call(config)
        max_chars = config.retrieve_plan.fallback_query_chars
        request = RetrievalRequest(
            session_id=str(session.id), prompt_text=limit_text(prompt_text(prompt), max_chars),
            query=fallback_query(prompt, max_chars),
        )
        with call.consistent():
            retrieved = pipeline.retrieve(call, request)
        for name in SCOPE_NAMES:
            if name in retrieved.packages:
                prompt.set(name, list(retrieved.packages[name].items))
        return self._record("prepare_request", pipeline.retrieval_diagnostics(call, retrieved), config)

    # ------------------------------------------------------------------ after_turn
    def after_turn_sync(
        self, *, session: Any = None, user_content: str | None = None, assistant_content: str | None = None,
        occurred_at: Any = None,
    ) -> dict[str, Any]:
        """Synchronous :meth:`after_turn`. ``occurred_at``: when the turn happened (epoch seconds, datetime
        or ISO 8601 string; default now), kept on every record of the turn (RecordValidationError if invalid)."""
        when = turn_time(occurred_at)
        session = session or self.session
        config = self.config()
        if not config.extract.enabled:
            return {"enabled": False, "reason": "extract_disabled"}
        if not user_content and not assistant_content:
            return {"enabled": True, "stored": 0, "reason": "empty_turn"}
        call = self._call(config)
        turn = Turn(
            session_id=str(session.id), user_content=user_content, assistant_content=assistant_content,
            turn_index=len(getattr(session, "full_context", []) or []), occurred_at=when,
        )
        with call.consistent():
            remembered = pipeline.remember(call, turn)
        return self._record("after_turn", pipeline.turn_diagnostics(call, remembered), config)

    def after_turns_sync(
        self, turns: Sequence[Mapping[str, Any]], *, also: Sequence[tuple[MemoryRecord, Any]] = (),
    ) -> list[dict[str, Any]]:
        """Many completed turns at once, without a model (the importer's path): each turn is kept as a raw
        turn exactly as :meth:`after_turn_sync` would keep it called turn after turn (same records, exact
        duplicates of the store or of an earlier turn dropped), but the turns are embedded in one batch and
        written in one put, together with ``also``: all of it, or nothing when the put fails.

        Args:
            turns: per turn, the keyword arguments of :meth:`after_turn_sync` (``session``, ``user_content``,
                ``assistant_content``, ``occurred_at``).
            also: other records to write in the same put, each with its vector (e.g. import progress).

        Returns:
            Each turn's diagnostics, as :meth:`after_turn_sync` returns them (``timings_ms`` are the batch's).

        Raises:
            ConfigurationError: a model is configured (extraction goes turn by turn: use after_turn_sync).
            RecordValidationError: a turn's ``occurred_at`` is invalid (nothing was written).
        """
        config = self.config()
        if self.model(config) is not None:
            raise ConfigurationError("after_turns_sync keeps raw turns without a model; with one, call "
                                     "after_turn_sync for each turn")
        out: list[dict[str, Any]] = []
        batch: list[tuple[int, Turn]] = []
        for t in turns:
            when = turn_time(t.get("occurred_at"))
            session = t.get("session") or self.session
            user_content, assistant_content = t.get("user_content"), t.get("assistant_content")
            if not config.extract.enabled:
                out.append({"enabled": False, "reason": "extract_disabled"})
            elif not user_content and not assistant_content:
                out.append({"enabled": True, "stored": 0, "reason": "empty_turn"})
            else:
                batch.append((len(out), Turn(
                    session_id=str(session.id), user_content=user_content, assistant_content=assistant_content,
                    turn_index=len(getattr(session, "full_context", []) or []), occurred_at=when,
                )))
                out.append({})
        call = self._call(config)
        with call.consistent():
            remembered = pipeline.remember_many(call, [turn for _, turn in batch], also=also)
        for (i, _), done in zip(batch, remembered, strict=True):
            out[i] = self._record("after_turn", pipeline.turn_diagnostics(call, done), config)
        return out

    # ------------------------------------------------------------------ maintenance
    def reextract_pending(self, *, session_id: str | None = None, limit: int = 20) -> dict[str, Any]:
        """Run extraction again over raw turns kept after failed extractions.

        A raw turn whose re-extraction succeeds is marked superseded (kept for history, no longer
        retrieved): ``superseded_by`` names the first new memory, or is None when the turn held nothing
        new (every memory was a duplicate or none was extracted). A turn whose extraction fails again
        stays pending. Model failures never raise; the whole run shares one model budget.

        Args:
            session_id: only this session's raw turns (default: every session).
            limit: at most this many raw turns, oldest first.

        Returns:
            ``{"pending": n, "done": k, "results": [per-turn diagnostics], timings_ms, model_calls}``.
        """
        config = self.config()
        call = self._call(config)
        scope = Scope.session_memory(session_id) if session_id else Scope(None, None, "memory")
        raws = call.store.scan(scope=scope, where={"extracted": False}, limit=limit)
        results = []
        for raw in raws:  # one freshness check per turn, as after_turn has (each turn sees the one before)
            with call.consistent():
                results.append(pipeline.reextract(call, raw))
        return self._record("reextract", pipeline.reextract_diagnostics(call, results), config)

    async def areextract_pending(self, *, session_id: str | None = None, limit: int = 20) -> dict[str, Any]:
        """Async :meth:`reextract_pending` (runs in a worker thread)."""
        return await asyncio.to_thread(self.reextract_pending, session_id=session_id, limit=limit)

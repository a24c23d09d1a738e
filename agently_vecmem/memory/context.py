"""What one plugin call carries through its stages: settings, store, model budget, timer, snapshots.

A :class:`CallContext` is built for one ``prepare_request`` / ``after_turn`` / re-extract call (and for
one LoCoMo question in :mod:`agently_vecmem.eval.model_mode`). It is the only mutable thing a stage sees:
the timer and the budget count, and :meth:`CallContext.view` reads each scope's snapshot once per call, so
candidates, related memories, dedup keys and near-duplicates of one turn all see the same records
(issue 14: a turn used to read up to four snapshots).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..filters import Scope
from ..llm.base import ChatModel
from ..search.cjk import has_cjk
from ..search.multilingual import stored_space
from ..search.params import DEFAULT_PARAMS, RetrievalParams
from ..workspace.base import MemoryStore
from .config import VecMemorySettings
from .diagnostics import Timer
from .model_budget import Asked, ModelBudget
from .prompts import PhaseRequest, apply_execution, render_messages

__all__ = ["CallContext"]

R = TypeVar("R")


@dataclass
class CallContext:
    """One plugin call (see module docstring).

    Args:
        config: the settings in force for this call.
        store: the store (a :class:`~agently_vecmem.workspace.ChromaWorkspace` in practice).
        model: the chat model, or None (the deterministic path).
        plugin_name: written into the provenance of new records.
        params: hybrid retrieval parameters of the candidate stage.
    """

    config: VecMemorySettings
    store: MemoryStore
    model: ChatModel | None
    plugin_name: str = "VecMemory"
    params: RetrievalParams = DEFAULT_PARAMS
    timer: Timer = field(default_factory=Timer)
    budget: ModelBudget = field(init=False)
    _views: dict[Any, Any] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.budget = ModelBudget(self.model, self.timer)

    def view(self, scope: Scope) -> Any:
        """The scope's snapshot, read once per call (BM25 and neighbour links are cached on it)."""
        view = self._views.get(scope.key)
        if view is None:
            view = self._views[scope.key] = self.store.view(scope)
        return view

    def read_at_once(self, scopes: Sequence[Scope]) -> None:
        """Read the scopes this call has not read yet in one go: a store with ``views`` (``ChromaWorkspace``)
        loads those its cache does not hold side by side (a fresh worker's GLOBAL snapshot beside its first
        Chroma read); :meth:`view` then returns them."""
        missing = list({scope.key: scope for scope in scopes if scope.key not in self._views}.values())
        views = getattr(self.store, "views", None)
        if len(missing) < 2 or views is None:
            return
        read = views(*missing)
        for scope in missing:
            self._views[scope.key] = read[scope.key]

    @contextmanager
    def consistent(self) -> Iterator[CallContext]:
        """Run the call's reads on one freshness check of the store: on a Chroma server one change-head read
        per call instead of one per scope (:meth:`ChromaWorkspace.consistent`; embedded stores need none)."""
        with self.store.consistent():
            yield self

    def multilingual_signal(self, query: str) -> dict[str, Any] | None:
        """For a CJK query: which multilingual vector space the scopes read in this call answered it from
        (:mod:`agently_vecmem.search.spaces`), or, when some scope has none, how to add one. None otherwise."""
        if not has_cjk(query):
            return None
        used = {stored_space(view) for view in self._views.values() if len(view)}
        if None not in used:
            return {"space": ",".join(sorted(str(u) for u in used)) or None}
        return {"space": None, "hint": "no multilingual vector space over every record of the scope: the dense "
                "signal of CJK queries is weaker. Add one with `agently-vecmem reindex STORE --add-space e5` "
                "(the 'multilingual' extra)"}

    def forget_views(self) -> None:
        """Drop the snapshots after this call wrote (re-extraction stores turn by turn)."""
        self._views.clear()

    def ask(self, request: PhaseRequest, reply_model: type[R], *, attempts: int) -> Asked[R]:
        """One phase request within the call's budget, with the user's ``<phase>.execution`` applied."""
        request = apply_execution(request, self.config.execution(request.phase))
        return self.budget.ask(
            request.phase, render_messages(request), reply_model, attempts=attempts, max_tokens=request.max_tokens
        )

    def accounting(self) -> dict[str, Any]:
        """``timings_ms`` and ``model_calls`` of this call."""
        return self.budget.accounting()

"""The Ask view: what ``prepare_request`` would retrieve and inject for a question, as a trace.

Builds a :class:`~agently_vecmem.memory.plugin.VecMemory` on the browser's store, runs
``prepare_request_sync`` on a fresh :class:`~agently_vecmem.session.Prompt`, and returns its diagnostics
together with what they summarise: the hybrid candidates of each searched scope (recomputed the way the
candidate stage computes them), the injected items, and with a model the replies of the plan/rerank
requests and the fallbacks taken. Nothing is written: retrieval only reads.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ..filters import Scope
from ..memory.plugin import VecMemory
from ..memory.retrieval import SCOPE_NAMES
from ..search.candidates import retrieve_candidates
from ..session import Prompt, Session
from ..workspace.chroma import ChromaWorkspace
from .store import record_json

__all__ = ["RecordingModel", "ask_trace"]

logger = logging.getLogger(__name__)


class RecordingModel:
    """A chat model wrapper that keeps each structured reply (phase → validated reply) for the trace."""

    def __init__(self, model: Any) -> None:
        self._model = model
        self._lock = threading.Lock()
        self.replies: list[dict[str, Any]] = []

    def structured(self, messages: Any, reply_model: Any, *, phase: str, **kwargs: Any) -> Any:
        try:
            reply = self._model.structured(messages, reply_model, phase=phase, **kwargs)
        except Exception as e:
            with self._lock:
                self.replies.append({"phase": phase, "error": f"{type(e).__name__}: {e}"[:500]})
            raise
        with self._lock:
            self.replies.append({"phase": phase, "reply": reply.model_dump(mode="json")})
        return reply

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


def _fallbacks(diag: dict[str, Any], has_model: bool) -> list[dict[str, Any]]:
    """The degraded or deterministic paths the diagnostics record, one entry each."""
    out: list[dict[str, Any]] = []
    plan = diag.get("plan", {}).get("diagnostics", {})
    if plan.get("reason") in ("deterministic_fallback", "retrieve_plan_failed"):
        out.append({"stage": "plan", "reason": plan.get("reason"), "detail": plan.get("detail") or plan.get("error"),
                    "error_type": plan.get("error_type")})
    for name, pkg in diag.get("packages", {}).items():
        rerank = pkg.get("rerank", {})
        if rerank.get("reason") == "rerank_failed" or (has_model and rerank.get("enabled") is False):
            out.append({"stage": f"rerank {name}", "reason": rerank.get("reason"), "detail": rerank.get("error"),
                        "error_type": rerank.get("error_type")})
        if "memory_rerank_skipped" in pkg:
            out.append({"stage": f"rerank {name}", "reason": pkg["memory_rerank_skipped"].get("reason"),
                        "detail": f"{pkg['memory_rerank_skipped'].get('candidate_count')} candidates", "error_type": None})
        if "memory_rerank_empty_fallback" in pkg:
            out.append({"stage": f"rerank {name}", "reason": pkg["memory_rerank_empty_fallback"]["reason"],
                        "detail": "kept the deterministic package", "error_type": None})
        for omitted in pkg.get("omitted", []):
            out.append({"stage": f"package {name}", "reason": f"omitted: {omitted.get('reason')}",
                        "detail": f"{omitted.get('count')} memories", "error_type": None})
    return out


def ask_trace(ws: ChromaWorkspace, question: str, session_id: str, *, model: Any = None,
              settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """The retrieval trace of ``prepare_request`` for ``question`` in session ``session_id``.

    Args:
        ws: the store.
        question: the user's newest input.
        session_id: whose SESSION_MEMORY is searched.
        model: a chat model (plan, rerank), or None for the deterministic path.
        settings: ``session.memory.VecMemory`` settings (defaults when None).

    Returns:
        ``{question, session_id, diagnostics, plan, scopes: {name: {candidates, injected, used_chars,
        char_budget, rerank}}, model_replies, fallbacks}``.
    """
    recorder = RecordingModel(model) if model is not None else None
    plugin = VecMemory(workspace=ws, model=recorder,
                       settings={"session": {"memory": {"VecMemory": dict(settings or {})}}},
                       model_resolver=lambda *_: None)
    prompt = Prompt()
    prompt.set("input", question)
    diag = plugin.prepare_request_sync(prompt=prompt, session=Session(id=session_id))
    config = plugin.config()
    plan = diag.get("plan", {})
    query = plan.get("query") or question
    scopes: dict[str, Any] = {}
    searched = list(diag.get("packages", {})) or [
        n for n in SCOPE_NAMES if plan.get("include_global" if n == "GLOBAL_MEMORY" else "include_session")]
    qvec = ws.embed_query(query or " ")
    for name in SCOPE_NAMES:
        pkg = diag.get("packages", {}).get(name)
        if name not in searched:
            continue
        scope = Scope.global_memory() if name == "GLOBAL_MEMORY" else Scope.session_memory(session_id)
        view = ws.view(scope)
        found = retrieve_candidates(view, query, qvec, k=config.retrieve.max_candidates,
                                    tags=list(plan.get("tags", [])),
                                    method=config.retrieve.search_method) if len(view) else []  # type: ignore[arg-type]
        injected = prompt.get(name) or []
        injected_ids = [item["source_ref"]["id"] for item in injected]
        scopes[name] = {
            "scope_size": len(view),
            "candidates": [{"rank": c.rank, "score": round(c.score, 4), "dense": round(c.dense, 4),
                            "lexical": round(c.lexical, 4), "fused": round(c.components.get("fused", c.score), 4),
                            "injected": c.record.id in injected_ids, "record": record_json(c.record)}
                           for c in found],
            "injected": injected,
            "used_chars": (pkg or {}).get("used_chars", 0),
            "char_budget": (pkg or {}).get("char_budget", 0),
            "rerank": (pkg or {}).get("rerank", {}),
        }
    return {
        "question": question,
        "session_id": session_id,
        "model": getattr(model, "model_name", None) if model is not None else None,
        "diagnostics": diag,
        "plan": plan,
        "scopes": scopes,
        "model_replies": recorder.replies if recorder is not None else [],
        "fallbacks": _fallbacks(diag, model is not None),
    }

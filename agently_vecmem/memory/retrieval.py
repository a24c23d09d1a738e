"""The retrieval stages: plan → candidates → judgment → fallbacks → packages, as typed values.

Each stage takes and returns frozen values; the only I/O goes through the :class:`CallContext` (model
requests within the call's budget, the call's scope snapshots). The decisions themselves are the pure
functions of :mod:`.retrieve` (previews, applying rerank decisions, budgeted packaging). Diagnostics are
built from the final values by their ``diagnostics()`` methods, with AgentlyMemory 4.1.4.1's names.

The stages need no Session: :mod:`agently_vecmem.eval.model_mode` runs :func:`make_plan`,
:func:`find_candidates`, :func:`judge` and :func:`package_scopes` per LoCoMo question.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ..errors import ModelError
from ..filters import Scope
from ..records import MAX_TAGS
from ..search.candidates import retrieve_candidates
from .context import CallContext
from .diagnostics import ErrorInfo
from .packaging import Scored, apply_decisions, package, preview
from .pending import merge_tags
from .prompts import INSTRUCTS, PhaseRequest, default_max_tokens
from .replies import Decision, FusedRetrieveReply, PlanReply, RerankReply, output_shape

__all__ = [
    "SCOPE_NAMES",
    "RetrievalRequest",
    "PlanStatus",
    "Plan",
    "ScopeCandidates",
    "Judgment",
    "RerankStatus",
    "ScopePackage",
    "make_plan",
    "find_candidates",
    "judge",
    "package_scopes",
]

SCOPE_NAMES = ("GLOBAL_MEMORY", "SESSION_MEMORY")


@dataclass(frozen=True)
class RetrievalRequest:
    """What retrieval starts from: the session, the rendered prompt and the deterministic query."""

    session_id: str
    prompt_text: str
    query: str

    def scopes(self) -> dict[str, Scope]:
        return {"GLOBAL_MEMORY": Scope.global_memory(), "SESSION_MEMORY": Scope.session_memory(self.session_id)}


@dataclass(frozen=True)
class PlanStatus:
    """How the plan came about. ``kind``: ``deterministic`` (no model / plan disabled, ``detail`` says
    which), ``fused_pending`` (fused mode: planned together with the rerank), ``fused_skipped`` (fused, but
    no candidates to judge), ``planned`` (a model plan, ``mode`` separate or fused) or ``failed``."""

    kind: Literal["deterministic", "fused_pending", "fused_skipped", "planned", "failed"]
    detail: str = ""
    mode: str = ""
    attempts: int = 0
    error: ErrorInfo | None = None

    @property
    def degraded(self) -> bool:
        return self.kind in ("deterministic", "failed")

    def diagnostics(self) -> dict[str, Any]:
        if self.kind == "deterministic":
            return {"degraded": True, "reason": "deterministic_fallback", "detail": self.detail}
        if self.kind == "fused_pending":
            return {"mode": "fused", "reason": "planned_with_rerank"}
        if self.kind == "fused_skipped":
            return {"mode": "fused", "skipped": True, "reason": "no_candidates_to_judge"}
        if self.kind == "planned":
            return {"mode": self.mode, "degraded": False, "attempts": self.attempts}
        assert self.error is not None
        return {"degraded": True, "reason": "retrieve_plan_failed", **self.error.as_dict()}


@dataclass(frozen=True)
class Plan:
    """The retrieval plan: query, tags and which scopes to search."""

    query: str
    tags: tuple[str, ...]
    include_global: bool
    include_session: bool
    status: PlanStatus

    def includes(self, name: str) -> bool:
        return self.include_global if name == "GLOBAL_MEMORY" else self.include_session

    def with_reply(self, reply: PlanReply, *, mode: str, attempts: int, max_query_chars: int) -> Plan:
        """The model's plan (an empty query keeps the deterministic one; tags are merged, at most 32)."""
        return Plan(
            query=reply.query.strip()[:max_query_chars] or self.query,
            tags=tuple(merge_tags(self.tags, reply.tags)[:MAX_TAGS]),
            include_global=reply.include_global,
            include_session=reply.include_session,
            status=PlanStatus("planned", mode=mode, attempts=attempts),
        )

    def diagnostics(self) -> dict[str, Any]:
        return {
            "query": self.query, "tags": list(self.tags), "include_global": self.include_global,
            "include_session": self.include_session, "diagnostics": self.status.diagnostics(),
        }


@dataclass(frozen=True)
class ScopeCandidates:
    """Hybrid candidates of one included scope, best first."""

    name: str
    found: tuple[Scored, ...]


@dataclass(frozen=True)
class Judgment:
    """The model's judgment of the candidates (rerank, or plan-and-rerank in fused mode).

    Attributes:
        plan: the plan after judgment (fused mode replaces it with the model's plan).
        skipped: scopes not judged, with why (``rerank_disabled``, ``no_model``, ``below_min``).
        windows: the judged candidates per judged scope (the first ``budget.rerank_candidates``).
        attempts: requests the judgment took (failed: all requests of the phase asked in this call).
        decisions: the model's decisions, or None when the judgment failed.
        error: why it failed.
    """

    plan: Plan
    skipped: Mapping[str, str] = field(default_factory=dict)
    windows: Mapping[str, tuple[Scored, ...]] = field(default_factory=dict)
    attempts: int = 0
    decisions: tuple[Decision, ...] | None = None
    error: ErrorInfo | None = None


@dataclass(frozen=True)
class RerankStatus:
    """What happened to one scope's rerank (the ``rerank`` diagnostic)."""

    reason: str = "deterministic"  # deterministic | rerank_disabled | no_model | judged | rerank_failed
    candidate_count: int = 0
    attempts: int = 0
    dropped: int = 0
    error: ErrorInfo | None = None

    @property
    def degraded(self) -> bool:
        return self.reason == "rerank_failed"

    def diagnostics(self) -> dict[str, Any]:
        if self.reason in ("deterministic", "rerank_disabled", "no_model"):
            return {"enabled": False, "reason": self.reason}
        out: dict[str, Any] = {"enabled": True, "candidate_count": self.candidate_count, "attempts": self.attempts}
        if self.reason == "rerank_failed":
            assert self.error is not None
            return {**out, "degraded": True, "reason": "rerank_failed", "dropped": 0, **self.error.as_dict()}
        return {**out, "degraded": False, "dropped": self.dropped}


@dataclass(frozen=True)
class ScopePackage:
    """The memories injected for one scope and how they were chosen.

    ``stats`` is :func:`.retrieve.package`'s selection summary; ``skipped`` the rerank-skipped
    diagnostic (too few candidates); ``empty_fallback`` the judged package that was replaced by the
    deterministic one because the model dropped every candidate.
    """

    name: str
    items: tuple[dict[str, Any], ...]
    stats: Mapping[str, Any]
    method: str
    query: str
    rerank: RerankStatus
    skipped: Mapping[str, Any] | None = None
    empty_fallback: ScopePackage | None = None

    def diagnostics(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.stats, "method": self.method, "query": self.query,
                               "rerank": self.rerank.diagnostics()}
        if self.rerank.dropped:
            out["omitted"] = [*out["omitted"], {"reason": "rerank_drop", "count": self.rerank.dropped}]
        if self.skipped is not None:
            out["memory_rerank_skipped"] = dict(self.skipped)
        if self.empty_fallback is not None:
            out["memory_rerank_empty_fallback"] = {
                "enabled": True, "reason": "rerank_dropped_all_memory_candidates",
                "original": self.empty_fallback.diagnostics(),
            }
        return out


# ---------------------------------------------------------------------------------------------- stages
def make_plan(call: CallContext, request: RetrievalRequest) -> Plan:
    """The retrieval plan: the model's (separate mode), the deterministic one, or pending (fused mode)."""
    cfg = call.config.retrieve_plan
    if call.model is None or not cfg.enabled:
        status = PlanStatus("deterministic", detail="no_model" if call.model is None else "plan_disabled")
    else:
        status = PlanStatus("fused_pending" if cfg.mode == "fused" else "planned", mode=cfg.mode)
    plan = Plan(request.query, tuple(merge_tags(call.config.retrieve.tags)), True, True, status)
    if status.kind != "planned":
        return plan
    asked = call.ask(
        PhaseRequest(
            "retrieve_plan", instruct=INSTRUCTS["retrieve_plan"], output=output_shape(PlanReply),
            input={"session_id": request.session_id, "prompt": request.prompt_text, "configured_tags": list(plan.tags)},
            max_tokens=default_max_tokens("retrieve_plan", 0),
        ),
        PlanReply, attempts=2,
    )
    if asked.reply is None:
        return replace(plan, status=PlanStatus("failed", error=asked.error))
    return plan.with_reply(asked.reply, mode="separate", attempts=asked.attempts,
                           max_query_chars=cfg.fallback_query_chars)


def find_candidates(call: CallContext, plan: Plan, request: RetrievalRequest) -> dict[str, ScopeCandidates]:
    """Hybrid candidates per included scope (the hard scope filter is the Scope of the snapshot)."""
    included = [name for name in SCOPE_NAMES if plan.includes(name)]
    if not included:
        return {}
    with call.timer.stage("embed_query"):
        qvec = call.store.embed_query(plan.query or " ")
    r = call.config.retrieve
    out: dict[str, ScopeCandidates] = {}
    scopes = request.scopes()
    with call.timer.stage("search"):
        call.read_at_once([scopes[name] for name in included])
        for name in included:
            view = call.view(scopes[name])
            if len(view) == 0:
                out[name] = ScopeCandidates(name, ())
                continue
            found = retrieve_candidates(
                view, plan.query, qvec, k=r.max_candidates, params=call.params, tags=list(plan.tags),
                method=r.search_method,  # type: ignore[arg-type]
            )
            out[name] = ScopeCandidates(name, tuple(Scored(c.record, c.score) for c in found))
    return out


def judge(
    call: CallContext, plan: Plan, candidates: Mapping[str, ScopeCandidates], request: RetrievalRequest
) -> Judgment:
    """Ask the model which candidates are useful (one request for all judged scopes, with retry)."""
    r = call.config.retrieve
    min_candidates = max(1, r.rerank_min_candidates)
    skipped: dict[str, str] = {}
    for name, cands in candidates.items():
        if not r.rerank:
            skipped[name] = "rerank_disabled"
        elif call.model is None:
            skipped[name] = "no_model"
        elif len(cands.found) < min_candidates:
            skipped[name] = "below_min"
    judged = [name for name in candidates if name not in skipped]
    fused = plan.status.kind == "fused_pending"
    if not judged:
        return Judgment(replace(plan, status=PlanStatus("fused_skipped")) if fused else plan, skipped)
    windows = {name: candidates[name].found[: r.budget.rerank_candidates] for name in judged}
    previews = [preview(c.record) for name in judged for c in windows[name]]
    if fused:
        request_ = PhaseRequest(
            "retrieve_plan", instruct=INSTRUCTS["fused"], output=output_shape(FusedRetrieveReply),
            input={"session_id": request.session_id, "prompt": request.prompt_text,
                   "configured_tags": list(plan.tags), "candidates": previews},
            max_tokens=default_max_tokens("retrieve_plan", len(previews)),
        )
        reply_model: type[Any] = FusedRetrieveReply
    else:
        request_ = PhaseRequest(
            "rerank", instruct=INSTRUCTS["rerank"], output=output_shape(RerankReply),
            input={"query": plan.query, "candidates": previews},
            max_tokens=default_max_tokens("rerank", len(previews)),
        )
        reply_model = RerankReply
    asked = call.ask(request_, reply_model, attempts=r.max_rerank_retries + 1)
    base = Judgment(plan, skipped, windows, asked.attempts)
    if asked.reply is None:
        failed_plan = replace(plan, status=PlanStatus("failed", error=asked.error)) if fused else plan
        return replace(base, plan=failed_plan, attempts=call.budget.calls(request_.phase), error=asked.error)
    if fused:
        plan = plan.with_reply(asked.reply, mode="fused", attempts=asked.attempts,
                               max_query_chars=call.config.retrieve_plan.fallback_query_chars)
        if not asked.reply.decisions:
            error = ErrorInfo.of(ModelError("the model returned an empty decision set", phase=request_.phase),
                                 failure="invalid_reply")
            return replace(base, plan=plan, attempts=call.budget.calls(request_.phase), error=error)
    return replace(base, plan=plan, decisions=tuple(asked.reply.decisions))


def package_scopes(
    call: CallContext, candidates: Mapping[str, ScopeCandidates], judgment: Judgment, *, query: str
) -> dict[str, ScopePackage]:
    """Budgeted packages per scope after the documented fallbacks.

    ``query`` is the plan's query before judgment (what the deterministic packages report). A scope the
    model dropped completely keeps its deterministic package when ``keep_candidates_on_empty_rerank``;
    a failed judgment keeps every deterministic package; after a successful judgment, a scope the (fused)
    plan excluded is removed.
    """
    r = call.config.retrieve
    method = r.search_method
    min_candidates = max(1, r.rerank_min_candidates)
    packages: dict[str, ScopePackage] = {}
    for name, cands in candidates.items():
        items, stats = package(list(cands.found), r)
        reason = judgment.skipped.get(name, "deterministic")
        skipped = None
        if reason == "below_min":
            reason = "deterministic"
            skipped = {"enabled": True, "reason": "candidate_count_below_min",
                       "candidate_count": len(cands.found), "rerank_min_candidates": min_candidates}
        packages[name] = ScopePackage(name, tuple(items), stats, method, query, RerankStatus(reason), skipped)
    for name, window in judgment.windows.items():
        n = len(window)
        if judgment.decisions is None:
            status = RerankStatus("rerank_failed", n, judgment.attempts, error=judgment.error)
            packages[name] = replace(packages[name], rerank=status)
            continue
        kept, dropped = apply_decisions(window, judgment.decisions)
        items, stats = package(kept, r, candidate_count=n)
        judged = ScopePackage(name, tuple(items), stats, method, judgment.plan.query,
                              RerankStatus("judged", n, judgment.attempts, dropped))
        if not items and n > 0 and dropped >= n and r.keep_candidates_on_empty_rerank:
            packages[name] = replace(packages[name], empty_fallback=judged)
        else:
            packages[name] = judged
    if judgment.decisions is None:
        return packages
    return {name: pkg for name, pkg in packages.items() if judgment.plan.includes(name)}

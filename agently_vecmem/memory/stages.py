"""The I/O side of one plugin call: model requests, embeddings and Workspace reads/writes per stage.

:class:`Phases` is built for one ``prepare_request`` or ``after_turn`` call; it owns the call's timer
and model-call accounting and hands every decision to the pure functions in :mod:`.retrieve` and
:mod:`.consolidate`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from pydantic import ValidationError

from ..errors import ModelError, StructuredOutputError
from ..filters import Scope
from ..records import MemoryRecord
from .candidates import DEFAULT_PARAMS, RetrievalParams, retrieve_candidates
from .consolidate import (
    Pending,
    dedup_key,
    exact_duplicates,
    merge_tags,
    normalize_memory,
    raw_turn_record,
    supersede,
)
from .prompts import PhaseRequest, apply_execution, render_messages
from .replies import (
    CONSOLIDATE_OUTPUT,
    EXTRACT_OUTPUT,
    FUSED_OUTPUT,
    PLAN_OUTPUT,
    RERANK_OUTPUT,
    ConsolidateReply,
    ExtractReply,
    FusedRetrieveReply,
    PlanReply,
    RerankReply,
)
from .retrieve import Scored, apply_decisions, package, preview
from .settings import VecMemorySettings

__all__ = ["Phases", "Timer", "INSTRUCTS"]

INSTRUCTS = {
    "retrieve_plan": (
        "Generate a compact retrieval query and optional tags for Session memory. Decide whether "
        "GLOBAL_MEMORY and SESSION_MEMORY are useful for this request."
    ),
    "rerank": (
        "Judge which retrieved memory candidates are useful for the query. Drop irrelevant candidates and "
        "keep useful candidates with relevance scores."
    ),
    "extract": (
        "Extract durable memories from this completed turn. Keep only facts that will likely help future "
        "requests. Compress each memory into the configured body schema. Use GLOBAL_MEMORY for durable "
        "facts about the user or project that other sessions need and SESSION_MEMORY for facts only this "
        "conversation needs. When a memory refines or contradicts one of related_memories, set action "
        "UPDATE or SUPERSEDE and its id as target_id; when one of them already states it, set NOOP."
    ),
    "consolidate": (
        "Each new memory is similar to existing memories. For every new memory decide: ADD (a different "
        "fact, keep both), UPDATE (it refines an existing memory; you may give a merged summary and body), "
        "SUPERSEDE (it contradicts an existing memory and replaces it) or NOOP (an existing memory already "
        "says it). Give target_id for UPDATE, SUPERSEDE and NOOP."
    ),
}
INSTRUCTS["fused"] = (
    INSTRUCTS["retrieve_plan"] + " Then judge which of the retrieved memory candidates are useful for this "
    "request: drop irrelevant candidates and keep useful candidates with relevance scores."
)
_RELATED_MIN_SCORE = 0.3


class Timer:
    """Accumulates wall time per stage, in milliseconds."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.ms[name] = self.ms.get(name, 0.0) + (time.perf_counter() - start) * 1000


def _scope_of(record: MemoryRecord) -> Scope:
    return Scope.of(record.memory_scope, record.session_id)


def _error(e: BaseException) -> dict[str, Any]:
    out = {"error": str(e)[:500], "error_type": type(e).__name__}
    if isinstance(e, ModelError) and e.__cause__ is not None and not isinstance(e.__cause__, ModelError):
        out["cause_type"] = type(e.__cause__).__name__
    return out


class Phases:
    """Runs the stages of one plugin call (see module docstring).

    The retrieval stages (:meth:`plan`, :meth:`candidates`, :meth:`judge`) need no Session: the LoCoMo
    harness (:mod:`agently_vecmem.eval.model_mode`) runs them per question with ``plugin=None``.
    ``params`` are the hybrid retrieval parameters of the candidate stage.
    """

    def __init__(
        self, plugin: Any, config: VecMemorySettings, store: Any, model: Any, timer: Timer,
        *, params: RetrievalParams = DEFAULT_PARAMS,
    ) -> None:
        self.plugin = plugin
        self.params = params
        self.config = config
        self.ws = store
        self.model = model
        self.timer = timer
        self._mark = model.mark() if model is not None else 0

    # ------------------------------------------------------------------ shared
    def accounting(self) -> dict[str, Any]:
        """Stage timings, and model calls / tokens of this plugin call."""
        timings = {k: round(v, 3) for k, v in self.timer.ms.items()}
        model_ms = 0.0
        if self.model is not None:
            usage = self.model.usage_summary(self._mark)
            model = usage.to_dict()
            model_ms = usage.latency_ms
        else:
            model = {"calls": 0, "failed": 0, "total_tokens": 0, "by_phase": {}}
        timings["total_excluding_model"] = round(max(0.0, sum(self.timer.ms.values()) - model_ms), 3)
        return {"timings_ms": timings, "model_calls": model}

    def _ask(self, phase: str, request: PhaseRequest, reply_model: type[Any], attempts: int) -> tuple[Any, int]:
        """One structured model request with a counted budget; returns (reply, calls made).

        Validation failures are re-asked with the errors; transport failures use up one attempt each.

        Raises:
            ModelError: the budget is spent (StructuredOutputError for invalid replies).
        """
        request = apply_execution(request, self.config.execution(request.phase))
        messages = render_messages(request)
        start = self.model.mark()
        with self.timer.stage(f"model.{phase}"):
            while True:
                # The budget counts model calls, whether they failed in transport or in validation.
                remaining = attempts - len(self.model.calls_since(start))
                try:
                    reply = self.model.structured(messages, reply_model, phase=phase, max_attempts=remaining)
                    return reply, len(self.model.calls_since(start))
                except StructuredOutputError:
                    raise
                except ModelError:
                    if len(self.model.calls_since(start)) >= attempts:
                        raise
                except Exception as e:  # noqa: BLE001 - a foreign ChatModel must not fail the user's turn
                    if len(self.model.calls_since(start)) >= attempts:
                        raise ModelError(f"{type(e).__name__}: {e}", phase=phase) from e

    def _calls(self, phase: str) -> int:
        return sum(1 for c in self.model.calls_since(self._mark) if c.phase == phase) if self.model else 0

    # ------------------------------------------------------------------ retrieval
    def plan(self, *, session_id: str, prompt_text: str, query: str) -> dict[str, Any]:
        """The retrieval plan: the model's (separate mode), or the deterministic one."""
        tags = merge_tags(self.config.retrieve.tags)
        plan: dict[str, Any] = {"query": query, "tags": tags, "include_global": True, "include_session": True}
        cfg = self.config.retrieve_plan
        if self.model is None or not cfg.enabled:
            reason = "no_model" if self.model is None else "plan_disabled"
            plan["diagnostics"] = {"degraded": True, "reason": "deterministic_fallback", "detail": reason}
            return plan
        if cfg.mode == "fused":
            plan["diagnostics"] = {"mode": "fused", "reason": "planned_with_rerank"}
            return plan
        request = PhaseRequest(
            "retrieve_plan", instruct=INSTRUCTS["retrieve_plan"],
            input={"session_id": session_id, "prompt": prompt_text, "configured_tags": tags},
            output=PLAN_OUTPUT,
        )
        try:
            reply, calls = self._ask("retrieve_plan", request, PlanReply, attempts=2)
        except ModelError as e:
            plan["diagnostics"] = {"degraded": True, "reason": "retrieve_plan_failed", **_error(e)}
            return plan
        return self._apply_plan(plan, reply, mode="separate", calls=calls)

    def _apply_plan(self, plan: dict[str, Any], reply: PlanReply, *, mode: str, calls: int) -> dict[str, Any]:
        return {
            "query": reply.query.strip()[: self.config.retrieve_plan.fallback_query_chars] or plan["query"],
            "tags": merge_tags(plan["tags"], reply.tags)[:32],
            "include_global": reply.include_global,
            "include_session": reply.include_session,
            "diagnostics": {"mode": mode, "degraded": False, "attempts": calls},
        }

    def candidates(self, plan: dict[str, Any], scopes: dict[str, Scope]) -> dict[str, list[Scored]]:
        """Hybrid candidates per included scope (the hard scope filter is the Scope object)."""
        included = [
            name for name, flag in (("GLOBAL_MEMORY", plan["include_global"]), ("SESSION_MEMORY", plan["include_session"]))
            if flag
        ]
        if not included:
            return {}
        with self.timer.stage("embed_query"):
            qvec = self.ws.embed_query(plan["query"] or " ")
        out: dict[str, list[Scored]] = {}
        with self.timer.stage("search"):
            for name in included:
                view = self.ws.view(scopes[name])
                if len(view) == 0:
                    out[name] = []
                    continue
                found = retrieve_candidates(
                    view, plan["query"], qvec, k=self.config.retrieve.max_candidates, params=self.params,
                    tags=plan["tags"], method=self.config.retrieve.search_method,  # type: ignore[arg-type]
                )
                out[name] = [Scored(c.record, c.score) for c in found]
        return out

    def judge(
        self, plan: dict[str, Any], candidates: dict[str, list[Scored]], *, session_id: str, prompt_text: str
    ) -> tuple[dict[str, tuple[list[dict[str, Any]], dict[str, Any]]], dict[str, Any]]:
        """Rerank (or plan-and-rerank) with retry, then the documented fallbacks; budgeted packages."""
        r = self.config.retrieve
        method = r.search_method
        packages: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {}
        rerankable: list[str] = []
        min_candidates = max(1, r.rerank_min_candidates)
        for name, cands in candidates.items():
            items, diag = package(cands, r)
            diag.update(method=method, query=plan["query"], rerank={"enabled": False, "reason": "deterministic"})
            packages[name] = (items, diag)
            if not r.rerank:
                diag["rerank"] = {"enabled": False, "reason": "rerank_disabled"}
            elif self.model is None:
                diag["rerank"] = {"enabled": False, "reason": "no_model"}
            elif len(cands) < min_candidates:
                diag["memory_rerank_skipped"] = {
                    "enabled": True, "reason": "candidate_count_below_min",
                    "candidate_count": len(cands), "rerank_min_candidates": min_candidates,
                }
            else:
                rerankable.append(name)
        fused = plan.get("diagnostics", {}).get("mode") == "fused"
        if not rerankable:
            if fused:
                plan["diagnostics"] = {"mode": "fused", "skipped": True, "reason": "no_candidates_to_judge"}
            return packages, plan
        windows = {name: candidates[name][: r.budget.rerank_candidates] for name in rerankable}
        previews = [preview(c.record) for name in rerankable for c in windows[name]]
        attempts = r.max_rerank_retries + 1
        reply_model: type[Any]
        if fused:
            phase, reply_model, request = "retrieve_plan", FusedRetrieveReply, PhaseRequest(
                "retrieve_plan", instruct=INSTRUCTS["fused"], output=FUSED_OUTPUT,
                input={"session_id": session_id, "prompt": prompt_text, "configured_tags": plan["tags"],
                       "candidates": previews},
            )
        else:
            phase, reply_model, request = "rerank", RerankReply, PhaseRequest(
                "rerank", instruct=INSTRUCTS["rerank"], output=RERANK_OUTPUT,
                input={"query": plan["query"], "candidates": previews},
            )
        try:
            reply, calls = self._ask(phase, request, reply_model, attempts)
            if fused:
                plan = self._apply_plan(plan, reply, mode="fused", calls=calls)
                if not reply.decisions:
                    raise ModelError("the model returned an empty decision set", phase=phase)
        except ModelError as e:
            calls = self._calls(phase)
            if fused and "attempts" not in plan.get("diagnostics", {}):
                plan["diagnostics"] = {"degraded": True, "reason": "retrieve_plan_failed", **_error(e)}
            for name in rerankable:
                packages[name][1]["rerank"] = {
                    "enabled": True, "candidate_count": len(windows[name]), "attempts": calls,
                    "degraded": True, "reason": "rerank_failed", "dropped": 0, **_error(e),
                }
            return packages, plan
        for name in rerankable:
            n = len(windows[name])
            kept, dropped = apply_decisions(windows[name], reply.decisions)
            items, diag = package(kept, r, candidate_count=n)
            diag.update(method=method, query=plan["query"])
            diag["rerank"] = {"enabled": True, "candidate_count": n, "attempts": calls, "degraded": False,
                              "dropped": dropped}
            if dropped:
                diag["omitted"] = [*diag["omitted"], {"reason": "rerank_drop", "count": dropped}]
            if not items and n > 0 and dropped >= n and r.keep_candidates_on_empty_rerank:
                det_items, det_diag = packages[name]
                det_diag["memory_rerank_empty_fallback"] = {
                    "enabled": True, "reason": "rerank_dropped_all_memory_candidates", "original": diag,
                }
                continue
            packages[name] = (items, diag)
        for name, flag in (("GLOBAL_MEMORY", plan["include_global"]), ("SESSION_MEMORY", plan["include_session"])):
            if not flag and name in packages:  # the fused plan decided this scope is not useful
                del packages[name]
        return packages, plan

    # ------------------------------------------------------------------ extraction
    def _related(self, session_id: str, text: str) -> dict[str, MemoryRecord]:
        """Existing memories most similar to the turn, shown to the extractor for consolidation."""
        n = self.config.extract.related_memories
        if n <= 0:
            return {}
        with self.timer.stage("embed_turn"):
            qvec = self.ws.embed_query(text[:2000])
        related: dict[str, MemoryRecord] = {}
        with self.timer.stage("related"):
            # Up to n per scope: a large global scope must not crowd out the session's own memories.
            for scope in (Scope.session_memory(session_id), Scope.global_memory()):
                hits = self.ws.view(scope).search(qvec, 2 * n)
                # Raw turns are not memories to refine; they are re-extracted on their own (reextract_pending).
                hits = [h for h in hits if h.record.extracted and h.score >= _RELATED_MIN_SCORE]
                related.update((h.record.id, h.record) for h in hits[:n])
        return related

    def extract(
        self, *, session_id: str, user_content: str | None, assistant_content: str | None, turn_index: int,
        keep_raw: bool = True,
    ) -> tuple[list[Pending], dict[str, Any]]:
        """Memories of a turn as pending records; the raw turn when extraction is impossible or fails."""
        cfg = self.config.extract
        raw_cfg = self.config.raw_turns

        def raw(reason: str, diag: dict[str, Any]) -> tuple[list[Pending], dict[str, Any]]:
            if not (keep_raw and raw_cfg.enabled):
                return [], diag
            record = raw_turn_record(
                session_id=session_id, user_content=user_content, assistant_content=assistant_content,
                turn_index=turn_index, max_chars=raw_cfg.max_chars, reason=reason, plugin=self.plugin.name,
                scope=raw_cfg.scope,
            )
            return [Pending(record, reason="raw_turn")], {**diag, "raw_turn_kept": True}

        if self.model is None:
            return raw("no_model", {"extracted": 0, "degraded": True, "reason": "no_model"})
        half = cfg.max_context_chars // 2
        related = self._related(session_id, f"{user_content or ''}\n{assistant_content or ''}")
        request = PhaseRequest(
            "extract", instruct=INSTRUCTS["extract"], output=EXTRACT_OUTPUT,
            input={
                "session_id": session_id,
                "user_content": (user_content or "")[:half],
                "assistant_content": (assistant_content or "")[:half],
                "body_schema": self.config.body_schema,
                "max_memories": cfg.max_memories,
                "related_memories": [
                    {"id": r.id, "scope": r.memory_scope, "summary": r.summary} for r in related.values()
                ],
            },
        )
        try:
            reply, calls = self._ask("extract", request, ExtractReply, attempts=2)
        except ModelError as e:
            return raw("extract_failed", {"extracted": 0, "degraded": True, "reason": "extract_failed", **_error(e)})
        ranked = sorted(reply.memories, key=lambda m: -m.importance)
        kept = ranked[: cfg.max_memories]
        pending: list[Pending] = []
        invalid: list[dict[str, Any]] = []
        for memory in kept:
            try:
                record = normalize_memory(
                    memory, session_id=session_id, turn_index=turn_index, plugin=self.plugin.name
                )
            except (ValidationError, ValueError) as e:
                invalid.append({"summary": (memory.summary or "")[:200], **_error(e)})
                continue
            if record is None:
                continue
            item = Pending(record, action=memory.action, target_id=memory.target_id, reason="extract")
            # The extractor already judged these existing memories: no second model call about them.
            item.meta["shown"] = frozenset(related)
            target = related.get(memory.target_id or "")
            if item.action != "ADD" and (target is None or _scope_of(target) != _scope_of(record)):
                item.action, item.target_id, item.reason = "ADD", None, "invalid_target"
            elif target is not None:
                item.meta["target"] = target
            pending.append(item)
        diag: dict[str, Any] = {"extracted": len(pending), "truncated": max(0, len(ranked) - len(kept)),
                                "related": len(related), "attempts": calls}
        if invalid:
            diag["invalid_memories"] = invalid
        return pending, diag

    # ------------------------------------------------------------------ consolidation and storage
    def _dedup_keys(self, scope: Scope) -> set[tuple[str, str | None, str]]:
        """Dedup keys of a scope's active records, cached on the (copy-on-write) snapshot."""
        return self.ws.view(scope).cached(
            "dedup_keys",
            lambda v: {dedup_key(r) for r in v.records},
            lambda old, v, n: old | {dedup_key(r) for r in v.records[n:]},
        )

    def consolidate(self, pending: list[Pending]) -> tuple[list[tuple[MemoryRecord, Any]], list[dict[str, Any]]]:
        """Decide ADD / UPDATE / SUPERSEDE / NOOP for each pending memory; returns what to store."""
        log: list[dict[str, Any]] = []
        with self.timer.stage("dedup"):
            existing: set[tuple[str, str | None, str]] = set()
            for scope_key in {(p.record.memory_scope, p.record.session_id) for p in pending}:
                existing |= self._dedup_keys(Scope.of(*scope_key))
            dups = set(exact_duplicates(pending, existing))
        fresh = [item for i, item in enumerate(pending) if i not in dups]
        for i in sorted(dups):
            log.append({"action": "NOOP", "reason": "exact_duplicate", "summary": pending[i].record.summary})
        if not fresh:
            return [], log
        with self.timer.stage("embed_memories"):
            vectors = self.ws.embedder.embed_documents([p.record.document() for p in fresh])
        for item, vec in zip(fresh, vectors, strict=True):
            item.vector = vec
        self._judge_near_duplicates(fresh, log)
        return self._apply_actions(fresh, log), log

    def _judge_near_duplicates(self, fresh: list[Pending], log: list[dict[str, Any]]) -> None:
        cfg = self.config.consolidate
        if not cfg.enabled:
            return
        asks: list[tuple[int, Pending, list[MemoryRecord]]] = []
        for i, item in enumerate(fresh):
            if item.action != "ADD" or item.reason == "raw_turn":
                continue
            view = self.ws.view(_scope_of(item.record))
            if not len(view):
                continue
            scores = view.dense_scores(item.vector)
            order = np.argsort(-scores, kind="stable")
            near = [
                view.records[j] for j in order
                if scores[j] >= cfg.similarity_threshold and view.records[j].extracted
                and view.records[j].id not in item.meta.get("shown", ())
            ][: cfg.max_neighbors]
            if near:
                asks.append((i, item, near))
        if not asks:
            return
        if self.model is None:
            for _, item, near in asks:
                log.append({"action": "ADD", "reason": "near_duplicate_unjudged", "summary": item.record.summary,
                            "neighbors": [r.id for r in near]})
            return
        request = PhaseRequest(
            "consolidate", instruct=INSTRUCTS["consolidate"], output=CONSOLIDATE_OUTPUT,
            input={
                "new_memories": [
                    {"index": i, "scope": item.record.memory_scope, "summary": item.record.summary,
                     "body": item.record.body,
                     "existing": [{"id": r.id, "summary": r.summary, "body": r.body} for r in near]}
                    for i, item, near in asks
                ],
            },
        )
        try:
            reply, _calls = self._ask("consolidate", request, ConsolidateReply, attempts=2)
        except ModelError as e:
            log.append({"action": "ADD", "reason": "consolidate_failed", "degraded": True, **_error(e)})
            return
        allowed = {i: {r.id: r for r in near} for i, _, near in asks}
        for decision in reply.decisions:
            targets = allowed.get(decision.index)
            if targets is None:
                continue
            item = fresh[decision.index]
            if decision.action == "ADD":
                continue
            target = targets.get(decision.target_id or "")
            if target is None:
                log.append({"action": "ADD", "reason": "invalid_target", "summary": item.record.summary})
                continue
            item.action, item.target_id, item.reason = decision.action, target.id, "consolidate"
            item.meta["target"] = target
            if decision.action == "UPDATE" and (decision.summary or decision.body):
                item.meta["merged"] = {k: v for k, v in (("summary", decision.summary), ("body", decision.body)) if v}

    def _apply_actions(self, fresh: list[Pending], log: list[dict[str, Any]]) -> list[tuple[MemoryRecord, Any]]:
        out: list[tuple[MemoryRecord, Any]] = []
        reembed: list[int] = []
        superseded: dict[str, MemoryRecord] = {}
        for item in fresh:
            record = item.record
            target_id = item.target_id
            if item.action in ("UPDATE", "SUPERSEDE") and target_id in superseded:
                # Two new memories replacing one record: the first replaces it, the second is added.
                item.action, item.reason = "ADD", "target_already_replaced"
            if item.action == "NOOP":
                log.append({"action": "NOOP", "reason": item.reason, "target_id": item.target_id,
                            "summary": record.summary})
                continue
            if item.action in ("UPDATE", "SUPERSEDE"):
                target: MemoryRecord = item.meta["target"]
                changes: dict[str, Any] = {"supersedes": target.id}
                changes.update(item.meta.get("merged", {}))
                changes["provenance"] = record.provenance.model_copy(update={"consolidation": item.action.lower()})
                try:
                    record = MemoryRecord.model_validate(record.model_copy(update=changes).model_dump())
                except ValidationError as e:  # a merged summary/body the record contract rejects
                    log.append({"action": item.action, "reason": "invalid_merge", "degraded": True, **_error(e)})
                    changes = {k: v for k, v in changes.items() if k not in ("summary", "body")}
                    record = MemoryRecord.model_validate(record.model_copy(update=changes).model_dump())
                    item.meta.pop("merged", None)
                if "merged" in item.meta:
                    reembed.append(len(out))
                superseded[target.id] = supersede(target, record.id)
                log.append({"action": item.action, "id": record.id, "target_id": target.id,
                            "reason": item.reason, "summary": record.summary})
            else:
                log.append({"action": "ADD", "id": record.id, "reason": item.reason, "summary": record.summary})
            out.append((record, item.vector))
        if reembed:
            with self.timer.stage("embed_memories"):
                vecs = self.ws.embedder.embed_documents([out[i][0].document() for i in reembed])
            for i, vec in zip(reembed, vecs, strict=True):
                out[i] = (out[i][0], vec)
        if superseded:
            old_vectors = self.ws.get_vectors(list(superseded))
            out.extend(zip(superseded.values(), old_vectors, strict=True))
        return out

    def store(self, items: list[tuple[MemoryRecord, Any]]) -> list[MemoryRecord]:
        """Write everything of this turn in one Workspace put (validated as a whole first)."""
        if not items:
            return []
        with self.timer.stage("store"):
            return self.ws.put([r for r, _ in items], vectors=np.asarray([v for _, v in items], dtype=np.float32))


"""The ``--model`` mode of the LoCoMo harness: the plugin's plan → candidates → rerank, per question.

Each question runs the retrieval stages of :mod:`agently_vecmem.memory.retrieval` (the code
``VecMemory.prepare_request`` runs, see :func:`agently_vecmem.memory.pipeline.retrieve`) inside its
conversation's scope, with its own :class:`~agently_vecmem.memory.context.CallContext` (model budget): the ``retrieve_plan`` call rewrites the
query, :func:`~agently_vecmem.search.candidates.retrieve_candidates` finds the hybrid candidates for it,
the ``rerank`` call judges them, and the plugin's documented fallbacks apply (rerank skipped below
``rerank_min_candidates``, deterministic candidates on a failed or empty rerank).

The ranking scored for recall@k: the records the rerank kept, in the plugin's order, then the other
candidates in candidate order, so recall@k stays defined for every k up to the candidate count. A question
whose stages raise anyway is scored on the deterministic ranking and counted as an ``"error"`` fallback.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..errors import ConfigurationTypeError
from ..llm.base import ChatModel, summarize_calls
from ..memory.config import VecMemorySettings
from ..memory.context import CallContext
from ..memory.retrieval import (
    Plan,
    RetrievalRequest,
    ScopePackage,
    find_candidates,
    judge,
    make_plan,
    package_scopes,
)
from ..search.params import RetrievalParams
from .metrics import aggregate, percentiles

__all__ = ["ModelRanker", "eval_settings", "FAILURE_KINDS"]

logger = logging.getLogger(__name__)

#: Fallback kinds that mean a model request failed (the others are the plugin's designed paths).
FAILURE_KINDS = frozenset({"retrieve_plan_failed", "rerank_failed", "error"})
# The ranking is measured, not the injected text: no character budget may cut kept records off.
_NO_BUDGET = 10**9


def eval_settings(depth: int) -> VecMemorySettings:
    """Plugin settings for the harness: separate plan and rerank calls, ``depth`` candidates, all judged
    (up to the plugin's limit of 200), no character budget. Everything else is the plugin's default."""
    return VecMemorySettings.model_validate({
        "retrieve_plan": {"mode": "separate"},
        "retrieve": {
            "max_candidates": min(depth, 500),
            "budget": {"chars": _NO_BUDGET, "item_chars": _NO_BUDGET, "rerank_candidates": min(depth, 200)},
        },
    })


def _fallback_kinds(plan: Plan, package: ScopePackage) -> list[str]:
    kinds = []
    if plan.status.kind == "failed":
        kinds.append("retrieve_plan_failed")
    if package.rerank.reason == "rerank_failed":
        kinds.append("rerank_failed")
    if package.skipped is not None:
        kinds.append("rerank_skipped")
    if package.empty_fallback is not None:
        kinds.append("rerank_empty")
    return kinds


class ModelRanker:
    """Ranks LoCoMo questions with a chat model through the plugin's stages and keeps the accounting.

    Args:
        model: the chat model (plan and rerank calls).
        workspace: the evaluation's ChromaWorkspace (conversations already ingested).
        depth: candidates per question (the deterministic run's depth).
        params: hybrid retrieval parameters (the same as the deterministic run's).
    """

    def __init__(self, model: ChatModel, workspace: Any, depth: int, params: RetrievalParams) -> None:
        if not isinstance(model, ChatModel):
            raise ConfigurationTypeError(f"model must be an agently_vecmem.llm.ChatModel, got {type(model).__name__}")
        self.model = model
        self.ws = workspace
        self.params = params
        self.config = eval_settings(depth)
        self.questions: list[dict[str, Any]] = []

    def rank(self, sample_id: str, question: str, deterministic: Sequence[str]) -> tuple[list[str], dict[str, Any]]:
        """Record ids of one question, best first, and its accounting row.

        Args:
            sample_id: the conversation (its scope is ``Scope.session_memory(sample_id)``).
            question: the question text (the plan's prompt and fallback query).
            deterministic: the deterministic ranking (record ids), used when the stages raise.
        """
        start = time.perf_counter()
        call = CallContext(self.config, self.ws, self.model, params=self.params)
        kinds: list[str] = []
        info: dict[str, Any] = {}
        try:
            request = RetrievalRequest(session_id=sample_id, prompt_text=question, query=question)
            plan = make_plan(call, request)
            if not plan.include_session:
                kinds.append("plan_excluded_session")
            # The conversation is the only scope holding evidence: a plan skipping it would score 0
            # whatever the retrieval does, so the scope choice is overridden (and counted).
            plan = replace(plan, include_global=False, include_session=True)
            candidates = find_candidates(call, plan, request)
            judgment = judge(call, plan, candidates, request)
            package = package_scopes(call, candidates, judgment, query=plan.query)["SESSION_MEMORY"]
            kinds += _fallback_kinds(judgment.plan, package)
            head = [item["source_ref"]["id"] for item in package.items]
            seen = set(head)
            ranked = head + [c.record.id for c in candidates["SESSION_MEMORY"].found if c.record.id not in seen]
            info["query"] = judgment.plan.query
        except Exception as e:  # noqa: BLE001 - one question must not end a long evaluation run
            logger.warning("model mode failed on a question of %s (%s: %s); deterministic ranking used",
                           sample_id, type(e).__name__, e)
            kinds.append("error")
            info["error_type"] = type(e).__name__
            ranked = list(deterministic)
        # This question's own requests (its budget's records), not the model's shared call log.
        calls = call.budget.records
        usage = summarize_calls(calls)
        row = {
            "calls": usage.calls, "failed_calls": usage.failed, "by_phase": dict(usage.by_phase),
            "usage_reported": any(c.prompt_tokens is not None for c in calls),
            "prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "ms": (time.perf_counter() - start) * 1000.0, "fallbacks": kinds, **info,
        }
        self.questions.append(row)
        return ranked, row

    def report(
        self, rows: Sequence[dict[str, Any]], ks: Sequence[int], category_names: dict[int, str]
    ) -> dict[str, Any]:
        """The ``"model"`` section: accounting and fallbacks of the ranked questions, and the metrics of
        ``rows`` (their :func:`~agently_vecmem.eval.metrics.score_query` results)."""
        n = len(self.questions)
        calls = sum(q["calls"] for q in self.questions)
        by_phase: Counter[str] = Counter()
        fallbacks: Counter[str] = Counter()
        for q in self.questions:
            by_phase.update(q["by_phase"])
            fallbacks.update(q["fallbacks"])
        reported = any(q["usage_reported"] for q in self.questions)
        prompt = sum(q["prompt_tokens"] for q in self.questions)
        completion = sum(q["completion_tokens"] for q in self.questions)
        metrics = aggregate(rows, ks)
        for cat, block in metrics["by_category"].items():
            block["name"] = category_names.get(int(cat), str(cat))
        return {
            "name": getattr(self.model, "model_name", type(self.model).__name__),
            "plan_mode": self.config.retrieve_plan.mode,
            "rerank_candidates": self.config.retrieve.budget.rerank_candidates,
            "questions": n,
            "calls": calls,
            "failed_calls": sum(q["failed_calls"] for q in self.questions),
            "calls_per_question": calls / n if n else 0.0,
            "by_phase": dict(by_phase),
            # None, not 0, when the endpoint never reported usage
            "prompt_tokens": prompt if reported else None,
            "completion_tokens": completion if reported else None,
            "prompt_tokens_per_question": prompt / n if reported and n else None,
            "completion_tokens_per_question": completion / n if reported and n else None,
            "fallbacks": dict(sorted(fallbacks.items())),
            "degraded_questions": sum(1 for q in self.questions if FAILURE_KINDS.intersection(q["fallbacks"])),
            "question_ms": percentiles([q["ms"] for q in self.questions]),
            **metrics,
        }

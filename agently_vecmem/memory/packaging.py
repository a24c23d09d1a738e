"""Pure stages of retrieval: query fallback, candidate previews, rerank decisions, fallbacks, packaging.

No I/O here: the plugin calls the Workspace and the model and hands the results to these functions,
which decide deterministically and return diagnostics as values. The diagnostic names and payloads are
AgentlyMemory 4.1.4.1's (``memory_rerank_skipped``, ``memory_rerank_empty_fallback``, ``rerank`` with
``reason="rerank_failed"``, ``candidate_count``, ``selected_count``, ...).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..records import MemoryRecord, date_label
from .config import CharBudget, Retrieve
from .replies import Decision

__all__ = [
    "Scored",
    "limit_text",
    "prompt_text",
    "fallback_query",
    "preview",
    "apply_decisions",
    "package",
    "memory_item",
]

logger = logging.getLogger(__name__)

_MARK = "\n[truncated]"


@dataclass(frozen=True)
class Scored:
    """A record with the score it is ranked by (deterministic or model-judged)."""

    record: MemoryRecord
    score: float
    reason: str = ""


def limit_text(text: str, max_chars: int) -> str:
    """Agently's head truncation: keep the first ``max_chars`` characters, marked ``[truncated]``."""
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    if max_chars <= len(_MARK) + 3:  # no room for the marker: a hard cut still honours the limit
        return text[:max_chars]
    return text[: max_chars - len(_MARK)].rstrip() + _MARK


def prompt_text(prompt: Any) -> str:
    """The rendered prompt text (what the plan call sees)."""
    for attr in ("to_text",):
        fn = getattr(prompt, attr, None)
        if callable(fn):
            try:
                return str(fn() or "")
            except Exception as e:  # noqa: BLE001 - a foreign prompt object; fall back to str()
                logger.warning("prompt.%s() raised %s: %s; the plan sees str(prompt) instead",
                               attr, type(e).__name__, e)
                break
    return str(prompt or "")


def _newest_input(prompt: Any) -> str:
    getter = getattr(prompt, "get", None)
    if not callable(getter):
        return ""
    try:
        value = getter("input")
    except Exception as e:  # noqa: BLE001 - a foreign prompt object; the query falls back to the prompt's tail
        logger.warning("prompt.get('input') raised %s: %s; the retrieval query uses the prompt's tail",
                       type(e).__name__, e)
        return ""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def fallback_query(prompt: Any, max_chars: int) -> str:
    """The deterministic retrieval query: the request's newest input when the prompt exposes it,
    otherwise the *tail* of the rendered prompt (AgentlyMemory keeps the head, which can cut the newest
    input off behind a long chat history)."""
    newest = _newest_input(prompt).strip()
    if newest:
        return newest[-max_chars:]
    text = prompt_text(prompt)
    return text if len(text) <= max_chars else text[-max_chars:]


def preview(record: MemoryRecord, *, max_chars: int = 600) -> dict[str, Any]:
    """What the rerank model sees of a candidate (Agently's preview shape)."""
    return {
        "id": record.id,
        "collection": record.collection,
        "kind": record.kind,
        "summary": record.summary,
        "content": limit_text(record.content(), max_chars),
        "tags": list(record.tags),
        "scope": record.scope_dict(),
    }


def apply_decisions(
    candidates: Sequence[Scored], decisions: Sequence[Decision]
) -> tuple[list[Scored], int]:
    """Apply rerank decisions the way Agently does.

    Candidates without a decision are kept with their deterministic score; ``useful=False`` drops a
    candidate; the kept ones are sorted by score, descending (stable). Decisions naming unknown ids are
    ignored (a model cannot add records that retrieval did not offer).

    Returns:
        (kept candidates, number dropped)
    """
    by_id = {d.id: d for d in decisions}
    kept: list[Scored] = []
    dropped = 0
    for cand in candidates:
        decision = by_id.get(cand.record.id)
        if decision is None:
            kept.append(cand)
        elif decision.useful:
            kept.append(Scored(cand.record, float(decision.score), decision.reason))
        else:
            dropped += 1
    kept.sort(key=lambda c: -c.score)
    return kept, dropped


def memory_item(cand: Scored, item_chars: int) -> dict[str, Any]:
    """One injected memory: ``{summary, content, tags, score, source_ref: {collection, kind, id}}`` (+ ``date``
    when the record has ``occurred_at``)."""
    record = cand.record
    return {
        "summary": record.summary,
        "content": limit_text(record.content(), item_chars),
        "tags": list(record.tags),
        "score": round(float(cand.score), 4),
        "source_ref": {"collection": record.collection, "kind": record.kind, "id": record.id},
        **({"date": date_label(record.occurred_at)} if record.occurred_at is not None else {}),
    }


def _item_chars(item: dict[str, Any]) -> int:
    return len(item["summary"]) + len(item["content"])


def package(
    candidates: Sequence[Scored], settings: Retrieve, *, candidate_count: int | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Select injected items within the budgets.

    ``selection="length"`` walks the candidates best first and skips an item that would overflow
    ``budget.chars`` (the first item is excerpted to fit instead); ``selection="top_n"`` also stops at
    ``top_n`` items. Every item's content is capped at ``budget.item_chars``.

    Returns:
        (items, diagnostics with candidate_count, selected_count, used_chars, char_budget, omitted)
    """
    budget: CharBudget = settings.budget
    char_budget = budget.tokens * 4 if budget.tokens else budget.chars
    top_n = settings.top_n or budget.top_n
    items: list[dict[str, Any]] = []
    used = 0
    over_budget = 0
    over_count = 0
    for cand in candidates:
        if settings.selection == "top_n" and top_n is not None and len(items) >= top_n:
            over_count += 1
            continue
        item = memory_item(cand, budget.item_chars)
        size = _item_chars(item)
        if used + size > char_budget:
            room = char_budget - used - len(item["summary"])
            if items or room <= 20:
                over_budget += 1
                continue
            item["content"] = limit_text(item["content"], room)
            size = _item_chars(item)
        items.append(item)
        used += size
    omitted = []
    if over_budget:
        omitted.append({"reason": "budget", "count": over_budget})
    if over_count:
        omitted.append({"reason": "top_n", "count": over_count})
    diagnostics = {
        "candidate_count": len(candidates) if candidate_count is None else candidate_count,
        "selected_count": len(items),
        "used_chars": used,
        "char_budget": char_budget,
        "selection": settings.selection,
        "omitted": omitted,
    }
    return items, diagnostics

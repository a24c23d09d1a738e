"""LoCoMo through the user's path: import the conversations with :func:`agently_vecmem.ingest.import_history`
(``VecMemory.after_turn_sync`` per speaker-A/speaker-B pair, dated with the session dates), then ask every
question through ``VecMemory.prepare_request`` in a fresh Session and score what was *injected*.

Compared with the harness path (:mod:`.runner`: one hand-made record per dialog turn, text
``[8 May 2023] Caroline: ...``, ranked by ``retrieve_candidates`` directly), this measures what a user who
imports a history and then chats actually gets: the plugin's raw-turn records (one per user/assistant pair,
so one injected item can hold two dialog turns), the plugin's query, scopes, budget and packaging.

Recall@k counts the first k *dialog turns* of the injected items in order (an item holding two turns
contributes both), so k means the same amount of retrieved text as in the harness; ``items_recall_at_k``
counts the first k injected items instead.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from ..embedders.base import Embedder
from ..workspace.transfer import progress_bar
from .locomo import load_locomo
from .metrics import percentiles, score_query
from .runner import aggregate_named, checked_ks

__all__ = ["run_locomo_plugin"]

logger = logging.getLogger(__name__)


def run_locomo_plugin(
    data_path: str | os.PathLike[str],
    *,
    audit_path: str | os.PathLike[str] | None = None,
    ks: Sequence[int] = (1, 5, 10, 20),
    workspace_path: str | os.PathLike[str] | None = None,
    embedder: Embedder | None = None,
    limit_conversations: int | None = None,
    limit_questions: int | None = None,
    dated: bool = True,
    progress: bool = True,
    include_per_question: bool = False,
) -> dict[str, Any]:
    """Evaluate the plugin path on a LoCoMo-shaped file (no model: raw turns, deterministic retrieval).

    Args:
        data_path: the conversations (``locomo10.json`` schema).
        audit_path: optional audit file correcting gold evidence.
        ks: recall cut-offs.
        workspace_path: where the Chroma store is created (default: a temporary directory).
        embedder: the embedder (default: the offline MiniLM).
        limit_conversations: evaluate only the first N conversations.
        limit_questions: ask only the first N questions of each conversation (a quick slice).
        dated: import with the session dates (False: every turn dated at import time).
        progress: tqdm bars while importing and asking.
        include_per_question: add ``"per_question"`` rows.

    Returns:
        ``{"path": "plugin", "dated", "embedder", "spaces", "questions", "conversations", "recall_at_k", "mrr", "ndcg_at_10",
        "by_category", "items_recall_at_k", "turns", "records", "import_s", "import_turns_per_s",
        "ask_ms": {"p50", "p95"}, "questions_s"}``.
    """
    ks = checked_ks(ks)
    conversations = load_locomo(data_path, audit_path=audit_path, limit_conversations=limit_conversations)
    with tempfile.TemporaryDirectory(prefix="vecmem-eval-plugin-") as tmp:
        source = str(data_path)
        if limit_conversations is not None:
            with open(data_path, encoding="utf-8") as fh:
                samples = json.load(fh)[:limit_conversations]
            source = os.path.join(tmp, "conversations.json")
            with open(source, "w", encoding="utf-8") as fh:
                json.dump(samples, fh)
        path = str(workspace_path) if workspace_path is not None else os.path.join(tmp, "store")
        return _run(conversations, source, path, ks, embedder, limit_questions, dated, progress,
                    include_per_question)


def _settings(depth: int) -> dict[str, Any]:
    """VecMemory settings of the eval sessions: inject the top ``depth`` items, whatever their length."""
    return {"session": {"memory": {"VecMemory": {
        "retrieve": {"selection": "top_n", "top_n": depth, "max_candidates": max(50, depth),
                     "budget": {"chars": 10_000_000, "item_chars": 100_000}},
    }}}}


def _run(
    conversations: list[Any], source: str, path: str, ks: tuple[int, ...], embedder: Embedder | None,
    limit_questions: int | None, dated: bool, progress: bool, include_per_question: bool,
) -> dict[str, Any]:
    from ..filters import Scope
    from ..ingest import import_history
    from ..session import Prompt, Session
    from ..workspace.chroma import ChromaWorkspace
    from ..workspace.embedding_models import embedding_models

    depth = max(max(ks), 10)
    dias_of: dict[str, tuple[str, ...]] = {}

    def remember(turn: Any, diag: dict[str, Any]) -> None:
        for ref in diag.get("refs", ()):
            dias_of[ref["id"]] = turn.sources

    rows: list[dict[str, Any]] = []
    item_rows: list[dict[str, Any]] = []
    per_question: list[dict[str, Any]] = []
    ask_ms: list[float] = []
    with ChromaWorkspace(path, embedder=embedder, collection="vecmem_eval_plugin") as ws:  # (the default spaces)
        models = embedding_models(ws)
        ws.embedder.embed_query("warm up")  # load the model outside the timed import
        report = import_history(ws, source, fmt="locomo", dated=dated, progress=progress, on_turn=remember)
        settings = _settings(depth)
        questions = [(c, q) for c in conversations for q in c.questions[:limit_questions]]
        start_all = time.perf_counter()
        for conv, q in progress_bar(questions, len(questions), "asking", progress, unit="it"):
            session = Session(id=conv.sample_id, settings=settings).use_memory(mode="VecMemory", workspace=ws)
            prompt = Prompt()
            prompt.set("input", q.question)
            start = time.perf_counter()
            session.memory.prepare_request_sync(prompt=prompt, session=session)
            ask_ms.append((time.perf_counter() - start) * 1000.0)
            items = list(prompt.get("SESSION_MEMORY") or []) + list(prompt.get("GLOBAL_MEMORY") or [])
            items.sort(key=lambda item: -float(item.get("score", 0.0)))
            ids = [item["source_ref"]["id"] for item in items]
            ranked: list[str] = []
            for rid in ids:
                ranked.extend(d for d in dias_of.get(rid, ()) if d not in ranked)
            rows.append(score_query(ranked, q.evidence, ks, q.category))
            item_rank = [dias_of.get(rid, ()) for rid in ids]
            item_rows.append({str(k): _item_recall(item_rank, q.evidence, k) for k in ks})
            if include_per_question:
                per_question.append({"question_id": q.question_id, "category": q.category, "question": q.question,
                                     "evidence": list(q.evidence), "top10": ranked[:10],
                                     "dates": [item.get("date") for item in items[:5]]})
        questions_s = time.perf_counter() - start_all
        records = ws.count(scope=Scope(None, None, "memory"))
    result: dict[str, Any] = {"path": "plugin", "dated": dated, **models, **aggregate_named(rows, ks)}
    result.update(
        conversations=len(conversations),
        items_recall_at_k={str(k): sum(r[str(k)] for r in item_rows) / max(1, len(item_rows)) for k in ks},
        turns=report.turns, records=records, import_s=round(report.seconds, 2),
        import_turns_per_s=round(report.turns_per_s, 2), ask_ms=percentiles(ask_ms),
        questions_s=round(questions_s, 2),
    )
    if include_per_question:
        result["per_question"] = per_question
    logger.info("plugin path: %d questions, R@5 %.3f R@10 %.3f", result["questions"],
                result["recall_at_k"].get("5", 0.0), result["recall_at_k"].get("10", 0.0))
    return result


def _item_recall(item_rank: list[tuple[str, ...]], evidence: Sequence[str], k: int) -> float:
    gold = set(evidence)
    if not gold:
        return 0.0
    found = {d for dias in item_rank[:k] for d in dias}
    return len(gold & found) / len(gold)

"""The LoCoMo evaluation runner: ingest conversations into a real Chroma workspace, retrieve, score.

Every conversation is one scope (``Scope.session_memory(sample_id)``), ingested with
:meth:`ChromaWorkspace.put` (embedded with the workspace's embedder). Each question is answered with
:func:`agently_vecmem.search.candidates.retrieve_candidates` inside its own conversation: the tuned hybrid
method plus the baselines (BM25, dense, RRF) through the same function, so the numbers compare like for
like. Works on any LoCoMo-shaped file: the shipped synthetic set, your own data, or LoCoMo itself.

With a chat model (``model=``), every question is also ranked by the plugin's own plan → candidates →
rerank stages (:mod:`.model_mode`), in the same run, and reported beside the deterministic numbers.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from ..embedders.base import Embedder
from ..errors import ConfigurationError
from ..filters import Scope
from ..search.candidates import retrieve_candidates
from ..search.params import DEFAULT_PARAMS, RetrievalParams
from ..workspace.transfer import progress_bar
from .locomo import CATEGORY_NAMES, Conversation, conversation_records, load_locomo
from .metrics import aggregate, percentiles, score_query

__all__ = ["run_locomo", "BASELINES", "SYNTHETIC_DATA_PATH"]

logger = logging.getLogger(__name__)

#: Baselines reported beside the tuned method: report name → retrieval method.
BASELINES: dict[str, str] = {"bm25": "lexical", "dense": "dense", "rrf": "rrf"}
#: The small LoCoMo-shaped dataset shipped with the package (written for this project).
SYNTHETIC_DATA_PATH = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "synthetic_conversations.json")


def checked_ks(ks: Sequence[int]) -> tuple[int, ...]:
    """The recall cut-offs, sorted and unique.

    Raises:
        ConfigurationError: none given, or one below 1.
    """
    out = tuple(sorted({int(k) for k in ks}))
    if not out or out[0] < 1:
        raise ConfigurationError(f"ks must be positive integers, got {out}")
    return out


def aggregate_named(rows: list[dict[str, Any]], ks: tuple[int, ...]) -> dict[str, Any]:
    """:func:`~.metrics.aggregate` of ``rows`` with each ``by_category`` block named (LoCoMo's categories)."""
    result = aggregate(rows, ks)
    for cat, block in result["by_category"].items():
        block["name"] = CATEGORY_NAMES.get(int(cat), str(cat))
    return result


def run_locomo(
    data_path: str | os.PathLike[str],
    *,
    audit_path: str | os.PathLike[str] | None = None,
    ks: Sequence[int] = (1, 5, 10, 20),
    workspace_path: str | os.PathLike[str] | None = None,
    embedder: Embedder | None = None,
    limit_conversations: int | None = None,
    progress: bool = True,
    model: Any | None = None,
    params: RetrievalParams = DEFAULT_PARAMS,
    include_per_question: bool = False,
) -> dict[str, Any]:
    """Evaluate evidence retrieval on a LoCoMo-shaped file.

    Args:
        data_path: the conversations (``locomo10.json`` schema).
        audit_path: optional audit file correcting gold evidence (``WRONG_CITATION`` rows).
        ks: cut-offs for recall@k.
        workspace_path: where the Chroma store is created (default: a temporary directory, removed after).
        embedder: the embedder (default: the offline MiniLM).
        limit_conversations: evaluate only the first N conversations.
        progress: show tqdm progress bars while ingesting and querying.
        model: a :class:`~agently_vecmem.llm.ChatModel` for the plan + rerank mode (see
            :mod:`.model_mode`); its results are the ``"model"`` section. A failed model request degrades
            only its question.
        params: retrieval parameters of the hybrid method.
        include_per_question: add ``"per_question"`` rows (id, category, gold, top-10 dialog ids).

    Returns:
        ``{"questions", "conversations", "recall_at_k", "mrr", "ndcg_at_10", "by_category",
        "baselines": {"bm25"|"dense"|"rrf": {...same metrics...}}, "search_ms": {"p50", "p95"},
        "ingest_per_s", "params", "embedder", "spaces"}`` (``embedder``: the model id that ran; ``spaces``: the
        store's extra vector spaces, name -> model id); with ``model`` also ``"model": {"name", "questions", "calls",
        "calls_per_question", "by_phase", "prompt_tokens_per_question", "completion_tokens_per_question",
        "fallbacks", "degraded_questions", "recall_at_k", "mrr", "ndcg_at_10", "by_category", ...}``.

    Raises:
        ConfigurationTypeError: ``model`` is not a ChatModel (also a ``TypeError``).
        ConfigurationError: bad ``ks``.
        DataFileError: a data or audit file is missing, unreadable or not LoCoMo-shaped.
    """
    ks = checked_ks(ks)
    conversations = load_locomo(data_path, audit_path=audit_path, limit_conversations=limit_conversations)
    if workspace_path is None:
        with tempfile.TemporaryDirectory(prefix="vecmem-eval-") as tmp:
            return _run(conversations, tmp, ks, embedder, progress, params, include_per_question, model)
    return _run(conversations, str(workspace_path), ks, embedder, progress, params, include_per_question, model)


def _run(
    conversations: list[Conversation],
    path: str,
    ks: tuple[int, ...],
    embedder: Embedder | None,
    progress: bool,
    params: RetrievalParams,
    include_per_question: bool,
    model: Any | None,
) -> dict[str, Any]:
    from ..workspace.chroma import ChromaWorkspace
    from ..workspace.embedding_models import embedding_models
    from .model_mode import ModelRanker

    depth = max(max(ks), 10)
    methods = {"hybrid": "hybrid", **BASELINES}
    rows: dict[str, list[dict[str, Any]]] = {m: [] for m in [*methods, "model"]}
    search_ms: list[float] = []
    per_question: list[dict[str, Any]] = []
    n_records = 0
    ingest_s = 0.0
    # the store a user gets: a MiniLM store keeps the e5 space, which English queries blend in
    # (RetrievalParams.english_space_weight)
    with ChromaWorkspace(path, embedder=embedder, collection="vecmem_eval") as ws:
        models = embedding_models(ws)
        ranker = ModelRanker(model, ws, depth, params) if model is not None else None
        for conv in progress_bar(conversations, len(conversations), "ingesting conversations", progress, unit="it"):
            records = conversation_records(conv)
            start = time.perf_counter()
            ws.put(records)
            ingest_s += time.perf_counter() - start
            n_records += len(records)
        total_q = sum(len(c.questions) for c in conversations)
        bar = progress_bar(range(total_q), total_q, "querying", progress, unit="it")
        it = iter(bar)
        for conv in conversations:
            view = ws.view(Scope.session_memory(conv.sample_id))
            dia_of = {r.id: str(r.provenance.model_dump().get("dia_id")) for r in view.records}
            # build the lexical index and neighbour links once, outside the timed searches
            # questions embedded in one batch (same vectors as ws.embed_query, one at a time)
            qvecs = ws.embedder.embed_documents([q.question for q in conv.questions])
            if len(view):
                retrieve_candidates(view, "warm up", view.rows(0), k=1, params=params)
            for q, qvec in zip(conv.questions, qvecs, strict=True):
                next(it, None)
                top: dict[str, list[str]] = {}
                hybrid_ids: list[str] = []
                for name, method in methods.items():
                    start = time.perf_counter()
                    cands = retrieve_candidates(view, q.question, qvec, k=depth, params=params, method=method)  # type: ignore[arg-type]
                    if name == "hybrid":
                        search_ms.append((time.perf_counter() - start) * 1000.0)
                        hybrid_ids = [c.record.id for c in cands]
                    ranked = [dia_of[c.record.id] for c in cands]
                    top[name] = ranked
                    rows[name].append(score_query(ranked, q.evidence, ks, q.category))
                if ranker is not None:
                    ids, info = ranker.rank(conv.sample_id, q.question, hybrid_ids)
                    top["model"] = [dia_of[i] for i in ids]
                    rows["model"].append(score_query(top["model"], q.evidence, ks, q.category))
                if include_per_question:
                    row = {"question_id": q.question_id, "category": q.category, "question": q.question,
                           "evidence": list(q.evidence), "top10": top["hybrid"][:10], "corrected": q.corrected}
                    if ranker is not None:
                        row["model"] = {**info, "top10": top["model"][:10]}
                    per_question.append(row)
        for _ in it:
            pass
    result: dict[str, Any] = aggregate_named(rows["hybrid"], ks)
    result.update(models)
    result["conversations"] = len(conversations)
    result["baselines"] = {}
    for name in BASELINES:
        base = aggregate(rows[name], ks)
        result["baselines"][name] = base
    result["search_ms"] = percentiles(search_ms)
    result["ingest_per_s"] = n_records / ingest_s if ingest_s > 0 else 0.0
    result["records"] = n_records
    result["params"] = dict(params.__dict__)
    if ranker is not None:
        result["model"] = ranker.report(rows["model"], ks, CATEGORY_NAMES)
    if include_per_question:
        result["per_question"] = per_question
    logger.info("evaluated %d questions: R@5 %.3f R@10 %.3f", result["questions"],
                result["recall_at_k"].get("5", 0.0), result["recall_at_k"].get("10", 0.0))
    return result

"""Retrieval metrics over ranked id lists with a set of relevant (gold) ids, and latency percentiles.

All metrics take ``ranked`` (retrieved ids, best first) and ``relevant`` (gold ids, binary relevance):

- **evidence recall@k**: the share of gold ids found in the top ``k`` (LoCoMo's evidence recall).
- **MRR**: ``1 / rank`` of the first gold id (0 when none is retrieved).
- **nDCG@k**: ``DCG@k / IDCG@k`` with gains ``1/log2(rank+1)``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["recall_at_k", "reciprocal_rank", "ndcg_at_k", "percentiles", "QueryResult", "aggregate"]


def recall_at_k(ranked: Sequence[Hashable], relevant: Iterable[Hashable], k: int) -> float:
    """Share of relevant ids in the top ``k`` (0.0 when there is nothing relevant)."""
    gold = set(relevant)
    if not gold:
        return 0.0
    return len(gold.intersection(ranked[:k])) / len(gold)


def reciprocal_rank(ranked: Sequence[Hashable], relevant: Iterable[Hashable]) -> float:
    """``1 / rank`` of the first relevant id, 0.0 when none is retrieved."""
    gold = set(relevant)
    for i, rid in enumerate(ranked, start=1):
        if rid in gold:
            return 1.0 / i
    return 0.0


def ndcg_at_k(ranked: Sequence[Hashable], relevant: Iterable[Hashable], k: int = 10) -> float:
    """Binary-relevance nDCG@k (0.0 when there is nothing relevant)."""
    gold = set(relevant)
    if not gold:
        return 0.0
    dcg = sum(1.0 / math.log2(i + 1) for i, rid in enumerate(ranked[:k], start=1) if rid in gold)
    idcg = sum(1.0 / math.log2(i + 1) for i in range(1, min(len(gold), k) + 1))
    return dcg / idcg


def percentiles(values: Sequence[float], qs: Sequence[float] = (50, 95)) -> dict[str, float]:
    """``{"p50": .., "p95": ..}`` of ``values`` (linear interpolation; zeros for no values)."""
    if not len(values):
        return {f"p{int(q)}": 0.0 for q in qs}
    arr = np.asarray(values, dtype=np.float64)
    return {f"p{int(q)}": float(np.percentile(arr, q)) for q in qs}


class QueryResult(dict):
    """One evaluated query: ``{"category": int, "recall": {k: float}, "rr": float, "ndcg10": float}``."""


def score_query(
    ranked: Sequence[Hashable], relevant: Iterable[Hashable], ks: Sequence[int], category: Any = None
) -> QueryResult:
    """All metrics of one query."""
    gold = list(relevant)
    return QueryResult(
        category=category,
        recall={str(k): recall_at_k(ranked, gold, k) for k in ks},
        rr=reciprocal_rank(ranked, gold),
        ndcg10=ndcg_at_k(ranked, gold, 10),
    )


def aggregate(results: Sequence[Mapping[str, Any]], ks: Sequence[int]) -> dict[str, Any]:
    """Mean metrics over queries, overall and per category.

    Returns:
        ``{"questions": n, "recall_at_k": {"5": ..}, "mrr": .., "ndcg_at_10": .., "by_category":
        {"<cat>": {"questions": .., "recall_at_k": .., "mrr": .., "ndcg_at_10": ..}}}``.
    """

    def mean(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        n = len(rows)
        if not n:
            return {"questions": 0, "recall_at_k": {str(k): 0.0 for k in ks}, "mrr": 0.0, "ndcg_at_10": 0.0}
        return {
            "questions": n,
            "recall_at_k": {str(k): sum(r["recall"][str(k)] for r in rows) / n for k in ks},
            "mrr": sum(r["rr"] for r in rows) / n,
            "ndcg_at_10": sum(r["ndcg10"] for r in rows) / n,
        }

    out = mean(results)
    cats = sorted({r.get("category") for r in results if r.get("category") is not None}, key=str)
    out["by_category"] = {str(c): mean([r for r in results if r.get("category") == c]) for c in cats}
    return out

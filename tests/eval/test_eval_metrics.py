"""Hand-computed retrieval metrics."""

from __future__ import annotations

import math

import pytest

from agently_vecmem.eval.metrics import (
    aggregate,
    ndcg_at_k,
    percentiles,
    recall_at_k,
    reciprocal_rank,
    score_query,
)


def test_recall_at_k() -> None:
    ranked = ["a", "b", "c", "d", "e"]
    assert recall_at_k(ranked, ["b", "e"], 1) == 0.0
    assert recall_at_k(ranked, ["b", "e"], 2) == 0.5
    assert recall_at_k(ranked, ["b", "e"], 5) == 1.0
    assert recall_at_k(ranked, ["b", "z"], 10) == 0.5
    assert recall_at_k(ranked, [], 5) == 0.0


def test_reciprocal_rank() -> None:
    assert reciprocal_rank(["a", "b", "c"], ["c"]) == pytest.approx(1 / 3)
    assert reciprocal_rank(["a", "b", "c"], ["b", "c"]) == 0.5
    assert reciprocal_rank(["a"], ["z"]) == 0.0


def test_ndcg_hand_computed() -> None:
    # relevant at ranks 2 and 4: DCG = 1/log2(3) + 1/log2(5); IDCG = 1 + 1/log2(3)
    expected = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
    assert ndcg_at_k(["a", "b", "c", "d"], ["b", "d"], 10) == pytest.approx(expected)
    assert ndcg_at_k(["b", "d"], ["b", "d"], 10) == pytest.approx(1.0)
    assert ndcg_at_k(["a", "b"], ["b"], 1) == 0.0
    assert ndcg_at_k(["a"], [], 10) == 0.0


def test_aggregate_by_category_and_percentiles() -> None:
    rows = [score_query(["a", "b"], ["a"], (1, 2), 1), score_query(["a", "b"], ["b"], (1, 2), 2),
            score_query(["x", "y"], ["b"], (1, 2), 2)]
    out = aggregate(rows, (1, 2))
    assert out["questions"] == 3
    assert out["recall_at_k"] == {"1": pytest.approx(1 / 3), "2": pytest.approx(2 / 3)}
    assert out["mrr"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert out["by_category"]["2"]["questions"] == 2
    assert out["by_category"]["2"]["recall_at_k"]["2"] == pytest.approx(0.5)
    assert out["by_category"]["1"]["mrr"] == 1.0
    assert percentiles([1, 2, 3, 4]) == {"p50": 2.5, "p95": pytest.approx(3.85)}
    assert percentiles([]) == {"p50": 0.0, "p95": 0.0}

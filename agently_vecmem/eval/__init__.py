"""Retrieval-quality evaluation: LoCoMo loader, metrics, runner and the ``eval`` CLI command.

Example:
    >>> from agently_vecmem.eval import run_locomo
    >>> result = run_locomo("locomo10.json", audit_path="audit.json")   # doctest: +SKIP
    >>> result["recall_at_k"]["5"], result["baselines"]["bm25"]["recall_at_k"]["5"]  # doctest: +SKIP
"""

from __future__ import annotations

from .metrics import aggregate, ndcg_at_k, recall_at_k, reciprocal_rank
from .runner import SYNTHETIC_DATA_PATH, run_locomo

__all__ = ["run_locomo", "SYNTHETIC_DATA_PATH", "recall_at_k", "reciprocal_rank", "ndcg_at_k", "aggregate"]

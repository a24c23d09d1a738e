"""Retrieval-quality evaluation: LoCoMo loader, metrics, runner and the ``eval`` CLI command.

Example:
    >>> from agently_vecmem.eval import run_locomo
    >>> result = run_locomo("locomo10.json", audit_path="audit.json")   # doctest: +SKIP
    >>> result["recall_at_k"]["5"], result["baselines"]["bm25"]["recall_at_k"]["5"]  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "run_locomo", "SYNTHETIC_DATA_PATH", "recall_at_k", "reciprocal_rank", "ndcg_at_k", "aggregate", "run_probe",
    "PROBE_DATA_PATH",
]


def __getattr__(name: str) -> Any:
    # Lazy: the CLI imports this package to add its parser; numpy and the runner load on first use.
    if name in ("recall_at_k", "reciprocal_rank", "ndcg_at_k", "aggregate"):
        from . import metrics

        return getattr(metrics, name)
    if name in ("run_locomo", "SYNTHETIC_DATA_PATH"):
        from . import runner

        return getattr(runner, name)
    if name in ("run_probe", "PROBE_DATA_PATH"):
        from . import probe

        return getattr(probe, name)
    raise AttributeError(f"module 'agently_vecmem.eval' has no attribute {name!r}")

"""``eval locomo --path plugin``: LoCoMo-shaped conversations imported through the importer, questions asked
through ``prepare_request``; the quick slice of the suite (the full LoCoMo run is ``VECMEM_FULL=1``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agently_vecmem.cli.eval import format_plugin_report
from agently_vecmem.eval.plugin_path import run_locomo_plugin
from agently_vecmem.eval.runner import SYNTHETIC_DATA_PATH, run_locomo
from agently_vecmem.testing import DeterministicEmbedder

LOCOMO = Path(os.environ.get("VECMEM_LOCOMO_DIR", Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo"))


def test_plugin_path_on_the_synthetic_set(tmp_path: Path) -> None:
    result = run_locomo_plugin(SYNTHETIC_DATA_PATH, embedder=DeterministicEmbedder(), progress=False,
                               include_per_question=True, workspace_path=tmp_path / "store")
    data = json.loads(Path(SYNTHETIC_DATA_PATH).read_text())
    assert result["path"] == "plugin" and result["dated"] is True
    assert result["conversations"] == len(data) and result["questions"] > 0
    assert result["records"] == result["turns"] > 0
    for k in ("1", "5", "10", "20"):
        assert 0.0 <= result["recall_at_k"][k] <= result["items_recall_at_k"][k] <= 1.0
    assert result["recall_at_k"]["20"] > result["recall_at_k"]["1"] > 0.0
    # injected items carry their session dates
    row = result["per_question"][0]
    assert row["dates"] and all(d and d[:4].isdigit() for d in row["dates"])
    report = format_plugin_report(result)
    assert "plugin path (dated import)" in report and "turns/s" in report
    # a store that already holds the import is resumed, not doubled
    again = run_locomo_plugin(SYNTHETIC_DATA_PATH, embedder=DeterministicEmbedder(), progress=False,
                              workspace_path=tmp_path / "store")
    assert again["records"] == result["records"]


@pytest.mark.full  # real MiniLM over both paths: make test-full
def test_plugin_path_reaches_the_harness_with_minilm(minilm: object) -> None:
    plugin = run_locomo_plugin(SYNTHETIC_DATA_PATH, embedder=minilm, progress=False)
    harness = run_locomo(SYNTHETIC_DATA_PATH, embedder=minilm, progress=False)
    assert plugin["questions"] == harness["questions"]
    # what the user gets in the first 5 injected items covers at least what the harness finds in 5 turns
    assert plugin["items_recall_at_k"]["5"] >= harness["recall_at_k"]["5"] - 0.05


def test_cli_eval_plugin_path(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"}
    out = subprocess.run(
        [sys.executable, "-m", "agently_vecmem.cli", "--embedder", "hash", "eval", "locomo", SYNTHETIC_DATA_PATH,
         "--path", "plugin", "--questions", "2", "--no-progress", "--json", str(tmp_path / "r.json")],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "plugin path (dated import)" in out.stdout
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["questions"] <= 2 * result["conversations"]
    bad = subprocess.run(
        [sys.executable, "-m", "agently_vecmem.cli", "eval", "locomo", SYNTHETIC_DATA_PATH, "--no-dates"],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert bad.returncode == 2 and "--path plugin and --path agent only" in bad.stderr


@pytest.mark.full  # the full LoCoMo dev run: make test-full
def test_full_locomo_dev_plugin_path_with_dates(minilm: object) -> None:
    result = run_locomo_plugin(LOCOMO / "locomo_dev.json", audit_path=LOCOMO / "locomo_dev_audit.json",
                               embedder=minilm, progress=False)
    assert result["questions"] == 760
    # the harness reaches R@5 0.688 / R@10 0.769 (README); the user's path with dates, per injected item:
    assert result["items_recall_at_k"]["5"] >= 0.68 and result["items_recall_at_k"]["10"] >= 0.76

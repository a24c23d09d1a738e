"""Every benchmark's ``--quick`` variant runs and ends with its one-line summary.

No timing assertions: the benchmarks print ratios measured side by side; this only proves they work.
The subprocesses start together (they mostly wait on Chroma, model loading and each other's I/O), so the
whole file takes about as long as the slowest one.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
NAMES = ["bench_search", "bench_ingest", "bench_coldstart", "bench_memory", "bench_turn", "bench_multilingual",
         "bench_server", "bench_import", "bench_users", "bench_scale", "bench_spaces", "bench_rewrite",
         "bench_record_memory", "bench_ann", "bench_bm25", "bench_removal", "bench_pool", "bench_snapshot_load",
         "bench_snapshot_append"]
TIMEOUT = 240


@pytest.fixture(scope="module")
def quick_runs() -> dict[str, subprocess.Popen]:
    procs = {
        name: subprocess.Popen(
            [sys.executable, str(BENCH / f"{name}.py"), "--quick"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=BENCH.parent,
        )
        for name in NAMES
    }
    yield procs
    for p in procs.values():
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_quick_variant_ends_with_summary(quick_runs: dict[str, subprocess.Popen], name: str) -> None:
    proc = quick_runs[name]
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"{name} --quick did not finish in {TIMEOUT} s:\n{out[-2000:]}\n{err[-2000:]}")
    assert proc.returncode == 0, f"{name} --quick failed:\n{out[-2000:]}\n{err[-3000:]}"
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines, f"{name} printed nothing"
    last = lines[-1].split()
    # `SUMMARY <name> PASS|FAIL <figures with a ratio>`: FAIL is allowed here (no timing assertions)
    assert last[:2] == ["SUMMARY", name] and last[2] in ("PASS", "FAIL"), lines[-1]
    assert "x" in lines[-1].split(" ", 3)[3]  # the summary carries a ratio

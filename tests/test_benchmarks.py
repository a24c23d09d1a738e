"""Every benchmark's ``--quick`` variant runs and ends with its one-line summary.

No timing assertions: the benchmarks print ratios measured side by side; this only proves they work.
The subprocesses run ``PARALLEL`` at a time (they mostly wait on Chroma, model loading and each other's
I/O). All of them at once on a 2-core machine made each ~15x slower than alone, enough for a 2,000-record
write to a Chroma server to pass the client's 30 s timeout. Each runs with ``OMP_NUM_THREADS=1``: the e5
engine's OpenMP threads spin-wait, and four processes each running one thread per core made
bench_multilingual ~8x slower than alone (33 s alone, past 240 s in CI).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
NAMES = ["bench_search", "bench_ingest", "bench_coldstart", "bench_memory", "bench_turn", "bench_multilingual",
         "bench_server", "bench_import", "bench_users", "bench_scale", "bench_spaces", "bench_rewrite",
         "bench_record_memory", "bench_ann", "bench_bm25", "bench_removal", "bench_pool", "bench_snapshot_load",
         "bench_snapshot_append", "bench_scope_read", "bench_e5_wait", "bench_e5_engine"]
TIMEOUT = 420  # seconds, for one benchmark from its own start
PARALLEL = 4
_ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _run(name: str) -> subprocess.CompletedProcess[str] | str:
    """``name --quick``, or what it printed before ``TIMEOUT`` passed."""
    try:
        return subprocess.run([sys.executable, str(BENCH / f"{name}.py"), "--quick"], capture_output=True,
                              text=True, cwd=BENCH.parent, timeout=TIMEOUT, env=_ENV)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else e.stderr or ""
        return f"{out[-2000:]}\n{err[-2000:]}"


@pytest.fixture(scope="module")
def quick_runs() -> Iterator[dict[str, Future[subprocess.CompletedProcess[str] | str]]]:
    with ThreadPoolExecutor(PARALLEL) as pool:
        runs = {name: pool.submit(_run, name) for name in NAMES}
        yield runs
        for run in runs.values():
            run.cancel()


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_quick_variant_ends_with_summary(
    quick_runs: dict[str, Future[subprocess.CompletedProcess[str] | str]], name: str,
) -> None:
    proc = quick_runs[name].result()
    if isinstance(proc, str):
        pytest.fail(f"{name} --quick did not finish in {TIMEOUT} s:\n{proc}")
    out, err = proc.stdout, proc.stderr
    assert proc.returncode == 0, f"{name} --quick failed:\n{out[-2000:]}\n{err[-3000:]}"
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines, f"{name} printed nothing"
    last = lines[-1].split()
    # `SUMMARY <name> PASS|FAIL <figures with a ratio>`: FAIL is allowed here (no timing assertions)
    assert last[:2] == ["SUMMARY", name] and last[2] in ("PASS", "FAIL"), lines[-1]
    assert "x" in lines[-1].split(" ", 3)[3]  # the summary carries a ratio

"""Measure the memory browser's paging on a large store (not a test; run by hand).

    .venv/bin/python tests/ui/bench_paging.py [N] [DIR] [--scan]

Builds (once) an embedded store of N records (default 100,000; random unit vectors, 50 sessions, tags),
then times first/middle/last pages with and without filters through ``Browser.page`` and compares with
``ChromaWorkspace.scan`` (which reads the whole scope per page).
"""

from __future__ import annotations

import logging
import os
import sys
import time

import numpy as np

from agently_vecmem.filters import Scope
from agently_vecmem.records import MemoryRecord
from agently_vecmem.testing import DeterministicEmbedder
from agently_vecmem.ui.store import Browser, RecordFilter
from agently_vecmem.workspace import ChromaWorkspace

logger = logging.getLogger("bench_paging")


def build(path: str, n: int) -> None:
    ws = ChromaWorkspace(path, embedder=DeterministicEmbedder())
    if ws.count() >= n:
        ws.close()
        return
    rng = np.random.default_rng(0)
    t0 = 1_600_000_000.0
    for start in range(0, n, 5_000):
        m = min(5_000, n - start)
        recs = []
        for i in range(start, start + m):
            sid = f"s{i % 50}"
            scope = "SESSION_MEMORY" if i % 3 else "GLOBAL_MEMORY"
            recs.append(MemoryRecord(
                memory_scope=scope, session_id=sid if scope == "SESSION_MEMORY" else None,
                summary=f"memory number {i} about topic {i % 97}", tags=[f"t{i % 7}"],
                extracted=bool(i % 5), created_at=t0 + i * 60, updated_at=t0 + i * 60,
            ))
        vecs = rng.normal(size=(m, 384)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        ws.put(recs, vectors=vecs)
    ws.close()


def timed(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1000


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith('--')]
    n = int(args[0]) if args else 100_000
    path = args[1] if len(args) > 1 else f"/tmp/vecmem-ui-bench-{n}"
    t = time.perf_counter()
    build(path, n)
    print(f"store: {path} ({n} records; build/open {time.perf_counter() - t:.1f}s)")
    ws = ChromaWorkspace(path, embedder=DeterministicEmbedder(), read_only=True)
    b = Browser(ws)
    cases = {
        "no filter": RecordFilter(),
        "scope=SESSION_MEMORY,session=s7": RecordFilter(scope="SESSION_MEMORY", session="s7"),
        "tag=t3,kind=raw": RecordFilter(tags=("t3",), extracted=False),
    }
    for name, flt in cases.items():
        total = b.count(flt)
        for label, off in (("first", 0), ("middle", total // 2), ("last", max(0, total - 50))):
            b.invalidate()
            cold = timed(lambda f=flt, o=off: b.page(f, offset=o, limit=50), repeat=1)
            warm = timed(lambda f=flt, o=off: b.page(f, offset=o, limit=50))
            print(f"{name:34s} total={total:6d} {label:6s} page of 50: {cold:7.1f} ms (count cached: {warm:6.1f} ms)")
    if "--scan" in sys.argv:  # slow: reads every record
        scan = timed(lambda: ws.scan(scope=Scope(None, None, "memory"), limit=50, offset=0), repeat=1)
        print(f"for comparison ChromaWorkspace.scan(limit=50) over all records: {scan:.1f} ms")
    ws.close()


if __name__ == "__main__":
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    main()

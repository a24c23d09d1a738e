"""Whole-process memory: RSS after ingesting 100k records and searching every scope once (so every
exact scope view is loaded) must stay <= 1 GB.

The records are generated batch by batch as they are written (mixed batches of every scope, like a real
workload), so the measured process holds what the Workspace holds, not the benchmark's own copy of the
whole dataset.

Usage: ``python benchmarks/bench_memory.py [--quick] [--n 100000] [--sessions 100]``
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402
import numpy as np  # noqa: E402

from agently_vecmem.workspace.chroma import ChromaWorkspace  # noqa: E402

LIMIT = 1 << 30
MB = 1 << 20


def ingest_streaming(ws: ChromaWorkspace, scopes: list, data: c.ClusteredData, n: int, rounds: int = 20) -> float:
    """Write ``n`` records spread evenly over ``scopes`` in ``rounds`` mixed batches, each generated just
    before its put; returns the seconds spent in ``put``."""
    sizes = [n // len(scopes) + (1 if i < n % len(scopes) else 0) for i in range(len(scopes))]
    starts = [sum(sizes[:i]) for i in range(len(scopes))]
    spent = 0.0
    for r in range(rounds):
        batch, vecs = [], []
        for si, scope in enumerate(scopes):
            lo, hi = sizes[si] * r // rounds, sizes[si] * (r + 1) // rounds
            batch += c.make_records(scope, hi - lo, starts[si] + lo)
            vecs.append(data.sample(si, hi - lo))
        t0 = time.perf_counter()
        ws.put(batch, vectors=np.concatenate(vecs))
        spent += time.perf_counter() - t0
    return spent


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=None)
    p.add_argument("--sessions", type=int, default=None)
    args = p.parse_args()
    n = args.n or (5_000 if args.quick else 100_000)
    sessions = args.sessions or (20 if args.quick else 100)
    print(f"== memory: {n:,} records over {sessions} session scopes + global; {c.load()}", flush=True)
    rss0 = c.rss_bytes()
    c.row("RSS at start (python + chromadb imported)", f"{rss0 / MB:,.0f} MB")
    with c.tmpdir("bench_memory_") as work:
        ws = ChromaWorkspace(work / "store", embedder=c.VectorsOnly())
        scopes = c.scope_list(sessions)
        data = c.ClusteredData(len(scopes), seed=args.seed)
        t = ingest_streaming(ws, scopes, data, n)
        gc.collect()
        rss_ingest = c.rss_bytes()
        c.row("RSS after ingest", f"{rss_ingest / MB:,.0f} MB", f"({t:.0f} s, {n / t:,.0f} records/s)")
        for si, scope in enumerate(scopes):
            ws.search(data.sample(si, 1)[0], scope=scope, k=10)
        gc.collect()
        rss = c.rss_bytes()
        cache = ws.cache_stats()
        c.row("RSS after searching every scope once", f"{rss / MB:,.0f} MB",
              f"({cache['scopes']} views, ~{cache['bytes'] / MB:.0f} MB of snapshots by their estimate)")
        c.row("peak RSS (VmHWM)", f"{c.peak_rss_bytes() / MB:,.0f} MB")
        ws.close()
    c.summary("bench_memory", rss <= LIMIT,
              f"RSS {rss / MB:,.0f} MB after {n:,} records + all {len(scopes)} scope views = "
              f"{rss / LIMIT:.2f}x the 1 GB limit (peak {c.peak_rss_bytes() / MB:,.0f} MB)")


if __name__ == "__main__":
    main()

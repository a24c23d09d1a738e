"""Whole-process memory: RSS after ingesting 100k records and searching every scope once (so every
exact scope view is loaded) must stay <= 1 GB.

Usage: ``python benchmarks/bench_memory.py [--quick] [--n 100000] [--sessions 100]``
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402

from agently_vecmem.workspace.chroma import ChromaWorkspace  # noqa: E402

LIMIT = 1 << 30
MB = 1 << 20


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
        scopes, records, vectors, data = c.build_dataset(n, sessions, args.seed)
        t = c.ingest(ws, records, vectors)
        del records, vectors  # the workload's own copies; keep only what the Workspace holds
        gc.collect()
        rss_ingest = c.rss_bytes()
        c.row("RSS after ingest", f"{rss_ingest / MB:,.0f} MB", f"({t:.0f} s, {n / t:,.0f} records/s)")
        for si, scope in enumerate(scopes):
            ws.search(data.sample(si, 1)[0], scope=scope, k=10)
        gc.collect()
        rss = c.rss_bytes()
        views = getattr(ws, "_views", {})  # private: only to report what the views hold
        view_bytes = sum(v.vectors.nbytes for v in views.values())
        c.row("RSS after searching every scope once", f"{rss / MB:,.0f} MB",
              f"({len(views)} views, {view_bytes / MB:.0f} MB of view vectors)")
        c.row("peak RSS (VmHWM)", f"{c.peak_rss_bytes() / MB:,.0f} MB")
        ws.close()
    c.summary("bench_memory", rss <= LIMIT,
              f"RSS {rss / MB:,.0f} MB after {n:,} records + all {len(scopes)} scope views = "
              f"{rss / LIMIT:.2f}x the 1 GB limit (peak {c.peak_rss_bytes() / MB:,.0f} MB)")


if __name__ == "__main__":
    main()

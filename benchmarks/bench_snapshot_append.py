"""Writes to a large scope loaded from its persisted snapshot (issue 21): rows copied into the worker's memory
on the first append (vector files holding exactly the scope's rows, as format 4 first wrote them) against rows
appended in place into the files' spare rows (mapped copy-on-write), in one run, side by side, at several sizes.

Per size, a snapshot of N GLOBAL records of the scale benchmarks' English-like corpus (``_scale_data.py``,
hash-embedder vectors, BM25 index, neighbours and the pool's sketch saved with it) is written twice: without
spare rows (``snapshots.MIN_SPARE_ROWS = SPARE_DIVISOR = 0``, "copied") and as this version writes it ("in
place"). Each variant runs in fresh subprocesses (``--repeat``, alternating), each doing what a worker does:
load the scope (``ChromaWorkspace._snapshot_view``: mapped, ``in_place=True``, the saved sketch adopted), answer
a query, then take ``--appends`` writes of one new record each (``ScopeView.with_records``, chained on the
newest snapshot, as the workspace applies its own writes and other processes'):

* **first append**: the first write's time (before: it copies every vector row and sketch code);
* **p50 next**: of the following writes;
* **own memory**: the process's ``RssAnon`` growth over the writes, and what the snapshot cache counts for the
  scope (``view_cache.view_bytes``: the scope stays cached within the default 1 GB budget, or not);
* **answers**: the top 10 of ``--queries`` queries after the writes, the same in both variants.

No Chroma, no embedding model. Usage:
``python benchmarks/bench_snapshot_append.py [--quick] [--sizes 100000,300000,1000000] [--repeat 2]``
"""

from __future__ import annotations

import gc
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402
import _scale_data as data  # noqa: E402
from bench_snapshot_load import SCOPE, _files, loaded_view, run_child, write_snapshot  # noqa: E402

from agently_vecmem.records import MemoryRecord  # noqa: E402
from agently_vecmem.search.candidates import retrieve_candidates  # noqa: E402
from agently_vecmem.workspace import snapshots  # noqa: E402
from agently_vecmem.workspace.view_cache import DEFAULT_CACHE_BYTES, view_bytes  # noqa: E402

VARIANTS = ("copied (no spare rows)", "in place (spare rows)")


def child(directory: str, n_appends: int, n_queries: int, seed: int) -> dict[str, Any]:
    """One fresh worker: load the scope, one query, ``n_appends`` writes of one record, ``n_queries`` queries."""
    corpus = data.Corpus(seed=seed)
    texts = corpus.queries(n_queries + 1)
    qvecs = corpus.embedder.embed_documents(texts)
    docs, vecs = corpus.batch(9_000_000, n_appends)  # a batch index the snapshot's records never used
    loaded = _files(directory).load(SCOPE.key)
    assert loaded is not None
    n = len(loaded.ids)
    view = loaded_view(loaded, loaded.records, loaded.documents, in_place=True)
    del loaded
    retrieve_candidates(view, texts[0], qvecs[0], k=10)
    gc.collect()
    before = c.rss_parts()["RssAnon"]
    lat = []
    for j, (doc, vec) in enumerate(zip(docs, vecs, strict=True)):
        record = MemoryRecord(id=f"new{j:06d}", memory_scope="GLOBAL_MEMORY", summary=doc,
                              created_at=data.T0 + n + j, updated_at=data.T0 + n + j)
        t = time.perf_counter()
        new = view.with_records([record], vec[None, :], [record.search_text()], 2 + j)
        lat.append((time.perf_counter() - t) * 1e3)
        assert new is not None
        view = new
    gc.collect()
    own = c.rss_parts()["RssAnon"] - before
    top = [[h.record.id for h in retrieve_candidates(view, text, qvec, k=10)]
           for text, qvec in zip(texts[1:], qvecs[1:], strict=True)]
    return {"first_ms": lat[0], "next_ms": c.p50(lat[1:]), "own_mb": own / 1e6, "counted_mb": view_bytes(view) / 1e6,
            "records": len(view), "top": top}


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        directory, n_appends, n_queries, seed = sys.argv[2:6]
        print(json.dumps(child(directory, int(n_appends), int(n_queries), int(seed))))
        return
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--appends", type=int, default=201)
    p.add_argument("--queries", type=int, default=20)
    args, sizes = c.sized_args(p, "100000,300000,1000000", "3000", 2)
    print(f"bench_snapshot_append ({c.load()}; default snapshot cache budget {DEFAULT_CACHE_BYTES >> 20} MB)",
          flush=True)
    spare = (snapshots.MIN_SPARE_ROWS, snapshots.SPARE_DIVISOR)
    ratios, same, kept = [], True, True
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="bench-snapshot-append-") as tmp:
            dirs = {v: Path(tmp) / str(i) for i, v in enumerate(VARIANTS)}
            t = time.perf_counter()
            for variant, directory in dirs.items():
                snapshots.MIN_SPARE_ROWS, snapshots.SPARE_DIVISOR = (0, 0) if variant == VARIANTS[0] else spare
                write_snapshot(str(directory), n, args.seed)
            snapshots.MIN_SPARE_ROWS, snapshots.SPARE_DIVISOR = spare
            disk = {v: c.disk_bytes(d) / 1e6 for v, d in dirs.items()}
            print(f"{n:,} records: both snapshots written in {time.perf_counter() - t:.1f} s; on disk "
                  + ", ".join(f"{v.split(' (')[0]} {mb:,.0f} MB" for v, mb in disk.items()), flush=True)
            runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
            for _ in range(args.repeat):
                for variant, directory in dirs.items():
                    runs[variant].append(run_child(__file__, directory, args.appends, args.queries, args.seed))
        got = {v: {k: c.p50([r[k] for r in rs]) for k in ("first_ms", "next_ms", "own_mb", "counted_mb")}
               for v, rs in runs.items()}
        same &= all(r["top"] == runs[VARIANTS[0]][0]["top"] for rs in runs.values() for r in rs)
        for v in VARIANTS:
            g = got[v]
            fits = g["counted_mb"] * 1e6 <= DEFAULT_CACHE_BYTES
            c.row(f"  {v}", f"first append {g['first_ms']:8.1f} ms  p50 next {g['next_ms']:5.2f} ms",
                  f"own memory +{g['own_mb']:6,.0f} MB, counted {g['counted_mb']:6,.0f} MB "
                  f"({'fits' if fits else 'over'} the budget)")
        old, new = got[VARIANTS[0]], got[VARIANTS[1]]
        kept &= new["counted_mb"] * 1e6 <= DEFAULT_CACHE_BYTES
        ratios.append(new["own_mb"] / max(old["own_mb"], 1e-6))
        c.row("  in place / copied", f"{new['first_ms'] / old['first_ms']:.3f}x first append",
              f"{ratios[-1]:.2f}x own memory")
    c.summary("bench_snapshot_append", same and kept and max(ratios) < 0.5,
              f"own memory after {args.appends} appends to a loaded scope: "
              f"{', '.join(f'{r:.2f}x' for r in ratios)} of copying its rows at {', '.join(f'{n:,}' for n in sizes)} "
              f"records; the same top-10 {'in every run' if same else 'NOT in every run'}; the scope "
              f"{'stays' if kept else 'does NOT stay'} within the default cache budget")


if __name__ == "__main__":
    main()

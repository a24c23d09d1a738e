"""A fresh worker's first read of a big scope from Chroma (no snapshot yet), by the two ways a workspace reads
one (issue 21), embedded, at several sizes, in one run:

* ``listed``: GLOBAL records written in puts of 5,000 (as ``bench_scale`` builds its stores): the scope's
  directory lists its ids, the records are read by id in chunks;
* ``filtered``: the same records written in 600 puts, as a store grows by many small writes: its directory
  (one entry per put) is longer than :data:`agently_vecmem.workspace.directory.MAX_ENTRIES`, so the scope is
  read with its ``where`` filter: a first read limited to a batch, then the ids, then the rest by id;
* ``filtered, unlimited first read``: the same, with the first filtered read unlimited as it was before this
  release (kept here as the comparator): Chroma fails it past SQLite's variable limit (~32k records) only
  after materializing the rows.

Each read runs in a fresh process with snapshots off (``ws.view(Scope.global_memory())``), after the store is
opened and counted (Chroma loads the collection's index then, outside the figure): seconds, and the peak RSS
above the RSS before the read (``VmHWM``, reset through ``/proc/self/clear_refs``; Linux).

Usage: ``python benchmarks/bench_scope_read.py [--quick] [--sizes 10000,50000,100000] [--store-dir DIR]``
(stores are built once per size and layout and kept in ``--store-dir``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402
import _scale_data as data  # noqa: E402
import numpy as np  # noqa: E402

from agently_vecmem.records import MemoryRecord  # noqa: E402

MB = 1 << 20
FILTERED_PUTS = 600  # more directory entries than MAX_ENTRIES (512)
READS = {"listed": ("listed", "limited"), "filtered": ("filtered", "limited"),
         "filtered, unlimited first read": ("filtered", "unlimited")}


def _unlimited_chunks_where(self: Any, what: str, where: Any, include: list[str]) -> Iterator[dict[str, Any]]:
    """``CollectionIO.chunks_where`` before this release: the whole scope asked in one call first."""
    from agently_vecmem.workspace.chroma_io import too_many_variables

    try:
        whole = self.calls(what, self.collection.get, where=where, include=include)
    except Exception as e:  # noqa: BLE001 - as the replaced code did, through the workspace's error type
        if not too_many_variables(e):
            raise
    else:
        yield whole
        return
    ids = self.calls(what, self.collection.get, where=where, include=[])["ids"]
    yield from self.chunks_by_ids(what, ids, include)


def child_read(cfg: dict[str, Any]) -> dict[str, Any]:
    from agently_vecmem import Scope
    from agently_vecmem.workspace import ChromaWorkspace, chroma_io

    original = chroma_io.CollectionIO.chunks_where if cfg["first_read"] == "limited" else _unlimited_chunks_where
    filtered = []

    def counted(self: Any, *args: Any, **kw: Any) -> Iterator[dict[str, Any]]:
        filtered.append(1)
        yield from original(self, *args, **kw)

    chroma_io.CollectionIO.chunks_where = counted  # type: ignore[method-assign]
    ws = ChromaWorkspace(cfg["path"], embedder=data.DeterministicEmbedder(dim=data.DIM), snapshots=False)
    ws.count()
    before = c.rss_bytes()
    with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
        fh.write("5")  # VmHWM := VmRSS
    t = time.perf_counter()
    view = ws.view(Scope.global_memory())
    seconds = time.perf_counter() - t
    out = {"seconds": seconds, "records": len(view), "peak_above_mb": (c.peak_rss_bytes() - before) / MB,
           "rss_after_mb": c.rss_bytes() / MB, "filtered_reads": len(filtered)}
    ws.close()
    return out


def run_child(cfg: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(cfg)], capture_output=True, text=True,
                          check=False)
    return c.child_result(proc, str(cfg))


def _in_puts(corpus: data.Corpus, n: int, puts: int) -> Iterator[tuple[list[MemoryRecord], np.ndarray]]:
    """``data.global_records`` regrouped into ``puts`` puts."""
    records: list[MemoryRecord] = []
    vectors: list[np.ndarray] = []
    for batch, vecs in data.global_records(corpus, n):
        records += batch
        vectors.append(vecs)
    every = np.concatenate(vectors)
    step = -(-n // puts)
    for start in range(0, n, step):
        yield records[start:start + step], every[start:start + step]


def store(root: Path, layout: str, n: int, seed: int) -> Path:
    def build(d: Path) -> None:
        from agently_vecmem.workspace import ChromaWorkspace

        corpus = data.Corpus(seed)
        batches = data.global_records(corpus, n) if layout == "listed" else _in_puts(corpus, n, FILTERED_PUTS)
        with ChromaWorkspace(d / "chroma", embedder=data.DeterministicEmbedder(dim=data.DIM)) as ws:
            data.fill(ws, batches)

    t = time.perf_counter()
    path, reused = data.cached_store(root, f"scope-read-{layout}-{n}", build)
    print(f"  store: {n:,} GLOBAL records ({layout}), {'reused' if reused else 'built'} in "
          f"{time.perf_counter() - t:.0f} s", flush=True)
    return path / "chroma"


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--store-dir", type=Path, default=None, help="keep the built stores here (reused by later runs)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args, sizes = c.sized_args(p, "10000,50000,100000", "6000", 1)
    if args.child:
        print("RESULT " + json.dumps(child_read(json.loads(args.child))), flush=True)
        return
    with tempfile.TemporaryDirectory(prefix="bench-scope-read-") as scratch:
        root = args.store_dir or Path(scratch)
        results: dict[int, dict[str, dict[str, Any]]] = {}
        print(f"bench_scope_read: a fresh process's first read of the GLOBAL scope, embedded, snapshots off; "
              f"{c.load()}")
        for n in sizes:
            paths = {layout: store(root, layout, n, args.seed) for layout in ("listed", "filtered")}
            results[n] = {}
            for name, (layout, first_read) in READS.items():
                r = results[n][name] = run_child({"path": str(paths[layout]), "first_read": first_read})
                assert r["records"] == n, f"{name} read {r['records']} of {n} records"
                assert (r["filtered_reads"] > 0) == (layout == "filtered"), f"{name}: not read the way named"
                c.row(f"{n:>7,} {name}", f"{r['seconds']:7.2f} s", f"peak +{r['peak_above_mb']:6.0f} MB",
                      f"RSS after {r['rss_after_mb']:6.0f} MB", width=44)
    top = results[max(sizes)]
    listed, new, old = (top[name] for name in READS)
    ok = new["peak_above_mb"] <= 1.5 * listed["peak_above_mb"] and new["seconds"] <= 1.5 * listed["seconds"]
    c.summary("bench_scope_read", ok,
              f"{max(sizes):,} records: filtered read {new['seconds']:.2f} s, peak +{new['peak_above_mb']:.0f} MB "
              f"(listed {listed['seconds']:.2f} s, +{listed['peak_above_mb']:.0f} MB; unlimited first read "
              f"{old['seconds']:.2f} s, +{old['peak_above_mb']:.0f} MB); target: within 1.5x of the listed read")


if __name__ == "__main__":
    main()

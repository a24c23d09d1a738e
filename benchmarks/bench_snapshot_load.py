"""A fresh worker's first answers over a large scope loaded from its persisted snapshot (issue 21): the records
decoded at load as before (every record unpickled into an object, the pool's sketch built by the first pooled
query) against this version (records and documents memory-mapped and decoded when read, the sketch saved with
the snapshot and mapped), in one run, side by side, at several sizes.

Per size, one snapshot of N GLOBAL records of the scale benchmarks' English-like corpus (``_scale_data.py``,
hash-embedder vectors, BM25 index and neighbours saved with it, and the sketch from 200,000 records, the
pool's threshold) is written once; then each variant runs in fresh subprocesses (``--repeat``, alternating),
each doing what a worker's first read of the scope does (``ChromaWorkspace._snapshot_view``):

* **load**: ``SnapshotFiles.load`` + the ``ScopeView`` (+ decoding every record and document, before);
* **first query**: the first ``retrieve_candidates(k=10)`` with the default parameters (the pool from 200,000
  records: before, it builds the sketch);
* **p50 next / warm**: of the next ``--queries`` queries, and of ``--queries`` more after 200 others (the
  first touch of a mapped page is a page fault: a fresh worker's early queries pay for the vector rows they
  read, a warm worker's do not);
* **RSS**: the process's own memory (``RssAnon``) after the queries, beside the interpreter and imports
  measured before the load, and the mapped file pages it touched (``RssFile``: the OS page cache, shared by
  every worker of the machine).
* **record decode**: what decoding one of the snapshot's records costs (2,000 records spread over the file, in
  the mapped worker): validated as a read from Chroma is (``MemoryRecord.from_chroma``), and as the snapshot's
  records are decoded (``MemoryRecord.from_trusted``: the file is the library's own, checked by its digest);
  a pooled query decodes its candidates, a few dozen;
* **top-10 shared**: the share of the queries' top-10 the two variants both return (from 200,000 records the
  mapped variant's pool scores the sketch's half-width rows, the other the full rows: near-ties may fall the
  other way); each variant's answers are the same in every run.

The files are in the page cache in both variants (just written): a cold disk adds its read time to both.
No Chroma, no embedding model. Usage:
``python benchmarks/bench_snapshot_load.py [--quick] [--sizes 100000,300000,1000000] [--repeat 2]``
"""

from __future__ import annotations

import gc
import json
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402
import _scale_data as data  # noqa: E402
from bench_removal import snapshot  # noqa: E402

from agently_vecmem.filters import Scope  # noqa: E402
from agently_vecmem.records import MemoryRecord  # noqa: E402
from agently_vecmem.search.candidates import retrieve_candidates, warm_view  # noqa: E402
from agently_vecmem.search.encoded import EncodedList  # noqa: E402
from agently_vecmem.search.view import ScopeView  # noqa: E402
from agently_vecmem.workspace.snapshots import Loaded, SnapshotFiles  # noqa: E402

SCOPE = Scope.global_memory()
VARIANTS = ("decoded at load", "mapped, decoded when read")
#: Queries between the early and the warm ones: a worker that has answered a few hundred queries has the pages
#: of the mapped files its queries read in its page tables (the first touch of a page is a page fault).
WARMUP = 200


def _files(directory: str) -> SnapshotFiles:
    return SnapshotFiles(directory, {"collection": "bench", "model": "hash", "dim": data.DIM})


def write_snapshot(directory: str, n: int, seed: int) -> float:
    """Build a warm snapshot of ``n`` records and persist it; returns the file size in MB."""
    view = snapshot(data.Corpus(seed=seed), n)
    warm_view(view)  # BM25, neighbours, and the sketch of a scope the pool serves
    records, documents = view.columns()
    assert _files(directory).save(SCOPE.key, records, documents, view.rows(slice(None)), view.derived,
                                  {"kind": "seq"}, ids=view.ids, sketch=view.built_sketch())
    return c.disk_bytes(directory) / 1e6


def child(directory: str, variant: str, n_queries: int, seed: int) -> dict[str, Any]:
    """One fresh worker: load the scope, answer its first query, ``n_queries`` more (early), :data:`WARMUP`
    more and ``n_queries`` more (warm)."""
    corpus = data.Corpus(seed=seed)
    texts = corpus.queries(2 * n_queries + WARMUP + 1)
    qvecs = corpus.embedder.embed_documents(texts)
    gc.collect()
    before = c.rss_parts()
    t = time.perf_counter()
    loaded = _files(directory).load(SCOPE.key)
    assert loaded is not None
    records: Any = loaded.records
    documents: Any = loaded.documents
    if variant == VARIANTS[0]:
        records, documents = tuple(records), tuple(documents)  # every record an object, as before
    view = loaded_view(loaded, records, documents, sketch=variant == VARIANTS[1])
    load_s = time.perf_counter() - t
    encoded = loaded.records
    del loaded, records, documents
    t = time.perf_counter()
    first = retrieve_candidates(view, texts[0], qvecs[0], k=10)
    first_s = time.perf_counter() - t
    lat, top = [], [[h.record.id for h in first]]
    for text, qvec in zip(texts[1:], qvecs[1:], strict=True):
        t = time.perf_counter()
        hits = retrieve_candidates(view, text, qvec, k=10)
        lat.append((time.perf_counter() - t) * 1e3)
        top.append([h.record.id for h in hits])
    gc.collect()
    after = c.rss_parts()
    return {"load_s": load_s, "first_s": first_s, "early_ms": c.p50(lat[:n_queries]),
            "warm_ms": c.p50(lat[-n_queries:]), "top": top,
            "anon_mb": (after["RssAnon"] - before["RssAnon"]) / 1e6, "file_mb": after["RssFile"] / 1e6,
            "total_anon_mb": after["RssAnon"] / 1e6, **(decode_costs(encoded) if variant == VARIANTS[1] else {})}


def decode_costs(records: EncodedList[MemoryRecord], n: int = 2_000) -> dict[str, float]:
    """µs per record to decode ``n`` of the snapshot's records (spread over the file), validated as a read
    from Chroma is and as the snapshot's records are (the same record: checked on the first)."""
    raws = [records.raw(i) for i in sorted({round(i * (len(records) - 1) / max(n - 1, 1)) for i in range(n)})]
    ways = {"validated_us": lambda raw: MemoryRecord.from_chroma(*pickle.loads(raw)),  # noqa: S301 - our own file
            "trusted_us": lambda raw: MemoryRecord.from_trusted(*pickle.loads(raw))}  # noqa: S301
    assert ways["validated_us"](raws[0]) == ways["trusted_us"](raws[0])
    out = {}
    for name, decode in ways.items():
        t = time.perf_counter()
        for raw in raws:
            decode(raw)
        out[name] = (time.perf_counter() - t) / len(raws) * 1e6
    return out


def loaded_view(loaded: Loaded, records: Any, documents: Any, *, sketch: bool = True,
                in_place: bool = False) -> ScopeView:
    """The view a worker builds from a loaded snapshot (``ChromaWorkspace._snapshot_view``): its derived
    structures, and its saved sketch adopted when ``sketch``."""
    view = ScopeView(SCOPE, records, loaded.vectors, documents, 1, ids=loaded.ids, in_place=in_place)
    view.derived.update(loaded.derived)
    if sketch and loaded.sketch is not None:
        view.adopt_sketch(loaded.sketch)
    return view


def run_child(script: str, *args: object) -> dict[str, Any]:
    """``python script --child *args`` in a fresh process: the JSON its last line prints."""
    out = subprocess.run([sys.executable, script, "--child", *map(str, args)], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"the worker {args[1:]} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        directory, variant, n_queries, seed = sys.argv[2:6]
        print(json.dumps(child(directory, variant, int(n_queries), int(seed))))
        return
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--queries", type=int, default=30)
    args, sizes = c.sized_args(p, "100000,300000,1000000", "3000", 2)
    print(f"bench_snapshot_load ({c.load()})", flush=True)
    ratios, agreements, stable = [], [], True
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="bench-snapshot-load-") as tmp:
            t = time.perf_counter()
            size = write_snapshot(tmp, n, args.seed)
            print(f"{n:,} records: snapshot {size:,.0f} MB written in {time.perf_counter() - t:.1f} s", flush=True)
            runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
            for _ in range(args.repeat):
                for variant in VARIANTS:
                    runs[variant].append(run_child(__file__, tmp, variant, args.queries, args.seed))
        got = {v: {k: c.p50([r[k] for r in rs]) for k in ("load_s", "first_s", "early_ms", "warm_ms", "anon_mb",
                                                          "file_mb", "total_anon_mb")} for v, rs in runs.items()}
        stable &= all(r["top"] == rs[0]["top"] for rs in runs.values() for r in rs)
        agreements.append(_shared(runs[VARIANTS[0]][0]["top"], runs[VARIANTS[1]][0]["top"]))
        for v in VARIANTS:
            g = got[v]
            c.row(f"  {v}", f"load {g['load_s']:6.2f} s  first query {g['first_s'] * 1e3:6.0f} ms  "
                  f"p50 next {g['early_ms']:5.1f} ms, warm {g['warm_ms']:5.1f} ms",
                  f"RSS +{g['anon_mb']:6,.0f} MB own ({g['total_anon_mb']:6,.0f} MB in all), "
                  f"{g['file_mb']:6,.0f} MB mapped")
        cost = {k: c.p50([r[k] for r in runs[VARIANTS[1]]]) for k in ("validated_us", "trusted_us")}
        c.row("  record decode (mapped)", f"validated {cost['validated_us']:5.1f} µs, as stored {cost['trusted_us']:5.1f} "
              f"µs per record ({cost['validated_us'] / cost['trusted_us']:.1f}x)")
        old, new = got[VARIANTS[0]], got[VARIANTS[1]]
        ready = (new["load_s"] + new["first_s"]) / (old["load_s"] + old["first_s"])
        ratios.append(ready)
        c.row("  mapped / decoded", f"{ready:.2f}x load + first query", f"{new['anon_mb'] / old['anon_mb']:.2f}x own "
              f"memory", f"{new['early_ms'] / old['early_ms']:.2f}x / {new['warm_ms'] / old['warm_ms']:.2f}x p50 "
              "next / warm", f"top-10 shared {agreements[-1]:.3f}")
    c.summary("bench_snapshot_load", stable and min(agreements) >= 0.99 and max(ratios) < 1.0,
              f"a fresh worker's load + first query over a snapshot: {', '.join(f'{r:.2f}x' for r in ratios)} of "
              f"decoding it at load at {', '.join(f'{n:,}' for n in sizes)} records; each variant's top-10 "
              f"the same {'in every run' if stable else 'NOT in every run'}, shared between them "
              f"{', '.join(f'{a:.3f}' for a in agreements)}")


def _shared(a: list[list[str]], b: list[list[str]]) -> float:
    """The share of the queries' top-10 the two variants have in common (from ``pool_min_records`` records the
    mapped variant's pool scores the sketch's half-width rows, the decoded one the full rows it builds its
    sketch from: near-ties may fall the other way)."""
    return sum(len(set(x) & set(y)) for x, y in zip(a, b, strict=True)) / max(sum(len(x) for x in a), 1)


if __name__ == "__main__":
    main()

"""Large scopes scored through a pool of candidates (issue 21): what a warm hybrid retrieval costs over a scope
of 100k-1M records exactly and through the pool (``RetrievalParams.pool_min_records``), and what the pool
loses against the exact search, in one run, side by side.

Two corpora, each an in-memory ``ScopeView`` of GLOBAL records (no Chroma: a warm worker's snapshot):

* **scale** (``--sizes``, default 100,000 and 1,000,000): ``_scale_data``'s English-like documents (10-30
  words) with hash-embedder vectors, and its question-like queries (5-9 words). Per size: p50 / p95 ms of
  ``retrieve_candidates(k=10)`` exactly (``pool_min_records=0``) and through the pool, the pool's first
  query (it builds the rows' sketch), and the share of the exact top-10 the pool returns in its top-10; and
  the pool as a scope loaded from its snapshot scores it (from the sketch's half-width rows, not the
  full rows): its p50, its share of the exact top-10, and how often its top-10 is the full rows' pool's;
  and a write's near-duplicate check (``ScopeView.similar`` at the default 0.82 cosine) over every row and
  through the pool, with how often both find the same records.
* **probe** (``--probe``, default 100,000 filler; 0 skips it): the bilingual probe's 120 English facts among
  N English filler sentences (``agently_vecmem/eval/filler.py``), embedded with the default embedder (ONNX
  MiniLM: real sentence vectors), the 104 non-date questions: gold-fact R@1 / R@3 / R@10 exactly and through
  the pool, and the share of the exact top-10 the pool returns.

Usage: ``python benchmarks/bench_pool.py [--quick] [--sizes 100000,1000000] [--probe 100000] [--queries 40]``
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402
import _scale_data as data  # noqa: E402
import numpy as np  # noqa: E402
from bench_removal import snapshot  # noqa: E402

from agently_vecmem.embedders import default_embedder  # noqa: E402
from agently_vecmem.eval.filler import filler_records, is_filler  # noqa: E402
from agently_vecmem.eval.metrics import recall_at_k  # noqa: E402
from agently_vecmem.eval.probe import PROBE_DATA_PATH, SEPARATE_KINDS, load_probe, probe_records  # noqa: E402
from agently_vecmem.filters import Scope  # noqa: E402
from agently_vecmem.memory.config import Consolidate  # noqa: E402
from agently_vecmem.search.candidates import retrieve_candidates  # noqa: E402
from agently_vecmem.search.params import RetrievalParams  # noqa: E402
from agently_vecmem.search.sketch import Sketch, to_bfloat16  # noqa: E402
from agently_vecmem.search.view import ScopeView  # noqa: E402

EXACT = RetrievalParams(pool_min_records=0)
POOL = RetrievalParams(pool_min_records=1)
KS = (1, 3, 10)
NEAR_DUPLICATE = Consolidate().similarity_threshold


def half_view(view: ScopeView) -> ScopeView:
    """The same scope as a worker holds it after loading its snapshot: the same rows, derived structures and
    sketch, the sketch with the rows at half width (bfloat16: what the pool's scoring then reads)."""
    built = view.built_sketch()
    assert built is not None
    other = ScopeView(view.scope, view.records, view.vectors, view.documents, view.version, ids=view.ids)
    other.derived.update(view.derived)
    other.adopt_sketch(Sketch.restored(built.basis, built.sample, built.codes_of(slice(None)),
                                       half=to_bfloat16(view.vectors)))
    return other


def _overlap(a: list[list[str]], b: list[list[str]]) -> float:
    return float(np.mean([len(set(x) & set(y)) / max(len(x), 1) for x, y in zip(a, b, strict=True)]))


def compare(view: ScopeView, queries: list[tuple[str, np.ndarray]]) -> dict[str, Any]:
    """The paths over ``queries``: latencies (ms), each query's top-10 ids, and the pools' overlaps."""
    retrieve_candidates(view, *queries[0], k=10, params=EXACT)  # builds BM25 and neighbours (a warm worker has them)
    t = time.perf_counter()
    retrieve_candidates(view, *queries[0], k=10, params=POOL)  # builds the sketch
    first = (time.perf_counter() - t) * 1e3
    half = half_view(view)
    paths = (("exact", view, EXACT), ("pool", view, POOL), ("half", half, POOL))
    lat: dict[str, list[float]] = {name: [] for name, _, _ in paths}
    top: dict[str, list[list[str]]] = {name: [] for name, _, _ in paths}
    for text, qvec in queries:
        for name, on, params in paths:
            t = time.perf_counter()
            got = retrieve_candidates(on, text, qvec, k=10, params=params)
            lat[name].append((time.perf_counter() - t) * 1e3)
            top[name].append([h.record.id for h in got])
    near: dict[str, list[float]] = {"every row": [], "pool": []}
    same_near = 0
    for _, qvec in queries:
        found = {}
        for name, least in (("every row", 0), ("pool", POOL.pool_min_records)):
            t = time.perf_counter()
            found[name] = view.similar(qvec, NEAR_DUPLICATE, pool_min_records=least)[0].tolist()
            near[name].append((time.perf_counter() - t) * 1e3)
        same_near += found["every row"] == found["pool"]
    return {"first_pool_ms": first, "top": top, "overlap": _overlap(top["exact"], top["pool"]),
            "near_ms": {name: c.p50(v) for name, v in near.items()}, "near_same": same_near / len(queries),
            "half_overlap": _overlap(top["exact"], top["half"]),
            "half_same": float(np.mean([a == b for a, b in zip(top["pool"], top["half"], strict=True)])),
            **{f"{name}_ms": (c.p50(v), c.p95(v)) for name, v in lat.items()}}


def print_latency(got: dict[str, Any]) -> None:
    for name, label in (("exact", "exact"), ("pool", "pool"), ("half", "pool, half-width rows")):
        p50, p95 = got[f"{name}_ms"]
        c.row(f"  {label} hybrid, p50 / p95", f"{p50:8.1f} ms  {p95:8.1f} ms")
    c.row("  exact / pool p50", f"{got['exact_ms'][0] / got['pool_ms'][0]:8.1f}x",
          f"(pool's first query, building the sketch: {got['first_pool_ms']:.0f} ms)")
    c.row("  pool top-10 holds of the exact top-10", f"{got['overlap']:.3f}",
          f"(half-width rows: {got['half_overlap']:.3f}; the same top-10, in order, as the full rows' pool "
          f"for {got['half_same']:.3f} of the queries)")
    c.row("  near-duplicate check p50: every row / pool", f"{got['near_ms']['every row']:8.1f} ms  "
          f"{got['near_ms']['pool']:8.1f} ms", f"(the same records found for {got['near_same']:.3f} of the queries)")


def probe_view(n: int, seed: int) -> tuple[ScopeView, list[tuple[str, np.ndarray]], list[str], dict[str, str | None]]:
    """The probe's English facts among ``n`` filler sentences, embedded, and its questions."""
    probe = load_probe(PROBE_DATA_PATH)
    questions = [i for i in probe.items if i.kind not in SEPARATE_KINDS]
    facts = probe_records(probe.items, "en")
    records = facts + filler_records("en", n, seed, facts=[i.fact["en"] for i in probe.items])
    embedder = default_embedder()
    documents = [r.search_text() for r in records]
    vectors = embedder.embed_documents(documents)
    texts = [q.question["en"] for q in questions]
    view = ScopeView(Scope.global_memory(), tuple(records), vectors, tuple(documents))
    gold = {r.id: None if is_filler(r) else r.provenance.model_dump()["probe_id"] for r in records}
    return view, list(zip(texts, embedder.embed_documents(texts), strict=True)), [q.id for q in questions], gold


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--probe", type=int, default=None, help="filler sentences among the probe's facts (0: skip)")
    p.add_argument("--queries", type=int, default=40, help="scale-corpus queries per size")
    args, sizes = c.sized_args(p, "100000,1000000", "5000,20000", 1)
    probe_n = args.probe if args.probe is not None else (2000 if args.quick else 100_000)
    print(f"bench_pool ({c.load()}): pool_size {POOL.pool_size}, k=10", flush=True)
    corpus = data.Corpus(args.seed)
    texts = corpus.queries(args.queries)
    queries = list(zip(texts, corpus.embedder.embed_documents(texts), strict=True))
    worst = 1.0
    speedups = []
    for n in sizes:
        got = compare(snapshot(corpus, n), queries)
        print(f"scale corpus, {n:,} records, {len(queries)} queries")
        print_latency(got)
        worst = min(worst, got["overlap"], got["half_overlap"])
        speedups.append(f"{n:,}: {got['exact_ms'][0]:.1f} -> {got['pool_ms'][0]:.1f} ms")
    recall_text = ""
    if probe_n:
        t = time.perf_counter()
        view, pairs, gold_ids, gold = probe_view(probe_n, args.seed)
        print(f"probe, {len(view):,} records (120 English facts + {probe_n:,} filler, embedded in "
              f"{time.perf_counter() - t:.0f} s), {len(pairs)} questions")
        got = compare(view, pairs)
        print_latency(got)
        worst = min(worst, got["overlap"], got["half_overlap"])
        recalls = {}
        for name in ("exact", "pool", "half"):
            ranked = [[gold[rid] for rid in ids] for ids in got["top"][name]]
            recalls[name] = [float(np.mean([recall_at_k(r, [g], k) for r, g in zip(ranked, gold_ids, strict=True)]))
                             for k in KS]
            c.row(f"  {name:5} hybrid, gold R@1 / R@3 / R@10", " / ".join(f"{r:.3f}" for r in recalls[name]))
        recall_text = (f"; probe {len(view):,}: R@1 exact {recalls['exact'][0]:.3f}, pool {recalls['pool'][0]:.3f}, "
                       f"half-width rows {recalls['half'][0]:.3f}")
    c.summary("bench_pool", worst >= 0.9, f"warm hybrid p50 {'; '.join(speedups)}; the pool holds at least "
              f"{worst:.3f} of the exact top-10{recall_text}")


if __name__ == "__main__":
    main()

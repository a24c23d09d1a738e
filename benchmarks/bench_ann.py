"""Large scopes through Chroma's own ANN index (issue 21, direction (b)), measured before it is built: what a
dense candidate pool from Chroma's HNSW costs and what hybrid retrieval over that pool loses against the exact
search over the whole scope (the snapshot path every scope takes today).

The store: the bilingual probe's 120 English facts among N English filler sentences (the growth probe's
generator, ``agently_vecmem/eval/filler.py``), all GLOBAL, plus one small session scope of 200 records, in one
embedded Chroma collection written by ``ChromaWorkspace`` with the default embedder (ONNX MiniLM) and no extra
vector space (Chroma indexes the primary space only: a named space such as ``e5`` is stored as metadata, so
this path has no dense Chinese candidates). The 104 non-date questions, in one run, side by side:

* **Chroma query latency** (p50, ids + metadatas + documents + distances, what a pool path fetches):
  unfiltered top-10 and top-300; top-300 with the GLOBAL scope's ``where`` (the filter matches ~all records);
  top-10 with the small session's ``where``.
* **ANN recall**: the share of the exact dense top-10 (numpy over the scope's snapshot) that Chroma's HNSW
  returns in its top-10 (unfiltered, the session's records dropped afterwards: post-filtering).
* **Hybrid over an ANN pool** of N = 100 / 300 / 1,000 (the unfiltered top-N, GLOBAL records only): gold-fact
  R@1 / R@3 / R@10 of ``retrieve_candidates(method="hybrid")`` over a snapshot of the pool's records (its
  lexical statistics then come from the pool, as they would without a whole-scope index), beside the exact
  hybrid over the whole scope, and the share of the exact hybrid top-10 the pool holds.

No target: the figures decide the design (``docs/deploying.md``, "Capacity planning"). Storing the filler
takes most of the run (embedding and writing, ~4.5 s per 1,000 sentences on 2 cores: ~8 min at 100k).

Usage: ``python benchmarks/bench_ann.py [--quick] [--sizes 10000,100000] [--filtered-queries 20]``
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402
import numpy as np  # noqa: E402

from agently_vecmem.embedders import default_embedder  # noqa: E402
from agently_vecmem.eval.filler import filler_records, is_filler  # noqa: E402
from agently_vecmem.eval.metrics import recall_at_k  # noqa: E402
from agently_vecmem.eval.probe import FILLER_BATCH, PROBE_DATA_PATH, SEPARATE_KINDS, load_probe, probe_records  # noqa: E402
from agently_vecmem.filters import Scope  # noqa: E402
from agently_vecmem.search.candidates import retrieve_candidates  # noqa: E402
from agently_vecmem.search.view import ScopeView  # noqa: E402
from agently_vecmem.workspace.chroma import ChromaWorkspace  # noqa: E402

GLOBAL = Scope.global_memory()
SESSION = Scope.session_memory("bench-ann-small-session")
SMALL_SESSION = 200
POOLS = (100, 300, 1000)
KS = (1, 3, 10)
INCLUDE = ["metadatas", "documents", "distances"]


def build(ws: ChromaWorkspace, probe: Any, n: int, seed: int) -> None:
    """The probe's English facts, ``n`` filler sentences (GLOBAL) and the small session scope."""
    facts = [i.fact["en"] for i in probe.items]
    ws.put(probe_records(probe.items, "en"))
    filler = filler_records("en", n + SMALL_SESSION, seed, facts=facts)
    for start in range(0, n, FILLER_BATCH):
        ws.put(filler[start:min(start + FILLER_BATCH, n)])
    ws.put([r.model_copy(update={"memory_scope": "SESSION_MEMORY", "kind": "session_memory", "session_id": SESSION.session_id})
            for r in filler[n:]])


def recalls(ranked: list[list[str | None]], questions: list[Any]) -> list[float]:
    """Mean R@k over the questions (``ranked``: each question's top probe ids, None for filler), per k of KS."""
    return [float(np.mean([recall_at_k(r, [q.id], k) for r, q in zip(ranked, questions, strict=True)])) for k in KS]


def measure(ws: ChromaWorkspace, questions: list[Any], filtered_queries: int) -> dict[str, Any]:
    view = ws.view(GLOBAL)
    col = ws.client.get_collection(ws.collection_name)
    probe_id = {r.id: None if is_filler(r) else r.provenance.model_dump()["probe_id"] for r in view.records}
    position = view.id_index()
    qvecs = ws.embedder.embed_documents([q.question["en"] for q in questions])
    lat: dict[str, list[float]] = {"unfiltered top-10": [], "unfiltered top-300": [],
                                   "GLOBAL where, top-300": [], "small session where, top-10": []}
    exact_ranked: list[list[str | None]] = []
    pool_ranked: dict[int, list[list[str | None]]] = {n: [] for n in POOLS}
    pool_cover: dict[int, list[float]] = {n: [] for n in POOLS}
    ann_recall: list[float] = []
    for i, (q, qv) in enumerate(zip(questions, qvecs, strict=True)):
        text, emb = q.question["en"], [qv.tolist()]
        for label, k, where in (("unfiltered top-10", 10, None), ("unfiltered top-300", 300, None),
                                ("GLOBAL where, top-300", 300, GLOBAL.where()),
                                ("small session where, top-10", 10, SESSION.where())):
            if label.startswith("GLOBAL") and i >= filtered_queries:
                continue
            t = time.perf_counter()
            col.query(query_embeddings=emb, n_results=k, where=where, include=INCLUDE)
            lat[label].append(time.perf_counter() - t)
        ann = col.query(query_embeddings=emb, n_results=max(POOLS) + SMALL_SESSION, include=[])["ids"][0]
        ann = [rid for rid in ann if rid in position]  # post-filter: the session's records dropped
        exact_dense = {h.record.id for h in retrieve_candidates(view, text, qv, k=10, method="dense")}
        ann_recall.append(len(exact_dense & set(ann[:10])) / 10)
        exact = [h.record.id for h in retrieve_candidates(view, text, qv, k=10, method="hybrid")]
        exact_ranked.append([probe_id[rid] for rid in exact])
        for n in POOLS:
            at = np.array([position.get(rid) for rid in ann[:n]])
            pool = ScopeView(GLOBAL, [view.records[j] for j in at], view.rows(at), [view.documents[j] for j in at])
            got = [h.record.id for h in retrieve_candidates(pool, text, qv, k=10, method="hybrid")]
            pool_ranked[n].append([probe_id[rid] for rid in got])
            pool_cover[n].append(len(set(exact) & set(ann[:n])) / len(exact))
    return {"records": len(view.records), "latency_ms": {k: c.p50(v) * 1e3 for k, v in lat.items()},
            "ann_recall_at_10": float(np.mean(ann_recall)),
            "exact": recalls(exact_ranked, questions),
            "pools": {n: {"recall": recalls(pool_ranked[n], questions), "cover": float(np.mean(pool_cover[n]))}
                      for n in POOLS}}


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", default=None, help="filler sizes (default 10000,100000; --quick 1000)")
    p.add_argument("--filtered-queries", type=int, default=20,
                   help="questions timed with the GLOBAL where (each one scans the collection's metadata)")
    args = p.parse_args()
    sizes = [int(s) for s in (args.sizes or ("1000" if args.quick else "10000,100000")).split(",")]
    probe = load_probe(PROBE_DATA_PATH)
    questions = [i for i in probe.items if i.kind not in SEPARATE_KINDS]
    embedder = default_embedder()
    print(f"bench_ann: {len(questions)} English questions, embedder {embedder.model_id}, {c.load()}", flush=True)
    results = {}
    with c.tmpdir("bench-ann-") as tmp:
        for n in sizes:
            with ChromaWorkspace(tmp / f"store{n}", embedder=embedder, spaces=[]) as ws:
                t = time.perf_counter()
                build(ws, probe, n, args.seed)
                built = time.perf_counter() - t
                got = results[n] = measure(ws, questions, args.filtered_queries)
            print(f"{got['records']:,} GLOBAL records + a {SMALL_SESSION}-record session (stored in {built:.0f} s)")
            for label, ms in got["latency_ms"].items():
                c.row(f"  Chroma query, {label}", f"p50 {ms:7.1f} ms")
            c.row("  ANN recall@10 against exact dense", f"{got['ann_recall_at_10']:.3f}")
            c.row("  exact hybrid, R@1 / R@3 / R@10", " / ".join(f"{r:.3f}" for r in got["exact"]))
            for pool, g in got["pools"].items():
                c.row(f"  hybrid over the ANN top-{pool:,}", " / ".join(f"{r:.3f}" for r in g["recall"]),
                      f"holds {g['cover']:.3f} of the exact top-10")
    largest = results[sizes[-1]]
    lat = largest["latency_ms"]
    c.summary("bench_ann", True,
              f"at {largest['records']:,} records: ANN recall@10 {largest['ann_recall_at_10']:.3f}; top-300 "
              f"{lat['unfiltered top-300']:.1f} ms unfiltered, {lat['GLOBAL where, top-300']:.1f} ms with the "
              f"scope's where; exact hybrid R@1 {largest['exact'][0]:.3f}, over the ANN top-1,000 "
              f"{largest['pools'][1000]['recall'][0]:.3f}")


if __name__ == "__main__":
    main()

"""Scoped top-10 search: ChromaWorkspace vs numpy brute force over the same scope, measured side by side.

For each collection size (10k and 100k records over 100 session scopes + the global scope, clustered
384-dim vectors, no encoder) it reports:

* the project's warm scoped search (exact in-memory ScopeView) p50/p95, numpy brute force over the same
  scope's matrix p50/p95, and their p95 ratio (target <= 1.5) and recall@10 vs exact (target >= 0.99);
* Chroma's own filtered HNSW query (``exact_index=False``) and its recall;
* the cold cost of building a scope view, in this process and after a restart (fresh process);
* that results are identical after reopening the path in a fresh process;
* the same search against a ``chroma run`` server over the same data directory (HNSW filtered query,
  and ``exact_index=True`` views loaded over HTTP).

Usage: ``python benchmarks/bench_search.py [--quick] [--sizes 10000,100000] [--queries 300]``
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402

from agently_vecmem.workspace.chroma import ChromaWorkspace  # noqa: E402

K = 10
P95_TARGET = 1.5
RECALL_TARGET = 0.99
#: Each query is timed this many times per method (fastest kept) to shed scheduler noise.
REPEATS = 5


def brute_force(matrix: np.ndarray, q: np.ndarray, k: int = K) -> np.ndarray:
    scores = matrix @ q
    if k < scores.shape[0]:
        idx = np.argpartition(-scores, k - 1)[:k]
    else:
        idx = np.arange(scores.shape[0])
    return idx[np.argsort(-scores[idx], kind="stable")]


def recall(got: list[list[str]], want: list[list[str]]) -> float:
    hits = sum(len(set(g) & set(w)) for g, w in zip(got, want, strict=False))
    return hits / max(1, sum(len(w) for w in want))


def ids_of(hits: list) -> list[str]:
    return [h.record.id for h in hits]


def child(path: str, query_file: str, out_file: str) -> None:
    """Fresh process: reopen the path, time cold view builds, answer the queries, save the results."""
    spec = json.loads(Path(query_file).read_text())
    qs = np.load(spec["vectors"])
    scopes = c.scope_list(spec["n_sessions"])
    t0 = time.perf_counter()
    ws = ChromaWorkspace(path, embedder=c.VectorsOnly(), read_only=True, exact_index=True)
    t_open = time.perf_counter() - t0
    cold = []
    for si in sorted(set(spec["scopes"])):
        dt, _ = c.timed(lambda si=si: ws.view(scopes[si]))
        cold.append(dt)
    results = []
    for si, q in zip(spec["scopes"], qs, strict=False):
        hits = ws.search(q, scope=scopes[si], k=K)
        results.append([[h.record.id, h.score] for h in hits])
    ws.close()
    Path(out_file).write_text(json.dumps({"open_s": t_open, "cold_view_s": cold, "results": results}))


def run_size(n: int, n_sessions: int, n_queries: int, workdir: Path, seed: int, server: bool) -> dict:
    print(f"\n== {n:,} records, {n_sessions} session scopes + global, {n_queries} queries, top-{K}; {c.load()}", flush=True)
    scopes, records, vectors, data = c.build_dataset(n, n_sessions, seed)
    path = workdir / f"store_{n}"
    ws = ChromaWorkspace(path, embedder=c.VectorsOnly())
    t_ingest = c.ingest(ws, records, vectors)
    c.row("ingest (put with vectors=)", f"{t_ingest:.1f} s", f"{n / t_ingest:,.0f} records/s")

    rng = np.random.default_rng(seed + 1)
    q_scopes = rng.integers(0, len(scopes), size=n_queries).tolist()
    queries = np.stack([data.sample(si, 1)[0] for si in q_scopes])
    ids = [[r.id for r in rs] for rs in records]
    mats = [np.ascontiguousarray(v) for v in vectors]

    # cold: first view of each scope in this process (Chroma get + record parsing + matrix)
    cold = []
    for si in sorted(set(q_scopes)):
        dt, _ = c.timed(lambda si=si: ws.view(scopes[si]))
        cold.append(dt)
    c.row("scope view build, cold (this process)", f"p50 {c.ms(c.p50(cold))}", f"p95 {c.ms(c.p95(cold))}",
          f"max {c.ms(max(cold))}", f"(scope ~{n // len(scopes):,} records)")

    hnsw = ChromaWorkspace(path, embedder=c.VectorsOnly(), read_only=True, exact_index=False)
    for i in range(min(20, n_queries)):  # warm-up both paths
        ws.search(queries[i], scope=scopes[q_scopes[i]], k=K)
        brute_force(mats[q_scopes[i]], queries[i])
        hnsw.search(queries[i], scope=scopes[q_scopes[i]], k=K)
    q = lambda i: (queries[i], scopes[q_scopes[i]])  # noqa: E731
    times, res = c.interleaved(
        {
            "project": lambda i: ws.search(q(i)[0], scope=q(i)[1], k=K),
            "numpy": lambda i: brute_force(mats[q_scopes[i]], queries[i]),
        },
        n_queries, repeats=REPEATS,
    )
    # Chroma's query is ~1000x slower: one timing per query, interleaved with its own numpy baseline.
    t_h, r_h = c.interleaved(
        {"chroma_hnsw": lambda i: hnsw.search(q(i)[0], scope=q(i)[1], k=K),
         "numpy_h": lambda i: brute_force(mats[q_scopes[i]], queries[i])},
        n_queries,
    )
    times.update(t_h)
    res.update(r_h)
    exact = [[ids[si][j] for j in idx] for si, idx in zip(q_scopes, res["numpy"], strict=False)]
    got = [ids_of(h) for h in res["project"]]
    got_hnsw = [ids_of(h) for h in res["chroma_hnsw"]]
    out = {"n": n, "scope_size": n // len(scopes), "ingest_s": t_ingest, "cold_view_p50": c.p50(cold),
           "cold_view_p95": c.p95(cold)}
    for name in times:
        out[f"{name}_p50"], out[f"{name}_p95"] = c.p50(times[name]), c.p95(times[name])
    out["recall"] = recall(got, exact)
    out["recall_hnsw"] = recall(got_hnsw, exact)
    out["ratio"] = out["project_p95"] / out["numpy_p95"]
    c.row("numpy brute force (same scope matrix)", f"p50 {c.ms(out['numpy_p50'])}", f"p95 {c.ms(out['numpy_p95'])}")
    c.row("project search, warm (exact view)", f"p50 {c.ms(out['project_p50'])}",
          f"p95 {c.ms(out['project_p95'])}", f"p95 ratio {out['ratio']:.2f}x", f"recall@10 {out['recall']:.4f}")
    c.row("chroma filtered query (exact_index=False)", f"p50 {c.ms(out['chroma_hnsw_p50'])}",
          f"p95 {c.ms(out['chroma_hnsw_p95'])}", f"{out['chroma_hnsw_p95'] / out['numpy_h_p95']:.0f}x numpy",
          f"recall@10 {out['recall_hnsw']:.4f}")
    hnsw.close()
    ws.close()
    from chromadb.api.client import SharedSystemClient

    SharedSystemClient.clear_system_cache()  # let the next opener (child process / server) own the path

    # restart: a fresh process reopens the path and must answer identically
    np.save(workdir / "queries.npy", queries)
    spec = {"vectors": str(workdir / "queries.npy"), "scopes": q_scopes, "n_sessions": n_sessions}
    (workdir / "queries.json").write_text(json.dumps(spec))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, __file__, "--child", str(path), str(workdir / "queries.json"),
                    str(workdir / "child.json")], check=True)
    t_child = time.perf_counter() - t0
    after = json.loads((workdir / "child.json").read_text())
    same_ids = all([h[0] for h in a] == ids_of(b) for a, b in zip(after["results"], res["project"], strict=False))
    max_dscore = max((abs(x[1] - h.score) for a, b in zip(after["results"], res["project"], strict=False)
                      for x, h in zip(a, b, strict=False)), default=0.0)
    out["restart_identical"] = same_ids and max_dscore < 1e-6
    out["restart_cold_view_p50"], out["restart_cold_view_p95"] = c.p50(after["cold_view_s"]), c.p95(after["cold_view_s"])
    c.row("after restart (fresh process)", f"identical top-{K}: {out['restart_identical']}",
          f"max |dscore| {max_dscore:.1e}", f"open {after['open_s'] * 1e3:.0f} ms",
          f"cold view p50 {c.ms(out['restart_cold_view_p50'])} p95 {c.ms(out['restart_cold_view_p95'])}",
          f"(child total {t_child:.1f} s)")

    if server:
        out.update(run_server(path, scopes, q_scopes, queries, mats, exact, min(n_queries, 200)))
    return out


def run_server(path: Path, scopes, q_scopes, queries, mats, exact, n_queries: int) -> dict:
    out = {}
    with c.chroma_server(path) as (port, ready_s):
        c.row("chroma run server ready", f"{ready_s:.1f} s")
        srv = ChromaWorkspace(host="127.0.0.1", port=port, embedder=c.VectorsOnly(), exact_index=False)
        srv_exact = ChromaWorkspace(host="127.0.0.1", port=port, embedder=c.VectorsOnly(), exact_index=True)
        cold = []
        for si in sorted(set(q_scopes[:n_queries])):
            dt, _ = c.timed(lambda si=si: srv_exact.view(scopes[si]))
            cold.append(dt)
        for i in range(min(20, n_queries)):
            srv.search(queries[i], scope=scopes[q_scopes[i]], k=K)
        times, res = c.interleaved(
            {
                "numpy": lambda i: brute_force(mats[q_scopes[i]], queries[i]),
                "server_hnsw": lambda i: srv.search(queries[i], scope=scopes[q_scopes[i]], k=K),
                "server_exact": lambda i: srv_exact.search(queries[i], scope=scopes[q_scopes[i]], k=K),
            },
            n_queries,
        )
        for name in ("server_hnsw", "server_exact"):
            out[f"{name}_p50"], out[f"{name}_p95"] = c.p50(times[name]), c.p95(times[name])
            out[f"{name}_recall"] = recall([ids_of(h) for h in res[name]], exact[:n_queries])
        out["server_numpy_p95"] = c.p95(times["numpy"])
        out["server_cold_view_p50"], out["server_cold_view_p95"] = c.p50(cold), c.p95(cold)
        c.row("server: chroma filtered query (default)", f"p50 {c.ms(out['server_hnsw_p50'])}",
              f"p95 {c.ms(out['server_hnsw_p95'])}", f"{out['server_hnsw_p95'] / out['server_numpy_p95']:.1f}x numpy",
              f"recall@10 {out['server_hnsw_recall']:.4f}")
        c.row("server: exact_index=True, view over HTTP", f"cold p50 {c.ms(out['server_cold_view_p50'])}",
              f"p95 {c.ms(out['server_cold_view_p95'])}")
        c.row("server: exact_index=True, warm search", f"p50 {c.ms(out['server_exact_p50'])}",
              f"p95 {c.ms(out['server_exact_p95'])}", f"{out['server_exact_p95'] / out['server_numpy_p95']:.2f}x numpy",
              f"recall@10 {out['server_exact_recall']:.4f}")
        srv.close()
        srv_exact.close()
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:5])
        return
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", default=None, help="comma-separated record counts (default 10000,100000)")
    p.add_argument("--sessions", type=int, default=None)
    p.add_argument("--queries", type=int, default=None)
    p.add_argument("--no-server", action="store_true")
    args = p.parse_args()
    sizes = [int(s) for s in (args.sizes or ("1000" if args.quick else "10000,100000")).split(",")]
    sessions = args.sessions or (10 if args.quick else 100)
    n_queries = args.queries or (40 if args.quick else 300)
    results = []
    with c.tmpdir("bench_search_") as work:
        for n in sizes:
            sub = work / str(n)
            sub.mkdir()
            results.append(run_size(n, sessions, n_queries, sub, args.seed, server=not args.no_server))
    ok = all(r["ratio"] <= P95_TARGET and r["recall"] >= RECALL_TARGET and r["restart_identical"] for r in results)
    parts = [f"{r['n'] // 1000}k: p95 {r['project_p95'] * 1e3:.3f} ms = {r['ratio']:.2f}x numpy "
             f"(target <= {P95_TARGET}), recall {r['recall']:.3f}, chroma {r['chroma_hnsw_p95'] * 1e3:.1f} ms"
             + (f", server {r['server_hnsw_p95'] * 1e3:.1f} ms" if "server_hnsw_p95" in r else "")
             for r in results]
    c.summary("bench_search", ok, "; ".join(parts))


if __name__ == "__main__":
    main()

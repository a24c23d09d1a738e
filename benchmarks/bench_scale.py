"""Memory that grows, served to many users (issue 21): write cost, an unseen session's first retrieval, a fresh
worker's cold start and memory, as sessions and GLOBAL records grow; embedded and through ``chroma run``, side
by side in one run.

Every measurement runs in a fresh child process (one per size and mode, so RSS is that process's own), on a
store of English-like documents with the hash embedder's vectors (``_scale_data``), written with
``ws.put(records, vectors=...)`` in batches of 5,000. Only public API is used (``ChromaWorkspace``, ``Scope``,
``MemoryRecord``, ``VecMemory`` through ``Session.use_memory``, ``retrieve_candidates``, ``cache_stats()``).

* **sessions** S (``--sessions``, default 10,1000,10000; ``--full`` adds 100000): 1,000 GLOBAL records and S +
  40 sessions of 3-5 SESSION_MEMORY records in one collection. The child reads GLOBAL and the S sessions once
  (a service that has served them; default cache budget), then measures: ``put`` of one GLOBAL record and of
  one record of a session read before, interleaved (p50/p95; vectors given, no embedding); the first retrieval
  in a session never read: ``view`` + ``retrieve_candidates(k=10)`` (20 sessions) and the plugin's
  ``prepare_request`` with no model (20 others; GLOBAL is cached); RSS and ``cache_stats()``.
* **globals** N (``--globals``, default 10000,100000; ``--full`` adds 1000000): two fresh worker processes, one
  after the other, open the store and call VecMemory's ``prepare_request`` (no model): the time to the first
  one (from opening the store, and from the process's start with imports), then warm ``prepare_request``
  p50/p95 over 50 queries, RSS. The second worker shows what a worker gains from one before it (any state
  persisted and shared on the machine); through ``chroma run`` the first worker also meets a fresh server.
  Embedded, a third process only opens the store and counts its records: what Chroma itself holds in a
  worker once anything reads the collection (it loads the collection's HNSW index).

Stores are built once per size and kept with ``--store-dir DIR`` (reused by later runs; the GLOBAL stores are
used in place, read only by the workers; a sessions store is copied for each mode, since puts write to it).
Writes ``scale_results.json``, ``scale_sessions.png`` and ``scale_globals.png`` to ``--out`` (default
``benchmarks/``; ``--quick``: a temporary directory).

Usage::

    python benchmarks/bench_scale.py --store-dir /tmp/scale-stores            # 10/1k/10k sessions, 10k/100k GLOBAL
    python benchmarks/bench_scale.py --store-dir /tmp/scale-stores --full     # + 100k sessions, 1M GLOBAL
    python benchmarks/bench_scale.py --sessions 10,1000 --globals 10000       # any sizes
    python benchmarks/bench_scale.py --quick                                  # 10/100 sessions, 1k GLOBAL
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _scale_data as data
from _common import (
    child_result,
    chroma_server,
    load,
    p50,
    p95,
    parser,
    peak_rss_bytes,
    rss_bytes,
    rss_parts,
    summary,
)

MB = 1 << 20
GLOBALS_IN_SESSIONS_STORE = 1_000
UNSEEN = 40
MODES = ("embedded", "server")
TARGETS = {"put_growth": 1.25, "first_retrieval_ms": 20.0, "first_prepare_100k_s": 2.0, "first_prepare_1m_s": 5.0,
           "warm_p50_ms": 25.0, "rss_1m_mb": 1536.0}


# ---------------------------------------------------------------------------------------------- children
def _open(cfg: dict[str, Any]) -> Any:
    from agently_vecmem.workspace import ChromaWorkspace

    embedder = data.DeterministicEmbedder(dim=data.DIM)
    # The globals axis names a fresh snapshot directory per mode (worker 1 writes it, worker 2 loads it).
    kw = {"snapshots": Path(cfg["snapshots"]) if cfg["snapshots"] else False} if "snapshots" in cfg else {}
    if cfg["mode"] == "server":
        return ChromaWorkspace(host="127.0.0.1", port=cfg["port"], embedder=embedder, **kw)
    return ChromaWorkspace(cfg["path"], embedder=embedder, **kw)


def _prepare(ws: Any, session_id: str, text: str) -> tuple[float, Any]:
    """One VecMemory ``prepare_request`` (no model) of a new Session on ``ws``: (seconds, the prompt)."""
    from agently_vecmem.session import Prompt, Session

    session = Session(id=session_id).use_memory(mode="VecMemory", workspace=ws)
    prompt = Prompt().set("input", text)
    t = time.perf_counter()
    session.memory.prepare_request_sync(prompt=prompt, session=session)
    return time.perf_counter() - t, prompt


def child_sessions(cfg: dict[str, Any]) -> dict[str, Any]:
    from agently_vecmem import MemoryRecord, Scope
    from agently_vecmem.search.candidates import retrieve_candidates

    sessions, n_put, n_unseen = cfg["sessions"], cfg["puts"], cfg["unseen"]
    corpus = data.Corpus(cfg["seed"])
    ws = _open(cfg)
    t = time.perf_counter()
    ws.view(Scope.global_memory())
    for i in range(sessions):
        ws.view(Scope.session_memory(data.session_id(i)))
    read_all = time.perf_counter() - t
    docs, vecs = corpus.batch(2_000_000 + sessions, 2 * n_put)
    puts: dict[str, list[float]] = {"global": [], "session": []}
    for i in range(n_put):
        for kind in (("global", "session") if i % 2 == 0 else ("session", "global")):
            j = 2 * i + (kind == "session")
            if kind == "global":
                record = MemoryRecord(id=f"put-g{i}", memory_scope="GLOBAL_MEMORY", summary=docs[j])
            else:
                sid = data.session_id((i * 7919) % sessions)
                record = MemoryRecord(id=f"put-s{i}", memory_scope="SESSION_MEMORY", session_id=sid, summary=docs[j])
            t = time.perf_counter()
            ws.put(record, vectors=vecs[j:j + 1])
            puts[kind].append(time.perf_counter() - t)
    unseen = [data.session_id(sessions + k) for k in range(n_unseen)]
    queries = corpus.queries(n_unseen)
    first, prepare, found = [], [], []
    for k, sid in enumerate(unseen[: n_unseen // 2]):
        t = time.perf_counter()
        view = ws.view(Scope.session_memory(sid))
        hits = retrieve_candidates(view, queries[k], ws.embed_query(queries[k]), k=10)
        first.append(time.perf_counter() - t)
        found.append(len(hits))
    for k, sid in enumerate(unseen[n_unseen // 2:], start=n_unseen // 2):
        dt, prompt = _prepare(ws, sid, queries[k])
        prepare.append(dt)
        found.append(len(prompt.get("SESSION_MEMORY") or []))
    assert min(found) >= 3, f"an unseen session answered {min(found)} records (each holds 3-5)"
    out = {"read_all_s": read_all, "put_global": puts["global"], "put_session": puts["session"],
           "first_retrieval": first, "first_prepare": prepare, "rss_mb": rss_bytes() / MB,
           "peak_rss_mb": peak_rss_bytes() / MB, "cache": ws.cache_stats()}
    ws.close()
    return out


def child_globals(cfg: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    from agently_vecmem import Scope  # noqa: F401 - imports a worker pays before its first request
    from agently_vecmem.memory.plugin import VecMemory  # noqa: F401
    from agently_vecmem.session import Session  # noqa: F401
    from agently_vecmem.workspace import ChromaWorkspace  # noqa: F401

    imports = time.perf_counter() - started
    queries = data.Corpus(cfg["seed"]).queries(cfg["warm"] + 1)
    t = time.perf_counter()
    ws = _open(cfg)
    opened = time.perf_counter() - t
    dt, prompt = _prepare(ws, "worker", queries[0])
    first = time.perf_counter() - t
    first_done = time.time()
    injected = len(prompt.get("GLOBAL_MEMORY") or [])
    assert injected > 0, "the first prepare_request injected no GLOBAL memory"
    warm = [_prepare(ws, "worker", q)[0] for q in queries[1:]]
    parts = rss_parts()
    out = {"imports_s": imports, "open_s": opened, "first_prepare_call_s": dt, "first_s": first,
           "first_done_wall": first_done, "warm": warm, "rss_mb": rss_bytes() / MB,
           "rss_anon_mb": parts["RssAnon"] / MB, "rss_file_mb": parts["RssFile"] / MB,
           "peak_rss_mb": peak_rss_bytes() / MB, "cache": ws.cache_stats(), "injected": injected}
    ws.close()
    return out


def child_count(cfg: dict[str, Any]) -> dict[str, Any]:
    """What the embedded database itself holds in a worker: RSS after opening the store (no snapshots) and
    counting its records, which has Chroma load the collection's index."""
    ws = _open({**cfg, "snapshots": False})
    n = ws.count()
    parts = rss_parts()
    out = {"records": n, "rss_mb": rss_bytes() / MB, "rss_anon_mb": parts["RssAnon"] / MB}
    ws.close()
    return out


def run_child(kind: str, cfg: dict[str, Any], echo: bool = False) -> dict[str, Any]:
    """``child_<kind>(cfg)`` in a fresh process; adds ``spawn_wall`` (when it was started, epoch seconds).
    ``echo``: its output goes to this process's stdout as it comes."""
    spawned = time.time()
    proc = subprocess.run([sys.executable, __file__, "--child", kind, json.dumps(cfg)],
                          stdout=None if echo else subprocess.PIPE, stderr=None if echo else subprocess.PIPE,
                          text=True, env={**os.environ, "ANONYMIZED_TELEMETRY": "False"}, check=False)
    if echo:
        if proc.returncode != 0:
            raise RuntimeError(f"child {kind} {cfg} failed ({proc.returncode})")
        return {}
    return {**child_result(proc, f"{kind} {cfg}"), "spawn_wall": spawned}


# ---------------------------------------------------------------------------------------------- driver
def child_build(cfg: dict[str, Any]) -> dict[str, Any]:
    """Build one store (in a child: the embedded client's memory is released with the process)."""
    corpus = data.Corpus(cfg["seed"])
    if cfg["axis"] == "sessions":
        batches = data.session_records(corpus, cfg["n"] + UNSEEN, GLOBALS_IN_SESSIONS_STORE)
        label = f"{cfg['n']:,} sessions"
    else:
        batches, label = data.global_records(corpus, cfg["n"]), f"{cfg['n']:,} GLOBAL"
    data.build_store(Path(cfg["path"]), batches, label)
    return {}


def store(root: Path, axis: str, n: int, seed: int) -> Path:
    """The cached store of one size (built by a child process when missing)."""
    path, reused = data.cached_store(root, f"{axis}-{n}", lambda d: run_child(
        "build", {"axis": axis, "n": n, "seed": seed, "path": str(d / "chroma")}, echo=True))
    what = f"{n:,} (+{UNSEEN}) sessions" if axis == "sessions" else f"{n:,} GLOBAL records"
    print(f"  store: {what}, {'reused' if reused else 'built'} {path}", flush=True)
    return path / "chroma"


def measure_sessions(root: Path, sessions: int, modes: list[str], cfg: dict[str, Any]) -> dict[str, Any]:
    store_path = store(root, "sessions", sessions, cfg["seed"])
    out: dict[str, Any] = {}
    for mode in modes:
        with tempfile.TemporaryDirectory(prefix="bench-scale-", dir=root) as scratch:
            copy = Path(scratch) / "chroma"
            shutil.copytree(store_path, copy)  # puts write: the cached store stays as built
            run = {**cfg, "mode": mode, "sessions": sessions, "path": str(copy)}
            if mode == "server":
                procs: list[Any] = []
                with chroma_server(copy, procs=procs) as (port, _):
                    out[mode] = run_child("sessions", {**run, "port": port})
                    out[mode]["server_rss_mb"] = rss_bytes(procs[0].pid) / MB
            else:
                out[mode] = run_child("sessions", run)
        out[mode]["load"] = load()
        print_sessions_row(sessions, mode, out[mode], out.get("embedded"))
    return out


def measure_globals(root: Path, n: int, modes: list[str], cfg: dict[str, Any]) -> dict[str, Any]:
    store_path = store(root, "globals", n, cfg["seed"])
    out: dict[str, Any] = {}
    for mode in modes:
        with tempfile.TemporaryDirectory(prefix="bench-scale-snapshots-", dir=root) as snaps:
            # worker 1: a first worker on this machine (reads Chroma, writes the snapshot); worker 2: the next
            # one (loads the snapshot and catches up)
            run = {**cfg, "mode": mode, "path": str(store_path), "snapshots": snaps}
            if mode == "server":
                procs: list[Any] = []
                with chroma_server(store_path, procs=procs) as (port, _):
                    workers = [run_child("globals", {**run, "port": port}) for _ in range(2)]
                    server_rss = rss_bytes(procs[0].pid) / MB
            else:
                workers = [run_child("globals", run) for _ in range(2)]
                server_rss = None
        out[mode] = {"workers": workers, "server_rss_mb": server_rss, "load": load()}
        if mode == "embedded":
            out[mode]["chroma_rss_mb"] = run_child("count", run)["rss_mb"]
        print_globals_row(n, mode, out[mode], out.get("embedded"))
    return out


# ---------------------------------------------------------------------------------------------- report
def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:7.1f}" if seconds >= 0.01 else f"{seconds * 1e3:7.2f}"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "-"


def print_sessions_row(sessions: int, mode: str, r: dict[str, Any], embedded: dict[str, Any] | None) -> None:
    c = r["cache"]
    server = f" (server {r['server_rss_mb']:.0f} MB)" if r.get("server_rss_mb") else ""
    print(f"  {sessions:>7,} {mode:<8} put GLOBAL {_ms(p50(r['put_global']))} /{_ms(p95(r['put_global']))} ms"
          f"  put session {_ms(p50(r['put_session']))} /{_ms(p95(r['put_session']))} ms"
          f"  first retrieval {_ms(p50(r['first_retrieval']))} /{_ms(p95(r['first_retrieval']))} ms"
          f"  first prepare {_ms(p50(r['first_prepare']))} /{_ms(p95(r['first_prepare']))} ms"
          f"  RSS {r['rss_mb']:5.0f} MB{server}  cache {c['scopes']:,} scopes {c['bytes'] / MB:.0f} MB,"
          f" {c['evictions']:,} evicted  (read all {r['read_all_s']:.1f} s)", flush=True)
    if embedded is not None and mode != "embedded":
        print(f"  {'':>7} server/embedded put GLOBAL {_ratio(p50(r['put_global']), p50(embedded['put_global']))}"
              f"  put session {_ratio(p50(r['put_session']), p50(embedded['put_session']))}"
              f"  first retrieval {_ratio(p50(r['first_retrieval']), p50(embedded['first_retrieval']))}"
              f"  first prepare {_ratio(p50(r['first_prepare']), p50(embedded['first_prepare']))}", flush=True)


def _parts(worker: dict[str, Any]) -> str:
    """A worker's RSS split into its own memory and mapped file pages (runs before this split: nothing)."""
    if "rss_anon_mb" not in worker:
        return ""
    return f" ({worker['rss_anon_mb']:.0f} own + {worker['rss_file_mb']:.0f} mapped files)"


def print_globals_row(n: int, mode: str, r: dict[str, Any], embedded: dict[str, Any] | None) -> None:
    w1, w2 = r["workers"]
    wall = w1["first_done_wall"] - w1["spawn_wall"]
    server = f" (server {r['server_rss_mb']:.0f} MB)" if r.get("server_rss_mb") else ""
    if r.get("chroma_rss_mb"):
        server = f" (a process that only opened the store and counted: {r['chroma_rss_mb']:.0f} MB)"
    wall2 = w2["first_done_wall"] - w2["spawn_wall"]
    print(f"  {n:>9,} {mode:<8} first prepare_request: worker 1 (no snapshot) {w1['first_s']:6.2f} s (open "
          f"{w1['open_s']:.2f} s, {wall:.2f} s from process start), worker 2 (snapshot) {w2['first_s']:6.2f} s "
          f"({wall2:.2f} s from process start)  warm p50/p95 {_ms(p50(w2['warm']))} /{_ms(p95(w2['warm']))} ms"
          f"  RSS worker 1 {w1['rss_mb']:5.0f} MB (peak {w1['peak_rss_mb']:.0f}), worker 2 {w2['rss_mb']:5.0f} MB"
          f"{_parts(w2)}{server}", flush=True)
    if embedded is not None and mode != "embedded":
        e1 = embedded["workers"][0]
        print(f"  {'':>9} server/embedded first {_ratio(w1['first_s'], e1['first_s'])}"
              f"  warm p50 {_ratio(p50(w1['warm']), p50(e1['warm']))}", flush=True)


def growth_lines(results: dict[str, Any]) -> list[str]:
    lines = []
    s = {int(k): v for k, v in results["sessions"].items()}
    if len(s) > 1:
        lo, hi = min(s), max(s)
        for mode in s[lo]:
            lines.append(f"put p50 at {hi:,} / at {lo:,} sessions, {mode}: GLOBAL "
                         f"{_ratio(p50(s[hi][mode]['put_global']), p50(s[lo][mode]['put_global']))}, session "
                         f"{_ratio(p50(s[hi][mode]['put_session']), p50(s[lo][mode]['put_session']))}; first "
                         f"retrieval {_ratio(p50(s[hi][mode]['first_retrieval']), p50(s[lo][mode]['first_retrieval']))}")
    g = {int(k): v for k, v in results["globals"].items()}
    if len(g) > 1:
        lo, hi = min(g), max(g)
        for mode in g[lo]:
            a, b = g[hi][mode]["workers"][0], g[lo][mode]["workers"][0]
            lines.append(f"first prepare_request at {hi:,} / at {lo:,} GLOBAL records, {mode}: "
                         f"{_ratio(a['first_s'], b['first_s'])}; warm p50 {_ratio(p50(a['warm']), p50(b['warm']))}")
    return lines


def ratios(results: dict[str, Any]) -> list[str]:
    """Side-by-side ratios for the summary line: growth from the smallest to the largest size, server/embedded."""
    out = []
    s = {int(k): v for k, v in results["sessions"].items()}
    if s:
        lo, hi = min(s), max(s)
        for mode in s[hi]:
            out.append(f"put GLOBAL p50 {hi:,}/{lo:,} sessions {mode} "
                       f"{p50(s[hi][mode]['put_global']) / p50(s[lo][mode]['put_global']):.2f}x")
    g = {int(k): v for k, v in results["globals"].items()}
    if g and len(g[max(g)]) == 2:
        r = g[max(g)]
        out.append(f"first prepare server/embedded at {max(g):,} "
                   f"{r['server']['workers'][0]['first_s'] / r['embedded']['workers'][0]['first_s']:.2f}x")
    return out


def verdict(results: dict[str, Any]) -> tuple[bool, str]:
    """The issue's targets that the sizes run can check, and the figures behind them."""
    checks: list[tuple[str, bool]] = []
    s = {int(k): v for k, v in results["sessions"].items()}
    if 10 in s and 10_000 in s:
        for mode in s[10]:
            r = p50(s[10_000][mode]["put_global"]) / p50(s[10][mode]["put_global"])
            checks.append((f"put 10k/10 sessions {mode} {r:.2f}x (<= {TARGETS['put_growth']})",
                           r <= TARGETS["put_growth"]))
    if s:
        hi = max(s)
        for mode, r in s[hi].items():
            v = p50(r["first_retrieval"]) * 1e3
            checks.append((f"first retrieval {mode} {v:.1f} ms at {hi:,} sessions (<= {TARGETS['first_retrieval_ms']:.0f})",
                           v <= TARGETS["first_retrieval_ms"]))
    g = {int(k): v for k, v in results["globals"].items()}
    for n, limit in ((100_000, TARGETS["first_prepare_100k_s"]), (1_000_000, TARGETS["first_prepare_1m_s"])):
        for mode, r in g.get(n, {}).items():
            v = r["workers"][1]["first_s"]  # a worker starting beside others: the snapshot is there
            checks.append((f"first prepare {mode} {v:.1f} s at {n:,} from a snapshot (<= {limit:.0f})", v <= limit))
    for mode, r in g.get(1_000_000, {}).items():
        w = r["workers"][0]
        checks.append((f"warm p50 {mode} {p50(w['warm']) * 1e3:.1f} ms at 1M", p50(w["warm"]) * 1e3 <= TARGETS["warm_p50_ms"]))
        chroma = f" (Chroma's own, embedded: {r['chroma_rss_mb']:.0f} MB)" if r.get("chroma_rss_mb") else ""
        checks.append((f"RSS {mode} {w['rss_mb']:.0f} MB at 1M{chroma}", w["rss_mb"] <= TARGETS["rss_1m_mb"]))
    return all(ok for _, ok in checks), "; ".join(text for text, _ in checks) or "no target applies to these sizes"


def plot(results: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    styles = {"embedded": "-o", "server": "--s"}
    s = {int(k): v for k, v in results["sessions"].items()}
    if s:
        sizes = sorted(s)
        fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
        for mode in MODES:
            if mode not in s[sizes[0]]:
                continue
            get = lambda key, f=p50, m=mode: [f(s[k][m][key]) * 1e3 for k in sizes]  # noqa: E731
            axes[0].plot(sizes, get("put_global"), styles[mode], label=f"GLOBAL record, {mode}")
            axes[0].plot(sizes, get("put_session"), styles[mode], label=f"session record, {mode}", alpha=0.6)
            axes[1].plot(sizes, get("first_retrieval"), styles[mode], label=f"view + candidates, {mode}")
            axes[1].plot(sizes, get("first_prepare"), styles[mode], label=f"prepare_request, {mode}", alpha=0.6)
            axes[2].plot(sizes, [s[k][mode]["rss_mb"] for k in sizes], styles[mode], label=f"worker, {mode}")
        for ax, title, unit in zip(axes, ("put p50", "first retrieval in an unseen session, p50", "RSS"),
                                   ("ms", "ms", "MB"), strict=True):
            ax.set(xscale="log", xlabel="session scopes read by the process", ylabel=unit, title=title)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
        axes[0].set_yscale("log")
        fig.suptitle(f"bench_scale: sessions axis ({GLOBALS_IN_SESSIONS_STORE:,} GLOBAL records + 3-5 per session)")
        fig.tight_layout()
        paths.append(out / "scale_sessions.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    g = {int(k): v for k, v in results["globals"].items()}
    if g:
        sizes = sorted(g)
        fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
        for mode in MODES:
            if mode not in g[sizes[0]]:
                continue
            w = lambda i, key, m=mode: [g[k][m]["workers"][i][key] for k in sizes]  # noqa: E731
            axes[0].plot(sizes, w(0, "first_s"), styles[mode], label=f"worker 1 (reads Chroma), {mode}")
            axes[0].plot(sizes, w(1, "first_s"), styles[mode], label=f"worker 2 (from the snapshot), {mode}",
                         alpha=0.6)
            axes[1].plot(sizes, [p50(x) * 1e3 for x in w(1, "warm")], styles[mode], label=f"p50, {mode}")
            axes[1].plot(sizes, [p95(x) * 1e3 for x in w(1, "warm")], styles[mode], label=f"p95, {mode}", alpha=0.6)
            axes[2].plot(sizes, w(0, "rss_mb"), styles[mode], label=f"worker 1, {mode}")
            axes[2].plot(sizes, w(1, "rss_mb"), styles[mode], label=f"worker 2 (snapshot), {mode}", alpha=0.6)
        for ax, title, unit in zip(axes, ("fresh worker: open + first prepare_request", "warm prepare_request (worker 2)",
                                          "RSS"),
                                   ("s", "ms", "MB"), strict=True):
            ax.set(xscale="log", xlabel="GLOBAL records", ylabel=unit, title=title)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
        axes[0].set_yscale("log")
        fig.suptitle("bench_scale: GLOBAL records axis (VecMemory prepare_request, no model)")
        fig.tight_layout()
        paths.append(out / "scale_globals.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


def _sizes(text: str | None, default: list[int]) -> list[int]:
    if text is None:
        return default
    return [int(x.replace("_", "")) for x in text.split(",") if x.strip()]


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--full", action="store_true", help="also 100,000 sessions and 1,000,000 GLOBAL records")
    p.add_argument("--sessions", help="comma-separated session counts (0 or empty: skip the axis)")
    p.add_argument("--globals", help="comma-separated GLOBAL record counts (0 or empty: skip the axis)")
    p.add_argument("--modes", default="embedded,server", help="embedded,server (default both)")
    p.add_argument("--store-dir", type=Path, help="keep built stores here and reuse them (keyed by size)")
    p.add_argument("--out", type=Path, help="where the JSON and the plots go (default benchmarks/)")
    p.add_argument("--merge", action="store_true",
                   help="add this run's sizes and modes to the scale_results.json already in --out (the same size "
                        "and mode replaced)")
    p.add_argument("--child", nargs=2, help=argparse_hidden())
    args = p.parse_args()
    if args.child:
        kind, cfg = args.child
        result = {"sessions": child_sessions, "globals": child_globals, "build": child_build,
                  "count": child_count}[kind](json.loads(cfg))
        print("RESULT " + json.dumps(result), flush=True)
        return
    quick = args.quick
    sessions = [s for s in _sizes(args.sessions, [10, 100] if quick else [10, 1_000, 10_000] + (
        [100_000] if args.full else [])) if s > 0]
    globals_ = [n for n in _sizes(args.globals, [1_000] if quick else [10_000, 100_000] + (
        [1_000_000] if args.full else [])) if n > 0]
    modes = [m for m in args.modes.split(",") if m]
    cfg = {"seed": args.seed, "puts": 10 if quick else 40, "unseen": 8 if quick else UNSEEN, "warm": 10 if quick else 50}
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        root = args.store_dir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        out = args.out or (Path(tmp) if quick else Path(__file__).resolve().parent)
        print(f"bench_scale: sessions {sessions}, GLOBAL records {globals_}, modes {modes}; {load()}", flush=True)
        results: dict[str, Any] = {"load_start": load(), "config": cfg, "sessions": {}, "globals": {}}
        t0 = time.perf_counter()
        if sessions:
            print(f"== sessions axis: {GLOBALS_IN_SESSIONS_STORE:,} GLOBAL records + S sessions of 3-5 records, every"
                  " session read once, default cache budget; p50 / p95", flush=True)
        for n in sessions:
            results["sessions"][str(n)] = measure_sessions(root, n, modes, cfg)
        if globals_:
            print("== GLOBAL axis: fresh worker processes, VecMemory prepare_request without a model", flush=True)
        for n in globals_:
            results["globals"][str(n)] = measure_globals(root, n, modes, cfg)
        for line in growth_lines(results):
            print(f"  {line}")
        results["load_end"] = load()
        out.mkdir(parents=True, exist_ok=True)
        if args.merge and (out / "scale_results.json").exists():
            old = json.loads((out / "scale_results.json").read_text(encoding="utf-8"))
            for axis in ("sessions", "globals"):
                merged = old.get(axis, {})
                for size, modes_run in results[axis].items():
                    merged[size] = {**merged.get(size, {}), **modes_run}
                results[axis] = merged
            results["earlier_runs"] = [*old.get("earlier_runs", []), {k: old.get(k) for k in ("load_start", "load_end")}]
        ok, text = verdict(results)
        text = "; ".join([text, *ratios(results)])
        results["verdict"] = {"pass": ok, "text": text}
        (out / "scale_results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
        paths = plot(results, out)
        print(f"  wrote {out / 'scale_results.json'}, {', '.join(str(x) for x in paths)}; total "
              f"{time.perf_counter() - t0:.0f} s; {load()}")
        summary("bench_scale", ok, text)


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()

"""Several worker processes on one Chroma server: retrieval cost, freshness cost, turns/s.

Side by side in one run:

1. ``prepare_request`` (no model: the deterministic path) p50/p95 with 1k, 10k and 100k GLOBAL_MEMORY records,
   embedded store vs ``chroma run`` server (the server serves a copy of the embedded store's directory, so
   both hold the very same records). Target: server p50 <= 2x embedded p50 at 10k and 100k.
2. The freshness check: ``view()`` when nothing changed (one point read of the change head), and the first
   retrieval after another process wrote one record (head + log read + one record fetched and applied);
   every foreign write must be visible on that next retrieval.
3. Chat turns per second with 1, 2 and 4 worker processes on one server (``tests/_server_worker.py``: Session
   + VecMemory + a loopback model answering every call after a fixed simulated latency, so workers overlap
   their waiting as real ones do). Target: 2 workers >= 1.6x the turns/s of one.

Bulk records carry clustered synthetic vectors (``_common.ClusteredData``); queries are embedded with the CLI's
default embedder (``auto``: ONNX MiniLM, a few ms per query on both sides, as a user's retrieval pays it), or
with ``--embedder deterministic`` (hashing, ~0 ms: the retrieval alone, the strictest ratio).

Usage: ``python benchmarks/bench_server.py [--quick] [--embedder auto|deterministic] [--latency 0.2] [--turns 30]``
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402

from agently_vecmem.filters import Scope  # noqa: E402
from agently_vecmem.records import MemoryRecord  # noqa: E402
from agently_vecmem.session import Prompt, Session  # noqa: E402
from agently_vecmem.testing import DeterministicEmbedder  # noqa: E402
from agently_vecmem.workspace import ChromaWorkspace  # noqa: E402

WORKER = c.ROOT / "tests" / "_server_worker.py"
G = Scope.global_memory()
QUERIES = ["what does the user like to drink", "where does the user live", "the user's job", "topic 13 again",
           "memory about the trip", "the user mentioned a book", "anything about music", "family and friends"]


_EMBEDDER: list[Any] = []


def embedder() -> Any:
    """The query embedder of parts 1-2 (``--embedder``, chosen once in main): the CLI's default ``auto``
    (ONNX MiniLM, what a user's retrieval pays on both sides) or ``deterministic`` (hashing, ~0 ms: the
    retrieval alone, the strictest ratio)."""
    return _EMBEDDER[0]


def fill(ws: ChromaWorkspace, n: int, data: Any) -> None:
    """``n`` GLOBAL_MEMORY records with clustered vectors from ``data``, put 5,000 at a time."""
    for start in range(0, n, 5_000):
        k = min(5_000, n - start)
        ws.put(c.make_records(G, k, start), vectors=data.sample(0, k))


def ingest(path: Path, sizes: list[int]) -> None:
    data = c.ClusteredData(1, seed=0)
    for n in sizes:
        ws = ChromaWorkspace(path, embedder=embedder(), collection=f"g{n}", spaces=[])
        fill(ws, n, data)
        ws.close()


def retrieval_session(ws: ChromaWorkspace) -> Session:
    return Session(id="bench").use_memory(mode="VecMemory", workspace=ws)


def prepare(session: Session, i: int) -> Any:
    prompt = Prompt()
    prompt.set("input", QUERIES[i % len(QUERIES)])
    return session.memory.prepare_request_sync(prompt=prompt, session=session)


def _items(out: Any) -> str:
    """The injected memories of a prepare_request (timings and diagnostics differ between runs)."""
    return json.dumps(out.get("memories") if isinstance(out, dict) else str(out), sort_keys=True, default=str)


def part_retrieval(work: Path, sizes: list[int], n: int) -> dict[int, dict[str, list[float]]]:
    print("-- prepare_request (no model), GLOBAL_MEMORY records, embedded vs server", flush=True)
    path = work / "embedded"
    t0 = time.perf_counter()
    ingest(path, sizes)
    c.row("ingest (embedded, clustered 384-d vectors)", f"{sum(sizes):,} records in {time.perf_counter() - t0:.0f} s")
    served = work / "served"
    shutil.copytree(path, served, ignore=shutil.ignore_patterns("*.lock"))
    out: dict[int, dict[str, list[float]]] = {}
    with c.chroma_server(served) as (port, _ready):
        for size in sizes:
            emb = ChromaWorkspace(path, embedder=embedder(), collection=f"g{size}", spaces=[])
            srv = ChromaWorkspace(host="127.0.0.1", port=port, embedder=embedder(), collection=f"g{size}", spaces=[])
            sessions = {"embedded": retrieval_session(emb), "server": retrieval_session(srv)}
            cold = {}
            for name, s in sessions.items():
                cold[name], _ = c.timed(lambda s=s: prepare(s, 0))  # loads the scope view once
            stats = srv._changes.stats
            p0 = stats["polls"]
            prepare(sessions["server"], 1)
            per_call = stats["polls"] - p0
            calls = {k: (lambda i, s=s: prepare(s, i)) for k, s in sessions.items()}
            times, results = c.interleaved(calls, n)
            same = sum(_items(a) == _items(b) for a, b in zip(results["embedded"], results["server"], strict=True))
            out[size] = times
            e, s_ = times["embedded"], times["server"]
            c.row(f"{size:>7,} records  embedded p50/p95", c.ms(c.p50(e)), c.ms(c.p95(e)),
                  f"(first call, view load: {c.ms(cold['embedded'])})")
            c.row(f"{size:>7,} records  server   p50/p95", c.ms(c.p50(s_)), c.ms(c.p95(s_)),
                  f"(first call, view load: {c.ms(cold['server'])}); ratio p50 {c.p50(s_) / c.p50(e):.2f}x")
            c.row("", f"same memories injected: {same}/{n}; change-head reads per prepare_request: {per_call}")
            emb.close()
            srv.close()
    return out


def part_freshness(work: Path, n_records: int, trials: int) -> tuple[float, float, int]:
    print(f"-- freshness check ({n_records:,} GLOBAL_MEMORY records cached)", flush=True)
    data = c.ClusteredData(1, seed=1)
    with c.chroma_server(work / "fresh") as (port, _ready):
        reader = ChromaWorkspace(host="127.0.0.1", port=port, embedder=embedder(), collection="fresh", spaces=[])
        writer = ChromaWorkspace(host="127.0.0.1", port=port, embedder=embedder(), collection="fresh", spaces=[])
        fill(writer, n_records, data)
        reader.view(G)
        unchanged = [c.timed(lambda: reader.view(G))[0] for _ in range(trials)]
        after_write, visible = [], 0
        for i in range(trials):
            rec = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f"foreign fact {i} {uuid.uuid4().hex}")
            writer.put(rec)
            dt, view = c.timed(lambda: reader.view(G))
            after_write.append(dt)
            visible += view.records[-1].id == rec.id or rec.id in set(view.ids[-5:])
        reloads = reader._changes.stats["reloads"]
        reader.close()
        writer.close()
    c.row("view() when nothing changed (head read) p50/p95", c.ms(c.p50(unchanged)), c.ms(c.p95(unchanged)))
    c.row("view() after 1 foreign write p50/p95", c.ms(c.p50(after_write)), c.ms(c.p95(after_write)),
          f"(head + log + 1 record; {reloads} whole reloads)")
    c.row("foreign writes visible on the next retrieval", f"{visible}/{trials}")
    return c.p50(unchanged), c.p50(after_write), visible


class Worker:
    def __init__(self, port: int, collection: str, name: str, latency: float) -> None:
        self.p = subprocess.Popen([sys.executable, str(WORKER), "127.0.0.1", str(port), collection, name,
                                   str(latency)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, cmd: dict[str, Any]) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()

    def answer(self) -> dict[str, Any]:
        assert self.p.stdout is not None
        return json.loads(self.p.stdout.readline())

    def close(self) -> None:
        self.ask({"cmd": "quit"})
        self.p.wait(30)


def part_workers(work: Path, counts: list[int], turns: int, latency: float) -> dict[int, float]:
    print(f"-- chat turns/s, N worker processes on one server (model latency {latency * 1e3:.0f} ms per call, "
          f"{turns} turns per worker)", flush=True)
    out: dict[int, float] = {}
    with c.chroma_server(work / "workers") as (port, _ready):
        for n in counts:
            collection = f"workers{n}"
            workers = [Worker(port, collection, f"n{n}w{i}", latency) for i in range(n)]
            for w in workers:
                w.answer()  # ready
            for i, w in enumerate(workers):  # warm-up: first turn, connections, views
                w.ask({"cmd": "turns", "n": 2, "session": f"warm{i}"})
            for w in workers:
                assert w.answer()["ok"]
            t0 = time.perf_counter()
            for i, w in enumerate(workers):
                w.ask({"cmd": "turns", "n": turns, "session": f"s{i}"})
            answers = [w.answer() for w in workers]
            wall = time.perf_counter() - t0
            for w in workers:
                w.close()
            if not all(a.get("ok") for a in answers):
                raise RuntimeError(f"a worker failed: {answers}")
            out[n] = n * turns / wall
            c.row(f"{n} worker(s)", f"{out[n]:.1f} turns/s", f"({n * turns} turns in {wall:.1f} s; "
                  f"{out[n] / out[counts[0]]:.2f}x one worker)")
    return out


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--latency", type=float, default=0.2)
    p.add_argument("--turns", type=int, default=None)
    p.add_argument("--embedder", choices=("auto", "deterministic"), default="auto",
                   help="query embedder of the retrieval and freshness parts (default: the CLI's auto = ONNX MiniLM)")
    args = p.parse_args()
    if args.embedder == "deterministic":
        _EMBEDDER.append(DeterministicEmbedder(dim=c.DIM))
    else:
        from agently_vecmem.embedders import resolve_embedder

        _EMBEDDER.append(resolve_embedder("auto"))
    sizes = [500, 2_000] if args.quick else [1_000, 10_000, 100_000]
    n = 20 if args.quick else 80
    counts = [1, 2] if args.quick else [1, 2, 4]
    turns = args.turns or (6 if args.quick else 30)
    print(f"== server: {c.load()}; query embedder {args.embedder} ({embedder().model_id})", flush=True)
    trials = 20 if args.quick else 50
    with c.tmpdir("bench_server_") as work:
        ret = part_retrieval(work, sizes, n)
        unchanged, after, visible = part_freshness(work, sizes[1], trials)
        tps = part_workers(work, counts, turns, args.latency)
    big = [s for s in sizes if s >= 10_000] or sizes[-1:]
    ratios = {s: c.p50(ret[s]["server"]) / c.p50(ret[s]["embedded"]) for s in sizes}
    scale = tps[2] / tps[1]
    ok = all(ratios[s] <= 2.0 for s in big) and visible == trials and scale >= 1.6
    c.summary("bench_server", ok,
              "server/embedded prepare_request p50 " + ", ".join(f"{s:,}: {ratios[s]:.2f}x" for s in sizes)
              + f" (target <= 2x at {', '.join(f'{s:,}' for s in big)}); freshness check {c.ms(unchanged)} "
              f"unchanged, {c.ms(after)} after a foreign write, visible {visible}/{trials}; turns/s "
              + ", ".join(f"{k} workers {v:.1f}" for k, v in tps.items()) + f" (2 workers {scale:.2f}x, target 1.6x)")


if __name__ == "__main__":
    main()

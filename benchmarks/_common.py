"""Shared helpers for the benchmarks: timing, percentiles, clustered vectors, synthetic records,
a throwaway ``chroma run`` server, and the one-line summary every benchmark ends with.

Benchmarks compare against a baseline measured *in the same run* (this machine is noisy), and print
ratios, not absolute targets alone.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as `python benchmarks/bench_x.py` from a checkout
    sys.path.insert(0, str(ROOT))

from agently_vecmem.embedders.base import Embedder  # noqa: E402
from agently_vecmem.filters import Scope  # noqa: E402
from agently_vecmem.records import MemoryRecord  # noqa: E402

DIM = 384
SUMMARY_PREFIX = "SUMMARY"


# ---------------------------------------------------------------------------------------------- CLI
def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="a small variant that runs in a few seconds")
    p.add_argument("--seed", type=int, default=0)
    return p


def sized_args(p: argparse.ArgumentParser, default: str, quick: str, repeat: int) -> tuple[argparse.Namespace, list[int]]:
    """Parse ``p`` with ``--sizes`` (comma-separated; ``default``, or ``quick`` with ``--quick``) and
    ``--repeat``; returns the arguments and the sizes."""
    p.add_argument("--sizes", default=None, help=f"comma-separated sizes (default {default}; --quick {quick})")
    p.add_argument("--repeat", type=int, default=repeat)
    args = p.parse_args()
    return args, [int(s) for s in (args.sizes or (quick if args.quick else default)).split(",")]


def summary(name: str, passed: bool, text: str) -> None:
    """The last line of every benchmark: ``SUMMARY <name> PASS|FAIL <text>``."""
    print(f"{SUMMARY_PREFIX} {name} {'PASS' if passed else 'FAIL'} {text}", flush=True)


def load() -> str:
    """The machine's load average: context for absolute timings on a shared machine."""
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f}/{five:.1f} on {os.cpu_count()} cores"


def row(label: str, *cells: Any, width: int = 44) -> None:
    print(f"  {label:<{width}} " + "  ".join(str(c) for c in cells), flush=True)


# ---------------------------------------------------------------------------------------------- timing
def percentile(samples: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples, dtype=np.float64), q)) if len(samples) else float("nan")


def p50(samples: Sequence[float]) -> float:
    return percentile(samples, 50)


def p95(samples: Sequence[float]) -> float:
    return percentile(samples, 95)


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if seconds < 0.01 else f"{seconds * 1e3:.1f} ms"


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def p50_ms(fn: Callable[[], Any], repeat: int) -> float:
    """The median of ``repeat`` calls of ``fn``, in milliseconds."""
    return p50([timed(fn)[0] for _ in range(repeat)]) * 1e3


def interleaved(
    calls: dict[str, Callable[[int], Any]], n: int, repeats: int = 1
) -> tuple[dict[str, list[float]], dict[str, list[Any]]]:
    """Run every call on each of ``n`` inputs, rotating which goes first, so machine noise hits all of
    them alike. With ``repeats`` > 1 each input is timed that many times per call and the fastest is
    kept (the per-query cost without scheduler hiccups; the spread over inputs is still real).
    Returns per-name durations and the results of the first repetition."""
    names = list(calls)
    times: dict[str, list[float]] = {k: [] for k in names}
    results: dict[str, list[Any]] = {k: [] for k in names}
    for i in range(n):
        best = dict.fromkeys(names, float("inf"))
        for r in range(repeats):
            shift = (i + r) % len(names)
            for name in names[shift:] + names[:shift]:
                dt, out = timed(lambda name=name, i=i: calls[name](i))
                best[name] = min(best[name], dt)
                if r == 0:
                    results[name].append(out)
        for name in names:
            times[name].append(best[name])
    return times, results


def child_result(proc: subprocess.CompletedProcess[str], what: str) -> dict[str, Any]:
    """What a benchmark's child process (run with captured text output) printed last as ``RESULT <json>``;
    raises ``RuntimeError`` with the tails of its output when it failed or printed none."""
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"child {what} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return dict(json.loads(lines[-1][7:]))


# ---------------------------------------------------------------------------------------------- memory
def rss_bytes(pid: int | str = "self") -> int:
    """Resident set size of this process, or of process ``pid`` (VmRSS)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def disk_bytes(directory: str | Path) -> int:
    """Bytes the files of ``directory`` take on disk (allocated blocks: a snapshot's vector files end in spare
    rows left as a hole, which their size counts and the disk does not hold)."""
    return sum(p.stat().st_blocks * 512 for p in Path(directory).iterdir() if p.is_file())


def rss_parts() -> dict[str, int]:
    """This process's resident memory in bytes: its own (``RssAnon``: heap, arrays) and mapped file pages
    (``RssFile``: the OS page cache, shared by every process mapping the same files, and shared libraries)."""
    out = {}
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            key = line.split(":")[0]
            if key in ("RssAnon", "RssFile"):
                out[key] = int(line.split()[1]) * 1024
    return out


def peak_rss_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


# ---------------------------------------------------------------------------------------------- data
class VectorsOnly(Embedder):
    """A stand-in embedder for benchmarks that pass ``vectors=``: it records a model id and refuses to
    embed text, so no model is ever loaded by accident."""

    model_id = "bench:clustered-384"
    dim = DIM

    def _embed(self, texts: list[str]) -> np.ndarray:
        raise RuntimeError("the benchmark passes vectors; text embedding should not happen")


def scope_list(n_sessions: int) -> list[Scope]:
    """``n_sessions`` session scopes plus the global scope (last)."""
    return [Scope.session_memory(f"s{i:03d}") for i in range(n_sessions)] + [Scope.global_memory()]


class ClusteredData:
    """Realistic-ish embeddings: unit vectors scattered around random topic centers.

    Every scope draws from its own handful of topics out of a shared pool (so scopes overlap in
    topic, like users do), with per-record noise comparable to real sentence embeddings (cosine to
    the center ~0.5-0.7).
    """

    def __init__(self, n_scopes: int, *, topics: int = 256, per_scope: int = 12, noise: float = 0.045,
                 seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        centers = self.rng.standard_normal((topics, DIM)).astype(np.float32)
        self.centers = centers / np.linalg.norm(centers, axis=1, keepdims=True)
        self.scope_topics = [self.rng.choice(topics, size=per_scope, replace=False) for _ in range(n_scopes)]
        self.noise = noise

    def sample(self, scope_index: int, n: int) -> np.ndarray:
        topics = self.rng.choice(self.scope_topics[scope_index], size=n)
        vecs = self.centers[topics] + self.noise * self.rng.standard_normal((n, DIM)).astype(np.float32)
        return (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32)


def make_records(scope: Scope, n: int, start: int, t0: float = 1.7e9) -> list[MemoryRecord]:
    """``n`` small records of one scope with deterministic ids and increasing timestamps."""
    sid = scope.session_id
    ms_ = scope.memory_scope
    out = []
    for j in range(n):
        i = start + j
        out.append(
            MemoryRecord(
                id=f"r{i:07d}", memory_scope=ms_, session_id=sid,  # type: ignore[arg-type]
                summary=f"memory {i} of {sid or 'global'}: the user mentioned topic {i % 97}",
                tags=[f"t{i % 7}"], importance=0.5, created_at=t0 + i, updated_at=t0 + i,
            )
        )
    return out


def build_dataset(n: int, n_sessions: int, seed: int) -> tuple[list[Scope], list[list[MemoryRecord]], list[np.ndarray], ClusteredData]:
    """``n`` records spread evenly over ``n_sessions`` session scopes + the global scope."""
    scopes = scope_list(n_sessions)
    data = ClusteredData(len(scopes), seed=seed)
    sizes = [n // len(scopes) + (1 if i < n % len(scopes) else 0) for i in range(len(scopes))]
    records, vectors, start = [], [], 0
    for si, (scope, size) in enumerate(zip(scopes, sizes, strict=False)):
        records.append(make_records(scope, size, start))
        vectors.append(data.sample(si, size))
        start += size
    return scopes, records, vectors, data


def ingest(ws: Any, records: list[list[MemoryRecord]], vectors: list[np.ndarray], batch: int = 5_000) -> float:
    """Put all scopes' records (interleaved into mixed batches, as a real workload writes); returns s."""
    flat_r = [r for rs in records for r in rs]
    flat_v = np.concatenate(vectors, axis=0)
    order = np.random.default_rng(1).permutation(len(flat_r))
    t0 = time.perf_counter()
    for s in range(0, len(order), batch):
        idx = order[s : s + batch]
        ws.put([flat_r[i] for i in idx], vectors=flat_v[idx])
    return time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------- server
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def chroma_server(path: str | os.PathLike[str], timeout: float = 60.0,
                  procs: list[subprocess.Popen[bytes]] | None = None) -> Iterator[tuple[int, float]]:
    """Run ``chroma run --path PATH`` on a free 127.0.0.1 port; yields (port, seconds until ready). The server's
    process is appended to ``procs`` when given (e.g. to read its memory)."""
    exe = Path(sys.executable).parent / "chroma"
    cmd = [str(exe) if exe.exists() else "chroma", "run", "--path", str(path), "--host", "127.0.0.1",
           "--port", str(port := free_port())]
    log = tempfile.TemporaryFile()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    if procs is not None:
        procs.append(proc)
    try:
        import httpx

        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"chroma run exited: {log.read()[-2000:].decode(errors='replace')}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.perf_counter() - t0 > timeout:
                raise RuntimeError("chroma run did not become ready")
            time.sleep(0.1)
        yield port, time.perf_counter() - t0
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@contextlib.contextmanager
def tmpdir(prefix: str) -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)

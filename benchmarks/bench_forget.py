"""Forget (issue 23): the wall time of ``ChromaWorkspace.forget(session=...)`` of a 1,000-record session on an
embedded store, and what stays on disk afterwards.

For each store size (other sessions' records around the forgotten one): a fresh embedded store, the session's
1,000 records plus the others put in batches of 100 (the log then holds unflushed rows, as a live store does),
one ``forget(session=...)`` timed, then every file of the store read as bytes and searched for the forgotten
texts. The vectors are measured separately: after the forget, the HNSW file ``data_level0.bin`` of the
segment is parsed (hnswlib's level-0 layout) and each forgotten vector looked for (cosine > 0.9999), also
after N more writes.

    python benchmarks/bench_forget.py [--sizes 1000,10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agently_vecmem.records import MemoryRecord  # noqa: E402
from agently_vecmem.testing import DeterministicEmbedder  # noqa: E402
from agently_vecmem.workspace import ChromaWorkspace  # noqa: E402


def _files_holding(root: str, texts: list[str]) -> int:
    found = set()
    for dirpath, _, names in os.walk(root):
        for name in names:
            data = Path(dirpath, name).read_bytes()
            found |= {t for t in texts if t.encode() in data}
    return len(found)


def _level0_vectors(root: str, dim: int) -> np.ndarray:
    """Every vector slot of the records' HNSW level-0 file (links: (M0 + 1) * 4 bytes with M0 = 32; label: 8
    bytes). The largest file is the records' (the erasure audit's 2-d index is another, small one)."""
    files = sorted(glob.glob(os.path.join(root, "*", "data_level0.bin")), key=os.path.getsize)
    if not files:
        return np.zeros((0, dim), dtype=np.float32)
    raw = np.fromfile(files[-1], dtype=np.uint8)
    size = 132 + dim * 4 + 8
    n = len(raw) // size
    return raw[: n * size].reshape(n, size)[:, 132:132 + dim * 4].copy().view(np.float32)


def run(others: int, more_writes: int) -> dict[str, float]:
    root = tempfile.mkdtemp(prefix="bench-forget-")
    try:
        emb = DeterministicEmbedder()
        ws = ChromaWorkspace(root, embedder=emb)
        gone = [MemoryRecord(memory_scope="SESSION_MEMORY", session_id="big", summary=f"zq{uuid.uuid4().hex}")
                for _ in range(1000)]
        rest = [MemoryRecord(memory_scope="SESSION_MEMORY", session_id=f"o{i % 50}", summary=f"other {i}")
                for i in range(others)]
        everything = rest + gone
        for start in range(0, len(everything), 100):
            ws.put(everything[start:start + 100])
        vectors = ws.get_vectors([r.id for r in gone])
        started = time.perf_counter()
        report = ws.forget(session="big")
        seconds = time.perf_counter() - started
        assert report.erased == 1000
        texts = [r.summary for r in gone]
        left_text = _files_holding(root, texts)
        def vectors_left() -> int:
            slots = _level0_vectors(root, emb.dim)
            if not len(slots):
                return 0
            return int(((slots @ vectors.T).max(axis=0) > 0.9999).sum())
        left_vectors = vectors_left()
        for start in range(0, more_writes, 500):
            ws.put([MemoryRecord(memory_scope="SESSION_MEMORY", session_id="later", summary=f"later {start + i}")
                    for i in range(500)])
        left_later = vectors_left()
        ws.close()
        return {"seconds": seconds, "log_rows": float(report.log_rows_purged or 0), "text_left": left_text,
                "vectors_left": left_vectors, "vectors_left_later": left_later}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,10000", help="records of other sessions in the store")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--more-writes", type=int, default=3000, help="writes after the forget (vector check)")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    print("| other records | forget 1,000 (median of runs) | log rows purged | forgotten texts in files | "
          f"forgotten vectors in HNSW files | … after {args.more_writes} more writes |")
    print("|---|---|---|---|---|---|")
    for size in (int(s) for s in args.sizes.split(",")):
        runs = [run(size, args.more_writes) for _ in range(args.repeats)]
        med = statistics.median(r["seconds"] for r in runs)
        last = runs[-1]
        each = ", ".join(f"{r['seconds'] * 1000:.0f}" for r in runs)
        print(f"| {size:,} | {med * 1000:.0f} ms ({each}) | "
              f"{last['log_rows']:.0f} | {last['text_left']:.0f} of 1,000 | {last['vectors_left']:.0f} of 1,000 | "
              f"{last['vectors_left_later']:.0f} of 1,000 |")


if __name__ == "__main__":
    main()

"""Crash safety (issue #8, item 2): a writer SIGKILLed at random points loses nothing it acknowledged.

A child process ingests records into an embedded store and prints ``ACK <ids>`` after every ``put``
returns. The test kills it with SIGKILL after a random number of acknowledgements plus a random delay
(so most kills land inside a put), then reopens the path in this process and checks that every
acknowledged record is present, valid, has a vector and is found by both search paths (the exact
in-memory view and Chroma's HNSW query), that no partial record is visible, and that the store
accepts writes again.

Quick run: 5 trials; ``VECMEM_FULL=1``: 24.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import numpy as np
from _reliability_worker import DIM, ForkServer, acked_ids, alive, read_lines, wait_dead, wait_for

from agently_vecmem import ALL_SCOPES, MemoryRecord, Scope
from agently_vecmem.testing import DeterministicEmbedder
from agently_vecmem.workspace import ChromaWorkspace

FULL = bool(os.environ.get("VECMEM_FULL"))
TRIALS = 24 if FULL else 5


def scope_of(r: MemoryRecord) -> Scope:
    return Scope.of(r.memory_scope, r.session_id)


def check_store(path: Path, acked: list[str]) -> dict[str, int]:
    """Reopen ``path`` and verify the crash-safety invariants; returns counts for the report."""
    ws = ChromaWorkspace(path, embedder=DeterministicEmbedder(dim=DIM))
    try:
        visible = ws.scan(scope=ALL_SCOPES)  # every row is validated by MemoryRecord.from_chroma
        ids = [r.id for r in visible]
        assert len(ids) == len(set(ids)) == ws.count(scope=ALL_SCOPES)
        missing = sorted(set(acked) - set(ids))
        assert not missing, f"acknowledged records lost after SIGKILL: {missing[:10]}"
        if visible:
            vecs = ws.get_vectors(ids)  # raises if any visible record lacks a vector
            assert vecs.shape == (len(ids), DIM)
            assert np.isfinite(vecs).all() and (np.abs(vecs).sum(axis=1) > 0).all()
        for r in visible:  # no partial record: the batch structure is intact
            assert r.summary.startswith("fact ") and r.vector_index.dim == DIM
        by_id = {r.id: r for r in visible}
        for rid in acked:
            rec = by_id[rid]
            # the record's own document embeds to its stored vector: it must rank first (cosine 1)
            hits = ws.search(rec.document(), scope=scope_of(rec), k=3)
            assert rid in [h.record.id for h in hits], f"{rid} not found by exact search after reopen"
            hits = ws.search(rec.document(), scope=scope_of(rec), k=3, where={"tags": {"$contains": rec.tags[0]}})
            assert rid in [h.record.id for h in hits], f"{rid} not found by Chroma's query after reopen"
        # the store takes writes again and they are searchable
        new = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="fact written after the crash", tags=["after"])
        ws.put(new)
        assert ws.count(scope=ALL_SCOPES) == len(ids) + 1
        assert ws.search("fact written after the crash", scope=Scope.global_memory(), k=1)[0].record.id == new.id
        return {"visible": len(ids), "acked": len(acked)}
    finally:
        ws.close()


def test_sigkill_during_ingest_loses_no_acknowledged_record(forks: ForkServer, tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("VECMEM_SEED", "8")))
    stats = []
    for trial in range(TRIALS):
        path = tmp_path / f"store-{trial}"
        out = tmp_path / f"out-{trial}.txt"
        want_acks = rng.randint(0, 25)
        pid = forks.spawn({"cmd": "ingest", "path": str(path), "seed": trial, "batches": 10_000,
                           "prefix": f"c{trial}", "out": str(out)})
        wait_for(out, lambda lines, n=want_acks: sum(ln.startswith("ACK ") for ln in lines) >= n
                 and any(ln == "OPEN" for ln in lines), pid=pid)
        time.sleep(rng.uniform(0.0, 0.06))  # land inside a put most of the time
        os.kill(pid, signal.SIGKILL)
        wait_dead(pid)
        lines = read_lines(out)
        assert not any("Traceback" in ln for ln in lines), "\n".join(lines)
        acked = acked_ids(lines)
        stats.append(check_store(path, acked))
    assert len(stats) == TRIALS
    print(f"crash trials={TRIALS} acked={sum(s['acked'] for s in stats)} visible={sum(s['visible'] for s in stats)}")


def test_repeated_kills_on_one_path(forks: ForkServer, tmp_path: Path) -> None:
    """Several kill/reopen cycles on the same path accumulate correctly (recovery of a recovered store)."""
    rng = random.Random(88)
    path = tmp_path / "store"
    acked: list[str] = []
    cycles = 6 if FULL else 2
    for cycle in range(cycles):
        out = tmp_path / f"out-{cycle}.txt"
        pid = forks.spawn({"cmd": "ingest", "path": str(path), "seed": 100 + cycle, "batches": 10_000,
                           "prefix": f"r{cycle}", "out": str(out)})
        want = rng.randint(1, 15)
        wait_for(out, lambda lines, n=want: sum(ln.startswith("ACK ") for ln in lines) >= n, pid=pid)
        time.sleep(rng.uniform(0.0, 0.05))
        os.kill(pid, signal.SIGKILL)
        wait_dead(pid)
        acked += acked_ids(read_lines(out))
        assert not alive(pid)
    check_store(path, acked)

"""Concurrent writers (issue #8, item 3).

* Embedded path: while one process writes, a second process (and this one) opening the same path for
  writing gets a clear :class:`WorkspaceLockedError` that names the path and the documented remedy, and
  the store is never corrupted: after the writer finishes, every acknowledged record is present and
  searchable and the count is exact.
* Server: the documented way to share a store. Several client processes, each with several threads,
  write and read one collection through ``ChromaWorkspace(host=..., port=...)``; afterwards every
  write is present and the per-session counts are exact.

Quick run: 3 lock trials, 3 clients x 2 threads x 15 writes; ``VECMEM_FULL=1``: 10 trials, 3 x 3 x 60.
"""

from __future__ import annotations

import os
import random
import signal
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from _reliability_worker import DIM, ForkServer, acked_ids, read_lines, wait_dead, wait_for

from agently_vecmem import ALL_SCOPES, Scope, WorkspaceLockedError
from agently_vecmem.testing import DeterministicEmbedder
from agently_vecmem.workspace import ChromaWorkspace

FULL = bool(os.environ.get("VECMEM_FULL"))
LOCK_TRIALS = 10 if FULL else 3
CLIENTS, THREADS, PER_THREAD = (3, 3, 60) if FULL else (3, 2, 15)


def test_second_writer_process_is_refused_and_store_survives(forks: ForkServer, tmp_path: Path) -> None:
    rng = random.Random(3)
    for trial in range(LOCK_TRIALS):
        path = tmp_path / f"store-{trial}"
        w_out, l_out = tmp_path / f"writer-{trial}.txt", tmp_path / f"locker-{trial}.txt"
        batches = rng.randint(15, 40)
        writer = forks.spawn({"cmd": "ingest", "path": str(path), "seed": trial, "batches": batches,
                              "prefix": f"w{trial}", "hold": 60, "out": str(w_out)})
        wait_for(w_out, lambda lines: "OPEN" in lines, pid=writer)
        # A second process tries to open the path for writing while the first one writes.
        locker = forks.spawn({"cmd": "trylock", "path": str(path), "attempts": 5, "out": str(l_out)})
        lines = wait_for(l_out, lambda lines: "DONE" in lines, pid=locker)
        assert "OPENED" not in lines, "a second process opened a path another process is writing"
        refusals = [ln for ln in lines if ln.startswith("LOCKED ")]
        assert len(refusals) == 5
        assert all("WorkspaceLockedError" in ln and str(path) in ln and "chroma run" in ln for ln in refusals)
        # ... and so does this process. The writer holds its lock (hold=60 s) until we kill it, so the
        # check cannot race with the writer's exit on a loaded machine.
        with pytest.raises(WorkspaceLockedError, match="ChromaWorkspace\\(host=") as info:
            ChromaWorkspace(path, embedder=DeterministicEmbedder(dim=DIM))
        assert os.path.realpath(path) in str(info.value)
        wait_for(w_out, lambda lines: "DONE" in lines, pid=writer)
        os.kill(writer, signal.SIGKILL)  # while holding the lock, after its last acknowledged put
        wait_dead(writer)
        ids = acked_ids(read_lines(w_out))
        ws = ChromaWorkspace(path, embedder=DeterministicEmbedder(dim=DIM))
        try:
            assert ws.count(scope=ALL_SCOPES) == len(ids) == len(set(ids))
            records = {r.id: r for r in ws.scan(scope=ALL_SCOPES)}
            assert set(records) == set(ids)
            for rid in rng.sample(ids, min(10, len(ids))):
                rec = records[rid]
                hit = ws.search(rec.document(), scope=Scope.of(rec.memory_scope, rec.session_id), k=1,
                                where={"tags": {"$contains": rec.tags[0]}})
                assert hit and hit[0].record.id == rid
        finally:
            ws.close()


def test_refused_open_in_process_leaves_no_lock_behind(forks: ForkServer, tmp_path: Path) -> None:
    """After a refusal, the path opens normally once the other writer is gone (no stale lock state)."""
    path, out = tmp_path / "store", tmp_path / "writer.txt"
    writer = forks.spawn({"cmd": "ingest", "path": str(path), "seed": 1, "batches": 3, "prefix": "w",
                          "hold": 60, "out": str(out)})
    wait_for(out, lambda lines: "DONE" in lines, pid=writer)
    for _ in range(3):
        with pytest.raises(WorkspaceLockedError):
            ChromaWorkspace(path, embedder=DeterministicEmbedder(dim=DIM))
    os.kill(writer, signal.SIGKILL)
    wait_dead(writer)
    with ChromaWorkspace(path, embedder=DeterministicEmbedder(dim=DIM)) as ws:
        assert ws.count() == len(acked_ids(read_lines(out)))


def test_server_shared_by_client_processes_and_threads(forks: ForkServer, chroma_server, tmp_path: Path) -> None:
    host, port = chroma_server
    collection = f"rel-{uuid.uuid4().hex[:10]}"
    # Create the collection once, so clients do not race on get_or_create.
    main = ChromaWorkspace(host=host, port=port, collection=collection, embedder=DeterministicEmbedder(dim=DIM))
    pids, outs = [], []
    start = time.monotonic()
    for c in range(CLIENTS):
        out = tmp_path / f"client-{c}.txt"
        outs.append(out)
        pids.append(forks.spawn({"cmd": "client", "host": host, "port": port, "collection": collection,
                                 "prefix": f"p{c}", "threads": THREADS, "per_thread": PER_THREAD,
                                 "sessions": 3, "out": str(out)}))
    # This process reads while the clients write: counts only grow, reads never fail.
    last = 0
    while any(not any(ln == "DONE" for ln in read_lines(o)) for o in outs):
        n = main.count(scope=ALL_SCOPES)
        assert n >= last
        last = n
        time.sleep(0.05)
        assert time.monotonic() - start < 300
    for pid in pids:
        wait_dead(pid)
    lines = [ln for o in outs for ln in read_lines(o)]
    assert not [ln for ln in lines if ln.startswith("ERROR") or "Traceback" in ln], lines
    ids = [i for ln in lines if ln.startswith("ACK ") for i in ln.split()[1:]]
    total = CLIENTS * THREADS * PER_THREAD
    assert len(ids) == len(set(ids)) == total
    assert main.count(scope=ALL_SCOPES) == total
    stored = main.scan(scope=ALL_SCOPES)
    assert {r.id for r in stored} == set(ids)
    per_session = Counter(r.session_id for r in stored)
    for sid, n in per_session.items():
        assert main.count(scope=Scope.session_memory(sid)) == n
        assert len(main.scan(scope=Scope.session_memory(sid))) == n
    for c in range(CLIENTS):
        by_client = main.scan(scope=Scope(None, None, "memory"), where={"tags": {"$contains": f"p{c}"}})
        assert len(by_client) == THREADS * PER_THREAD
    main.close()

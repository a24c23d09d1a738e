"""Several OS processes on one ``chroma run`` server, each running VecMemory turns through ``Session`` on its
own sessions and on sessions another process also serves, plus the shared GLOBAL_MEMORY.

Every round all workers write at once (one chat turn each, interleaved on the server); once every write is
acknowledged, each worker retrieves every other worker's new fact: it must be in the snapshot its retrieval
used and in the injected memories (a freshness trial). At the end every acknowledged fact is in the store
exactly once. ``VECMEM_FULL=1`` runs >= 200 trials and kills and restarts the server in the middle: while it
is down the workers get a clear ``WorkspaceError`` (never a hang), after it is back they go on without
reopening anything, and nothing acknowledged is lost.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from _servers import ChromaServer

from agently_vecmem.filters import ALL_SCOPES
from agently_vecmem.testing import DeterministicEmbedder
from agently_vecmem.workspace import ChromaWorkspace

FULL = os.environ.get("VECMEM_FULL") == "1"
WORKER = Path(__file__).resolve().parents[1] / "_server_worker.py"  # tests/, where bench_server.py runs it
N_WORKERS = 3
ROUNDS = 36 if FULL else 6  # trials per round: N_WORKERS * (N_WORKERS - 1) = 6


class Proc:
    """One worker process, driven line by line."""

    def __init__(self, host: str, port: int, collection: str, name: str) -> None:
        self.name = name
        self.p = subprocess.Popen(
            [sys.executable, str(WORKER), host, str(port), collection, name], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(WORKER.parents[1])},
        )

    def send(self, cmd: dict[str, Any]) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()

    def recv(self) -> dict[str, Any]:
        assert self.p.stdout is not None
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.name} exited with {self.p.wait()}")
        return json.loads(line)

    def close(self) -> None:
        try:
            self.send({"cmd": "quit"})
            self.p.wait(timeout=30)
        except Exception:  # noqa: BLE001 - make sure it is gone
            self.p.kill()
            self.p.wait()


def _all(procs: list[Proc], cmds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Send one command to each worker at once, then collect the answers (the workers run concurrently)."""
    for p, c in zip(procs, cmds, strict=True):
        p.send(c)
    return [p.recv() for p in procs]


def test_workers_see_each_others_acknowledged_writes(own_chroma_server: ChromaServer) -> None:
    chroma = own_chroma_server  # killed and restarted during the run
    collection = f"mp-{uuid.uuid4().hex[:8]}"
    procs = [Proc(chroma.host, chroma.port, collection, f"w{i}") for i in range(N_WORKERS)]
    counts = {"trials": 0, "stale": 0, "not_injected": 0, "errors": 0, "acknowledged": 0, "down_errors": 0}
    acked: list[str] = []
    problems: list[str] = []
    try:
        assert [p.recv() for p in procs] == [{"ready": p.name} for p in procs]
        restart_at = ROUNDS // 2 if FULL else None
        for rnd in range(ROUNDS):
            if rnd == restart_at:
                counts["down_errors"] += _server_outage(chroma, procs, rnd, counts, problems)
            tokens = [f"tok-r{rnd}{p.name}" for p in procs]
            # worker i writes in its own session, in a session worker i+1 also serves, or in GLOBAL_MEMORY
            kinds = ["GLOBAL_MEMORY", "SESSION_MEMORY", "SESSION_MEMORY"]
            cmds, where = [], []
            for i, p in enumerate(procs):
                scope = kinds[(rnd + i) % 3]
                sid = f"shared-{(i + rnd) % N_WORKERS}" if rnd % 2 else f"own-{p.name}"
                cmds.append({"cmd": "turn", "session": sid, "token": tokens[i], "scope": scope})
                where.append(sid)
            for i, out in enumerate(_all(procs, cmds)):
                if out.get("ok"):
                    acked.append(tokens[i])
                else:
                    counts["errors"] += 1
                    problems.append(f"round {rnd} turn {tokens[i]}: {out.get('error')}")
            probes = []
            for j, _p in enumerate(procs):
                # worker j reads, in the writer's session, every other worker's new fact
                others = [(tokens[i], where[i]) for i in range(N_WORKERS) if i != j]
                probes.append([{"cmd": "probe", "session": sid, "tokens": [tok]} for tok, sid in others])
            for step in range(N_WORKERS - 1):
                answers = _all(procs, [probes[j][step] for j in range(N_WORKERS)])
                for j, out in enumerate(answers):
                    tok = probes[j][step]["tokens"][0]
                    if "error" in out:
                        counts["errors"] += 1
                        problems.append(f"round {rnd} probe {tok} by w{j}: {out['error']}")
                        continue
                    counts["trials"] += 1
                    if not out["in_view"][0]:
                        counts["stale"] += 1
                        problems.append(f"round {rnd}: w{j} did not see {tok}")
                    elif not out["seen"][0]:
                        counts["not_injected"] += 1
                        problems.append(f"round {rnd}: w{j} had {tok} but did not inject it")
        counts["acknowledged"] = len(acked)
    finally:
        for p in procs:
            p.close()
    ws = ChromaWorkspace(host=chroma.host, port=chroma.port, collection=collection, embedder=DeterministicEmbedder(dim=64))
    stored = [r.summary for r in ws.scan(scope=ALL_SCOPES)]
    ws.close()
    per_token = {t: sum(s == f"fact {t}" for s in stored) for t in acked}
    lost = [t for t, n in per_token.items() if n == 0]
    duplicated = [t for t, n in per_token.items() if n > 1]
    print(f"\nmulti-process: {N_WORKERS} workers, {ROUNDS} rounds: {counts}, lost={len(lost)}, "
          f"duplicated={len(duplicated)}, records={len(stored)}")
    assert (counts["stale"], counts["not_injected"], counts["errors"], lost, duplicated) == (0, 0, 0, [], []), \
        "\n".join(problems[:10])
    assert counts["trials"] == ROUNDS * N_WORKERS * (N_WORKERS - 1)
    assert counts["acknowledged"] == ROUNDS * N_WORKERS
    if FULL:
        assert counts["trials"] >= 200 and counts["down_errors"] >= N_WORKERS


def _server_outage(chroma: ChromaServer, procs: list[Proc], rnd: int, counts: dict[str, int],
                   problems: list[str]) -> int:
    """Kill the server, check every worker gets a clear error in bounded time, restart it on the same path."""
    chroma.kill()
    cmds = [{"cmd": "turn", "session": f"own-{p.name}", "token": f"tok-down{rnd}{p.name}", "scope": "GLOBAL_MEMORY"}
            for p in procs]
    start = time.monotonic()
    answers = _all(procs, cmds)
    took = time.monotonic() - start
    clear = 0
    for out in answers:
        err = str(out.get("error", ""))
        if not out.get("ok") and "WorkspaceError" in err and f"--port {chroma.port}" in err and "chroma run" in err:
            clear += 1
        else:
            problems.append(f"while down: {out}")
    assert took < 30, f"workers took {took:.1f} s to fail while the server was down"
    threading.Event().wait(0.5)
    chroma.start()
    return clear

"""Eviction and reloads in two processes (issue 21, "Bad input and faults"): two worker processes on one Chroma
server, each with a tiny snapshot budget (scopes are evicted and read again all the time, and most scopes are
larger than the budget, so they are not cached at all), interleave writes and reads in a seeded order decided
here, one step at a time; every answer is compared with a workspace that never evicts and with fresh reads
from Chroma.

Per seed, a fresh collection; 3 users (the default one and two more, through ``ws.for_user``), each with GLOBAL
and 3 session scopes (the same session ids for every user). A step is one operation by one of the two workers
(``_eviction_worker.py``, driven over pipes):

* writes: put 1-3 new records (random creation times, so some sort before older records); update one record
  (new text, new importance with the same text, a move to another session, or a soft-deleted record made
  active again); soft delete 1-2 records; hard delete one (``delete(hard=True)``);
* reads: ``view`` of a random scope (ids in order) or ``search`` (top-5 ids in order).

Checks: every read is compared with the same read on the reference workspace of this process (budget 1 TiB:
it never evicts, and follows the workers' writes through the change log), with a fresh read of Chroma (a
workspace with ``exact_index=False``: its views are read whole from Chroma on every call, through the scope
directories; plus ``scan``, Chroma's filtered read), and, for views, with a shadow of every record kept here.
After each write both workers read every scope it touched (the writer first: read-your-writes, then the other
process), and the other one also searches it; every 20 steps and at the end both workers read every scope of
every user. At the end both workers must have evicted scopes and the reference none.

Each seed runs twice: without persisted snapshots, and with both workers persisting every scope they read to one
shared directory (so every reload of an evicted scope loads a snapshot another process may have just replaced and
catches it up from the change log).

Quick run: 3 seeds x 60 steps; ``VECMEM_FULL=1``: 12 seeds x 150 steps.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agently_vecmem import Scope
from agently_vecmem.records import DEFAULT_USER
from agently_vecmem.testing import DeterministicEmbedder
from agently_vecmem.workspace import ChromaWorkspace

FULL = bool(os.environ.get("VECMEM_FULL"))
SEEDS = list(range(12)) if FULL else [0, 1, 2]
STEPS = 150 if FULL else 60
SWEEP_EVERY = 20
DIM = 32
USERS = [DEFAULT_USER, "ana", "bo"]
SESSIONS = ["s0", "s1", "s2"]
SCOPES: list[str | None] = [None, *SESSIONS]  # None: GLOBAL
#: Worker budgets in bytes: a 32-d record counts ~5.2 KB in the cache, so about 3 records and none.
BUDGETS = (20_000, 5_000)
WORDS = ["tea", "coffee", "paris", "budget", "deadline", "cat", "piano", "garden", "blue", "train", "lisbon",
         "doctor", "invoice", "concert"]
TAGS = ["alpha", "beta", "gamma"]
T0 = 1.7e9
RUN: Counter[str] = Counter()
WORKER = Path(__file__).resolve().parent / "_eviction_worker.py"


class Proc:
    """One ``_eviction_worker.py`` process; :meth:`call` sends a command and returns its result."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.proc = subprocess.Popen([sys.executable, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1, env={**os.environ, "ANONYMIZED_TELEMETRY": "False"})
        assert self.proc.stdout is not None and self.proc.stdin is not None
        if not self.proc.stdout.readline():
            raise RuntimeError(f"worker {name} did not start")
        self.cache: dict[str, int] = {}

    def call(self, **cmd: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.name} exited (return code {self.proc.poll()})")
        reply = json.loads(line)
        self.cache = reply.get("cache") or self.cache
        if not reply["ok"]:
            raise AssertionError(f"worker {self.name} failed {cmd}: {reply['error']}\n{reply['trace']}")
        return reply["result"]

    def close(self) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def workers() -> Iterator[tuple[Proc, Proc]]:
    pair = (Proc("A"), Proc("B"))
    yield pair
    for p in pair:
        p.close()
    print(f"eviction property: {dict(RUN)}")


class Shadow:
    """Every record in the collection as this test wrote it: id -> user, scope, status, creation time."""

    def __init__(self) -> None:
        self.records: dict[str, dict[str, Any]] = {}

    def of(self, user: str, *, status: str | None = None, in_session: bool = False) -> list[str]:
        return sorted(rid for rid, r in self.records.items() if r["user"] == user
                      and (status is None or r["status"] == status) and (not in_session or r["scope"] is not None))

    def expected(self, user: str, scope: str | None) -> list[str]:
        """The ids a view of the scope holds: its active records, oldest first (ties by id)."""
        inside = [(r["created_at"], rid) for rid, r in self.records.items()
                  if r["user"] == user and r["scope"] == scope and r["status"] == "active"]
        return [rid for _, rid in sorted(inside)]


class Program:
    """One seed's run: the workers, the reference, the fresh reader, the shadow and the log of steps."""

    def __init__(self, seed: int, workers: tuple[Proc, Proc], host: str, port: int,
                 snapshots: str | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.workers = workers
        collection = f"evict-{seed}-{uuid.uuid4().hex[:8]}"
        emb = DeterministicEmbedder(dim=DIM)
        # The reference creates the collection (and its change log) before the workers open it.
        self.ref = ChromaWorkspace(host=host, port=port, collection=collection, embedder=emb, cache_bytes=1 << 40)
        self.fresh = ChromaWorkspace(host=host, port=port, collection=collection, embedder=emb, exact_index=False)
        for w, budget in zip(workers, BUDGETS, strict=True):
            w.call(op="open", host=host, port=port, collection=collection, cache_bytes=budget, snapshots=snapshots)
        self.shadow = Shadow()
        self.log: list[str] = []
        self.step = 0

    def close(self) -> None:
        self.ref.close()
        self.fresh.close()

    def fail(self, what: str, answers: dict[str, Any]) -> None:
        lines = "\n".join(f"  {k}: {v}" for k, v in answers.items())
        tail = "\n".join(self.log[-12:])
        pytest.fail(f"seed {self.seed} step {self.step}: {what} disagree\n{lines}\nlast steps:\n{tail}")

    # ------------------------------------------------------------------ reads, compared
    def compare_view(self, user: str, scope: str | None, answers: dict[str, list[str]]) -> None:
        sc = Scope.global_memory() if scope is None else Scope.session_memory(scope)
        every = {
            **answers,
            "reference (never evicts)": self.ref.for_user(user).view(sc).ids,
            "fresh view from Chroma": self.fresh.for_user(user).view(sc).ids,
            "fresh scan from Chroma": [r.id for r in self.fresh.for_user(user).scan(scope=sc)],
            "shadow": self.shadow.expected(user, scope),
        }
        if len({tuple(v) for v in every.values()}) != 1:
            self.fail(f"view of {user}/{scope or 'GLOBAL'}", every)
        RUN["view comparisons"] += len(answers)

    def compare_search(self, user: str, scope: str | None, query: str, answers: dict[str, list[str]]) -> None:
        sc = Scope.global_memory() if scope is None else Scope.session_memory(scope)
        fresh = self.fresh.for_user(user)
        every = {
            **answers,
            "reference (never evicts)": [h.record.id for h in self.ref.for_user(user).search(query, scope=sc, k=5)],
            "fresh view from Chroma": [h.record.id for h in fresh.view(sc).search(fresh.embed_query(query), 5)],
        }
        if len({tuple(v) for v in every.values()}) != 1:
            self.fail(f"search {query!r} in {user}/{scope or 'GLOBAL'}", every)
        RUN["search comparisons"] += len(answers)

    def read_both(self, user: str, scope: str | None, first: int) -> None:
        """Both workers view the scope (``first`` before the other) and compare."""
        order = [self.workers[first], self.workers[1 - first]]
        answers = {f"worker {w.name}": w.call(op="view", user=user, scope=scope) for w in order}
        self.compare_view(user, scope, answers)

    def sweep(self) -> None:
        for user in USERS:
            for scope in SCOPES:
                self.read_both(user, scope, self.rng.randrange(2))
        RUN["sweeps"] += 1

    # ------------------------------------------------------------------ one step
    def text(self) -> str:
        return " ".join(self.rng.choices(WORDS, k=self.rng.randint(2, 5)))

    def run_step(self) -> None:
        rng = self.rng
        w = rng.randrange(2)
        worker, user = self.workers[w], rng.choice(USERS)
        kind = rng.choices(["put", "update", "soft", "hard", "view", "search"], weights=[30, 15, 8, 7, 20, 20])[0]
        mine = self.shadow.of(user)
        if kind in ("update", "soft", "hard") and not mine:
            kind = "put"
        touched: set[str | None] = set()
        if kind == "put":
            scope = rng.choice(SCOPES)
            records = []
            for j in range(rng.randint(1, 3)):
                created = T0 + rng.uniform(0, 10_000)
                records.append({"id": f"r{self.seed}-{self.step}-{j}", "memory_scope": "GLOBAL_MEMORY" if scope is None
                                else "SESSION_MEMORY", "session_id": scope, "summary": self.text(),
                                "tags": rng.sample(TAGS, rng.randint(0, 2)), "created_at": created,
                                "updated_at": created})
            worker.call(op="put", user=user, records=records)
            for r in records:
                self.shadow.records[r["id"]] = {"user": user, "scope": scope, "status": "active",
                                                "created_at": r["created_at"]}
            touched.add(scope)
            detail = f"{[r['id'] for r in records]} into {scope or 'GLOBAL'}"
        elif kind == "update":
            rid = rng.choice(mine)
            rec = self.shadow.records[rid]
            how = rng.choice(["text", "importance", "move", "restore"])
            if how == "move" and rec["scope"] is None:
                how = "text"
            if how == "restore" and rec["status"] == "active":
                how = "importance"
            changes: dict[str, Any] = {"text": {"summary": self.text()},
                                       "importance": {"importance": round(rng.random(), 3)},
                                       "move": {"session_id": rng.choice([s for s in SESSIONS if s != rec["scope"]])},
                                       "restore": {"status": "active"}}[how]
            worker.call(op="update", user=user, id=rid, changes=changes)
            touched.add(rec["scope"])
            if how == "move":
                rec["scope"] = changes["session_id"]
                touched.add(rec["scope"])
            if how == "restore":
                rec["status"] = "active"
            detail = f"{rid} {changes}"
        elif kind in ("soft", "hard"):
            pool = self.shadow.of(user, status="active") if kind == "soft" else mine
            if not pool:
                pool = mine
            ids = rng.sample(pool, min(len(pool), rng.randint(1, 2) if kind == "soft" else 1))
            worker.call(op="delete", user=user, ids=ids, hard=kind == "hard")
            for rid in ids:
                touched.add(self.shadow.records[rid]["scope"])
                if kind == "hard":
                    del self.shadow.records[rid]
                else:
                    self.shadow.records[rid]["status"] = "deleted"
            detail = f"{ids}"
        else:
            scope = rng.choice(SCOPES)
            if kind == "view":
                self.compare_view(user, scope, {f"worker {worker.name}": worker.call(op="view", user=user,
                                                                                      scope=scope)})
                detail = f"{scope or 'GLOBAL'}"
            else:
                query = self.text()
                answer = worker.call(op="search", user=user, scope=scope, query=query, k=5)
                self.compare_search(user, scope, query, {f"worker {worker.name}": answer})
                detail = f"{query!r} in {scope or 'GLOBAL'}"
        RUN[f"op {kind}"] += 1
        self.log.append(f"  step {self.step}: worker {worker.name} {kind} as {user}: {detail}")
        for scope in sorted(touched, key=lambda s: s or ""):  # read-your-writes, then the other process
            self.read_both(user, scope, w)
            other = self.workers[1 - w]
            query = self.text()
            self.compare_search(user, scope, query, {f"worker {other.name}": other.call(
                op="search", user=user, scope=scope, query=query, k=5)})


@pytest.mark.parametrize("snapshots", [False, True], ids=["no-snapshots", "snapshots"])
@pytest.mark.parametrize("seed", SEEDS)
def test_evicting_processes_agree_with_a_workspace_that_never_evicts_and_with_chroma(
    workers: tuple[Proc, Proc], chroma_server: tuple[str, int], seed: int, snapshots: bool, tmp_path: Path
) -> None:
    """With ``snapshots``, both workers persist every scope they read to one shared directory: a reload of an
    evicted scope comes from its snapshot caught up from the change log (written concurrently by both)."""
    host, port = chroma_server
    program = Program(seed, workers, host, port, str(tmp_path / "snaps") if snapshots else None)
    try:
        for program.step in range(STEPS):
            program.run_step()
            if program.step % SWEEP_EVERY == SWEEP_EVERY - 1:
                program.sweep()
        program.sweep()
        if snapshots:
            RUN["runs with snapshots"] += 1
            assert any((tmp_path / "snaps").rglob("*.snap")), "no snapshot was written"
        RUN["steps"] += STEPS
        RUN["seeds"] += 1
        for w in workers:
            assert w.cache["evictions"] > 0, f"worker {w.name} never evicted a scope: {w.cache}"
            RUN[f"worker {w.name} evictions"] += w.cache["evictions"]
            RUN[f"worker {w.name} misses (reads from Chroma)"] += w.cache["misses"]
        assert program.ref.cache_stats()["evictions"] == 0
        RUN["records written"] += len(program.shadow.records)
    finally:
        program.close()

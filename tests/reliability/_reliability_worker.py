"""Subprocess side of the reliability tests (crash safety, concurrent writers, server clients).

Starting Python and importing chromadb costs several seconds here, so the tests start this script once
as a *fork server*: ``python _reliability_worker.py serve`` imports everything, then reads one JSON
command per line on stdin, forks a child for it and answers ``{"pid": N}`` on stdout. The child's
stdout is redirected to the command's ``out`` file, so the test can read its acknowledgements while it
runs and SIGKILL it at any point. No Chroma client exists in the fork server itself; each child opens
its own.

Commands (``cmd``):

* ``ingest`` ``path, seed, batches, prefix[, hold]``: open the embedded store at ``path`` and put
  ``batches`` batches of 1-4 records; after each put returns, print ``ACK <id> <id> ...`` (flushed).
  Prints ``DONE`` at the end, then sleeps ``hold`` seconds (keeping the writer lock) and exits.
* ``trylock`` ``path, attempts``: try to open ``path`` for writing ``attempts`` times; print ``LOCKED
  <error type>: <message>`` for each refusal, ``OPENED`` if it ever succeeds (a bug).
* ``client`` ``host, port, collection, prefix, threads, per_thread, sessions``: write through a Chroma
  server from several threads, reading counts while writing; print ``ACK`` lines and ``DONE``.

``python _reliability_worker.py ingest PATH SEED BATCHES PREFIX`` runs one ingest without forking.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

DIM = 32


def embedder():
    from agently_vecmem.testing import DeterministicEmbedder

    return DeterministicEmbedder(dim=DIM)


def record(prefix: str, i: int, j: int, rng: random.Random):
    from agently_vecmem import MemoryRecord

    scope = "GLOBAL_MEMORY" if rng.random() < 0.4 else "SESSION_MEMORY"
    return MemoryRecord(
        id=f"{prefix}-{i}-{j}",
        memory_scope=scope,
        session_id=f"{prefix}-s{rng.randrange(3)}" if scope == "SESSION_MEMORY" else None,
        summary=f"fact {prefix} {i} {j} token{rng.randrange(10**6)}",
        body={"detail": "x" * rng.randrange(0, 400), "n": i},
        tags=[f"t{rng.randrange(5)}"],
    )


def ack(ids: list[str]) -> None:
    print("ACK " + " ".join(ids), flush=True)


def ingest(path: str, seed: int, batches: int, prefix: str, hold: float = 0.0) -> None:
    from agently_vecmem.workspace import ChromaWorkspace

    rng = random.Random(seed)
    ws = ChromaWorkspace(path, embedder=embedder())
    print("OPEN", flush=True)
    for i in range(batches):
        recs = [record(prefix, i, j, rng) for j in range(rng.randint(1, 4))]
        ws.put(recs)
        ack([r.id for r in recs])
    print("DONE", flush=True)
    time.sleep(hold)
    ws.close()


def trylock(path: str, attempts: int) -> None:
    from agently_vecmem.errors import WorkspaceLockedError
    from agently_vecmem.workspace import ChromaWorkspace

    for _ in range(attempts):
        try:
            ws = ChromaWorkspace(path, embedder=embedder())
        except WorkspaceLockedError as e:
            print(f"LOCKED {type(e).__name__}: {e}".replace("\n", " "), flush=True)
        else:
            print("OPENED", flush=True)
            ws.close()
        time.sleep(0.02)
    print("DONE", flush=True)


def client(host: str, port: int, collection: str, prefix: str, threads: int, per_thread: int, sessions: int) -> None:
    from agently_vecmem import Scope
    from agently_vecmem.workspace import ChromaWorkspace

    ws = ChromaWorkspace(host=host, port=port, collection=collection, embedder=embedder())
    lock = threading.Lock()
    errors: list[str] = []

    def work(t: int) -> None:
        rng = random.Random(f"{prefix}-{t}")
        try:
            for i in range(per_thread):
                from agently_vecmem import MemoryRecord

                sid = f"shared-s{rng.randrange(sessions)}"
                rec = MemoryRecord(id=f"{prefix}-t{t}-{i}", memory_scope="SESSION_MEMORY", session_id=sid,
                                   summary=f"{prefix} thread {t} item {i}", tags=[prefix])
                ws.put(rec)
                with lock:
                    ack([rec.id])
                ws.count(scope=Scope.session_memory(sid))  # reads interleaved with other writers
                ws.search(rec.summary, scope=Scope.session_memory(sid), k=3)
        except Exception:  # noqa: BLE001 - reported to the test through stdout
            with lock:
                errors.append(traceback.format_exc())

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    for err in errors:
        print("ERROR " + err.replace("\n", " | "), flush=True)
    print("DONE", flush=True)


def run(cmd: dict) -> None:
    kind = cmd["cmd"]
    if kind == "ingest":
        ingest(cmd["path"], int(cmd["seed"]), int(cmd["batches"]), cmd["prefix"], float(cmd.get("hold", 0)))
    elif kind == "trylock":
        trylock(cmd["path"], int(cmd.get("attempts", 1)))
    elif kind == "client":
        client(cmd["host"], int(cmd["port"]), cmd["collection"], cmd["prefix"], int(cmd["threads"]),
               int(cmd["per_thread"]), int(cmd.get("sessions", 3)))
    else:
        raise ValueError(f"unknown command {kind!r}")


def serve() -> None:
    """Fork server: import once, fork one child per command line."""
    import chromadb  # noqa: F401 - the expensive import, done once before any fork

    import agently_vecmem.testing  # noqa: F401
    import agently_vecmem.workspace  # noqa: F401

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                fd = os.open(cmd["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                sys.stdout = os.fdopen(1, "w", buffering=1)
                sys.stderr = sys.stdout
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                run(cmd)
            except BaseException:  # noqa: BLE001 - the child must never return into the server loop
                traceback.print_exc()
                sys.stdout.flush()
                code = 1
            os._exit(code)
        print(json.dumps({"pid": pid}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve()
    elif sys.argv[1] == "ingest":
        ingest(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        raise SystemExit(f"usage: {sys.argv[0]} serve | ingest PATH SEED BATCHES PREFIX")


# -- parent side (used by the tests) ---------------------------------------------------------------------


class ForkServer:
    """Test-side handle of ``serve``: ``spawn(cmd)`` returns the child's pid; children report to files."""

    def __init__(self) -> None:
        import subprocess

        self.proc = subprocess.Popen(
            [sys.executable, __file__, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, bufsize=1, env={**os.environ, "ANONYMIZED_TELEMETRY": "False"},
        )
        ready = self.proc.stdout.readline()
        if not ready:
            raise RuntimeError("fork server did not start")
        self.pid = json.loads(ready)["ready"]

    def spawn(self, cmd: dict) -> int:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return int(json.loads(self.proc.stdout.readline())["pid"])

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def alive(pid: int) -> bool:
    """True until the kernel has reaped ``pid`` (the fork server ignores SIGCHLD, so it is reaped as soon
    as every thread is gone). A zombie thread-group leader is NOT dead yet: its other threads may still
    hold the writer lock's file descriptor."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_dead(pid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            raise TimeoutError(f"worker {pid} still alive after {timeout}s")
        time.sleep(0.01)


def read_lines(out: str | os.PathLike[str]) -> list[str]:
    try:
        with open(out, encoding="utf-8", errors="replace") as fh:
            return fh.read().splitlines()
    except FileNotFoundError:
        return []


def acked_ids(lines: list[str]) -> list[str]:
    """The record ids a child acknowledged (its ``ACK id ...`` lines, see :func:`ack`)."""
    return [i for line in lines if line.startswith("ACK ") for i in line.split()[1:]]


def wait_for(out: str | os.PathLike[str], predicate, timeout: float = 60.0, pid: int | None = None) -> list[str]:
    """Poll the child's output until ``predicate(lines)``; fail if the child died first."""
    deadline = time.monotonic() + timeout
    while True:
        lines = read_lines(out)
        if predicate(lines):
            return lines
        if pid is not None and not alive(pid):
            lines = read_lines(out)
            if predicate(lines):
                return lines
            raise RuntimeError(f"worker {pid} exited early; output:\n" + "\n".join(lines[-30:]))
        if time.monotonic() > deadline:
            raise TimeoutError("worker output did not arrive; output:\n" + "\n".join(lines[-30:]))
        time.sleep(0.005)

"""Subprocess side of ``test_eviction_property``: one ChromaWorkspace on a Chroma server, driven step by step.

Reads one JSON command per line on stdin and answers one JSON line on stdout (``{"ok": true, "result": ...,
"cache": ws.cache_stats()}`` or ``{"ok": false, "error": ..., "trace": ...}``), so the test decides every
operation and its order. Commands (``op``):

* ``open`` ``host, port, collection, cache_bytes``: (re)open the workspace (the previous one is closed);
* ``put`` ``user, records``: ``ws.for_user(user).put([MemoryRecord(**r) ...])`` (embedded here);
* ``update`` ``user, id, changes``: ``ws.for_user(user).update(id, **changes)``;
* ``delete`` ``user, ids, hard``: ``ws.for_user(user).delete(ids, hard=hard)``;
* ``view`` ``user, scope``: the ids of ``view(scope)`` in order (``scope``: ``null`` = GLOBAL, else a session id);
* ``search`` ``user, scope, query, k``: the ids of ``search(query, scope=..., k=k)`` in order;
* ``quit``.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

DIM = 32


def scope_of(ref: str | None) -> Any:
    from agently_vecmem import Scope

    return Scope.global_memory() if ref is None else Scope.session_memory(ref)


class Worker:
    def __init__(self) -> None:
        self.ws: Any = None

    def user(self, name: str) -> Any:
        return self.ws.for_user(name)

    def handle(self, cmd: dict[str, Any]) -> Any:
        from agently_vecmem import MemoryRecord
        from agently_vecmem.testing import DeterministicEmbedder
        from agently_vecmem.workspace import ChromaWorkspace

        op = cmd["op"]
        if op == "open":
            if self.ws is not None:
                self.ws.close()
            # snapshots: a directory both workers share, and every scope is snapshotted (each reload of an
            # evicted scope then goes through a persisted snapshot and its change-log catch-up)
            snaps = {"snapshots": cmd["snapshots"], "snapshot_min_records": 1} if cmd.get("snapshots") else \
                {"snapshots": False}
            self.ws = ChromaWorkspace(host=cmd["host"], port=cmd["port"], collection=cmd["collection"],
                                      embedder=DeterministicEmbedder(dim=DIM), cache_bytes=cmd["cache_bytes"],
                                      **snaps)
            return None
        if op == "put":
            return [r.id for r in self.user(cmd["user"]).put([MemoryRecord(**r) for r in cmd["records"]])]
        if op == "update":
            return self.user(cmd["user"]).update(cmd["id"], **cmd["changes"]).id
        if op == "delete":
            return self.user(cmd["user"]).delete(cmd["ids"], hard=cmd["hard"])
        if op == "view":
            return self.user(cmd["user"]).view(scope_of(cmd["scope"])).ids
        if op == "search":
            hits = self.user(cmd["user"]).search(cmd["query"], scope=scope_of(cmd["scope"]), k=cmd["k"])
            return [h.record.id for h in hits]
        raise ValueError(f"unknown op {op!r}")


def main() -> None:
    worker = Worker()
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            break
        try:
            reply = {"ok": True, "result": worker.handle(cmd)}
        except Exception as e:  # noqa: BLE001 - reported to the test, which fails with it
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}
        if worker.ws is not None and not worker.ws.closed:
            reply["cache"] = worker.ws.cache_stats()
        print(json.dumps(reply), flush=True)
    if worker.ws is not None:
        worker.ws.close()


if __name__ == "__main__":
    main()

"""One worker process of the multi-process tests and of ``benchmarks/bench_server.py``.

``python _server_worker.py HOST PORT COLLECTION NAME [LATENCY]`` opens ``ChromaWorkspace(host=..., port=...)``,
starts its own loopback OpenAI-compatible model (``LATENCY`` seconds per chat call) and answers one JSON
command per stdin line with one JSON line on stdout:

* ``{"cmd": "turn", "session": SID, "token": T, "scope": "GLOBAL_MEMORY"|"SESSION_MEMORY"}``: one
  ``Session.chat`` turn through VecMemory in session ``SID``; the model's extract reply stores the fact
  ``fact T`` in ``scope``. Answers ``{"ok": true}`` once ``chat`` returned (the write is acknowledged), or
  ``{"ok": false, "error": "..."}``.
* ``{"cmd": "probe", "session": SID, "tokens": [...]}``: one retrieval (``prepare_request``, no write) in
  session ``SID`` for each token; answers ``{"seen": [...], "in_view": [...], "errors": [...]}``: whether the
  token's fact was in the injected memories, and whether it was in the scope snapshot the retrieval used.
* ``{"cmd": "turns", "n": N, "session": SID}``: N turns as fast as possible (benchmark); answers
  ``{"ok": true, "seconds": S}``.
* ``{"cmd": "stats"}``: the change log's counters. ``{"cmd": "quit"}`` ends the process.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

TOKEN = re.compile(r"tok-[0-9a-z]+")
SCOPE = re.compile(r"scope=(GLOBAL_MEMORY|SESSION_MEMORY)")


def _extract(body: dict[str, Any]) -> dict[str, Any]:
    from agently_vecmem.testing import phase_input

    text = str(phase_input(body).get("user_content", ""))  # not the related memories shown beside it
    tokens, scopes = TOKEN.findall(text), SCOPE.findall(text)
    if not tokens:
        return {"memories": []}
    token, scope = tokens[-1], (scopes[-1] if scopes else "SESSION_MEMORY")
    return {"memories": [{"scope": scope, "summary": f"fact {token}", "tags": ["fact"], "importance": 0.5}]}


def _decide(body: dict[str, Any]) -> dict[str, Any]:
    from agently_vecmem.testing import phase_input

    data = phase_input(body)
    return {"query": str(data.get("prompt") or "q")[:200] or "q", "tags": [], "include_global": True,
            "include_session": True,
            "decisions": [{"id": c["id"], "useful": True, "score": 0.9, "reason": "r"}
                          for c in data.get("candidates", [])]}


def _consolidate(body: dict[str, Any]) -> dict[str, Any]:
    from agently_vecmem.testing import phase_input

    data = phase_input(body)
    pending = data.get("new_memories") or data.get("pending") or data.get("memories") or [{}]
    return {"decisions": [{"index": i, "action": "ADD"} for i in range(len(pending))]}


class Worker:
    def __init__(self, host: str, port: int, collection: str, name: str, latency: float) -> None:
        from agently_vecmem.llm import OpenAIChatModel
        from agently_vecmem.testing import DeterministicEmbedder, LoopbackOpenAIServer
        from agently_vecmem.workspace import ChromaWorkspace

        self.name = name
        self.ws = ChromaWorkspace(host=host, port=port, collection=collection,
                                  embedder=DeterministicEmbedder(dim=64), timeout=10.0)
        self.llm = LoopbackOpenAIServer(latency=latency).start()
        self.llm.on("retrieve_plan", _decide)
        self.llm.on("rerank", _decide)
        self.llm.on("extract", _extract)
        self.llm.on("consolidate", _consolidate)
        self.model = OpenAIChatModel(model="loopback", base_url=self.llm.base_url, api_key="x", max_retries=0,
                                     timeout=10)
        self.sessions: dict[str, Any] = {}

    def session(self, sid: str) -> Any:
        from agently_vecmem.session import Session

        if sid not in self.sessions:
            self.sessions[sid] = Session(id=sid).use_memory(mode="VecMemory", workspace=self.ws, model=self.model)
        return self.sessions[sid]

    def turn(self, sid: str, token: str, scope: str) -> dict[str, Any]:
        self.session(sid).chat(f"Please remember {token} (scope={scope}).", model=self.model)
        return {"ok": True}

    def probe(self, sid: str, tokens: list[str]) -> dict[str, Any]:
        from agently_vecmem.filters import Scope
        from agently_vecmem.session import Prompt

        session = self.session(sid)
        seen, in_view = [], []
        for token in tokens:
            prompt = Prompt()
            prompt.set("input", f"What do you know about {token}?")
            out = session.memory.prepare_request_sync(prompt=prompt, session=session)
            seen.append(token in json.dumps(out, default=str))
            views = [self.ws.view(Scope.global_memory()), self.ws.view(Scope.session_memory(sid))]
            in_view.append(any(token in r.summary for v in views for r in v.records))
        return {"seen": seen, "in_view": in_view}

    def turns(self, n: int, sid: str) -> dict[str, Any]:
        start = time.perf_counter()
        for i in range(n):
            scope = "GLOBAL_MEMORY" if i % 2 else "SESSION_MEMORY"
            self.session(sid).chat(f"Please remember tok-{self.name}x{i} (scope={scope}).", model=self.model)
        return {"ok": True, "seconds": time.perf_counter() - start}

    def handle(self, cmd: dict[str, Any]) -> dict[str, Any]:
        kind = cmd["cmd"]
        if kind == "turn":
            return self.turn(cmd["session"], cmd["token"], cmd["scope"])
        if kind == "probe":
            return self.probe(cmd["session"], cmd["tokens"])
        if kind == "turns":
            return self.turns(int(cmd["n"]), cmd["session"])
        if kind == "stats":
            return {"stats": dict(self.ws._changes.stats) if self.ws._changes else {}}
        raise ValueError(f"unknown command {kind!r}")


def main() -> None:
    host, port, collection, name = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    latency = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    worker = Worker(host, port, collection, name, latency)
    print(json.dumps({"ready": name}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "quit":
            break
        start = time.perf_counter()
        try:
            out = worker.handle(cmd)
        except Exception as e:  # noqa: BLE001 - reported to the test, which counts errors
            out = {"ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}
        out["elapsed"] = time.perf_counter() - start
        print(json.dumps(out), flush=True)
    worker.ws.close()
    worker.llm.stop()


if __name__ == "__main__":
    main()

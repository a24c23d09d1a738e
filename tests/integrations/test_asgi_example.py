"""The README's multi-user, multi-worker example really runs: ``uvicorn --workers 2`` serving
``examples/asgi_app.py`` against a real ``chroma run`` server and the loopback model. Two users each tell the
service a durable fact; every later conversation of each user carries their own fact and never the other's,
whichever worker process answers it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _server_worker import _consolidate, _decide, _extract

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _post(port: int, payload: dict) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/chat", data=json.dumps(payload).encode(),
                                 headers={"Content-Type": "application/json", "Connection": "close"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def test_uvicorn_two_workers_two_users(chroma_server, srv) -> None:  # noqa: ANN001
    uvicorn = Path(sys.executable).parent / "uvicorn"
    host, chroma_port = chroma_server
    for phase, handler in (("retrieve_plan", _decide), ("rerank", _decide), ("extract", _extract),
                           ("consolidate", _consolidate)):
        srv.on(phase, handler)
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VECMEM_CHROMA_HOST": host, "VECMEM_CHROMA_PORT": str(chroma_port),
           "VECMEM_COLLECTION": f"asgi-{uuid.uuid4().hex[:8]}", "VECMEM_EMBEDDER": "hash", "VECMEM_MODEL": "test",
           "OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "x"}
    proc = subprocess.Popen([str(uvicorn), "--app-dir", str(ROOT / "examples"), "asgi_app:app", "--workers", "2",
                             "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    facts = {"alice": "tok-porto", "bob": "tok-lisbon"}
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _post(port, {"user": "warmup", "conversation": "w", "message": "hello"})
                break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                assert time.monotonic() < deadline, "uvicorn did not answer in 60 s"
                time.sleep(0.3)
        for user, token in facts.items():
            _post(port, {"user": user, "conversation": "c1",
                         "message": f"Please remember {token} (scope=GLOBAL_MEMORY)."})
        # one request of each user at a time (in parallel), so that a worker busy with one leaves the other
        # connection to its sibling; each user's later conversations are new ones; until both workers have
        # answered both users, at least 4 rounds, at most 60 s
        seen: dict[str, set[int]] = {user: set() for user in facts}
        rounds = 0
        deadline = time.monotonic() + 60
        with ThreadPoolExecutor(max_workers=2) as pool:
            while (min(len(w) for w in seen.values()) < 2 or rounds < 4) and time.monotonic() < deadline:
                rounds += 1
                batch = [{"user": user, "conversation": f"c{rounds + 1}",
                          "message": f"{user} round {rounds}: what do you know about my token?"} for user in facts]
                for payload, out in zip(batch, pool.map(lambda p: _post(port, p), batch), strict=True):
                    seen[payload["user"]].add(out["worker"])
        chats = [req.body for req in srv.requests_for("chat")]
        for user, token in facts.items():
            other = next(t for u, t in facts.items() if u != user)
            mine = [json.dumps(body) for body in chats if f"{user} round" in json.dumps(body)]
            assert len(mine) == rounds
            assert all(f"fact {token}" in body for body in mine), f"{user}'s fact missing from a later conversation"
            assert not any(other in body for body in mine), f"another user's fact reached {user}'s request"
            assert len(seen[user]) == 2, f"only worker(s) {seen[user]} answered {user} in {rounds} rounds"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

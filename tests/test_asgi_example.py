"""The README's multi-worker example really runs: ``uvicorn --workers 2`` serving ``examples/asgi_app.py``
against a real ``chroma run`` server and the loopback model; a fact told to the service is used by every
later turn, whichever worker process answers it."""

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

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _post(port: int, payload: dict) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/chat", data=json.dumps(payload).encode(),
                                 headers={"Content-Type": "application/json", "Connection": "close"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def test_uvicorn_two_workers_share_memory(chroma_server, srv) -> None:  # noqa: ANN001
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
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _post(port, {"session": "warmup", "message": "hello"})
                break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                assert time.monotonic() < deadline, "uvicorn did not answer in 60 s"
                time.sleep(0.3)
        told = _post(port, {"session": "alice", "message": "Please remember tok-porto (scope=GLOBAL_MEMORY)."})
        workers, answers = {told["worker"]}, []
        # two requests at a time, so that a worker busy with one leaves the other connection to its sibling
        # (one after another, an idle worker may accept every connection, and the second may still be
        # starting); until both workers have answered, at least 4 rounds, at most 60 s
        deadline = time.monotonic() + 60
        with ThreadPoolExecutor(max_workers=2) as pool:
            while (len(workers) < 2 or len(answers) < 8) and time.monotonic() < deadline:
                n = len(answers)
                batch = [{"session": f"visitor{n + j}", "message": "What do you know about tok-porto?"} for j in (0, 1)]
                for out in pool.map(lambda payload: _post(port, payload), batch):
                    workers.add(out["worker"])
                    answers.append(out)
        # every chat request after the fact was told carried it, whichever worker made it
        chats = srv.requests_for("chat")[-len(answers):]
        injected = ["fact tok-porto" in json.dumps(req.body) for req in chats]
        assert len(chats) == len(answers) and all(injected), injected
        assert len(workers) == 2, f"only worker(s) {workers} answered in {len(answers)} requests"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

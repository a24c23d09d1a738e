"""A restartable ``chroma run`` server for tests (a module of its own: test modules import it by name,
which ``conftest`` cannot be — there are several conftest modules under tests/)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ChromaServer:
    """A real ``chroma run`` subprocess on 127.0.0.1 that can be killed and restarted on the same path and port."""

    def __init__(self, data: Path, port: int | None = None) -> None:
        self.chroma = Path(sys.executable).parent / "chroma"
        if not self.chroma.exists():
            pytest.skip(f"no chroma CLI next to {sys.executable}")
        self.data = data
        self.host = "127.0.0.1"
        self.port = port or _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data.parent / f"chroma-server-{self.port}.log"

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    def start(self) -> ChromaServer:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [str(self.chroma), "run", "--path", str(self.data), "--host", self.host, "--port", str(self.port)],
                stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "ANONYMIZED_TELEMETRY": "False"},
            )
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chroma server exited with {self.proc.returncode}; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"http://{self.host}:{self.port}/api/v2/heartbeat", timeout=1):
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"chroma server did not answer in 30 s; see {self.log_path}") from None
                time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL (a crash, not a clean shutdown)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

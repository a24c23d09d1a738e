"""Serving the memory browser with uvicorn: in the foreground (the CLI) or in a thread (tests, notebooks)."""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .app import LOOPBACK_HOSTS

__all__ = ["parse_bind", "is_loopback", "serve", "start_in_thread", "RunningServer"]

logger = logging.getLogger(__name__)


def parse_bind(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8765`` for IPv6) as ``(host, port)``.

    Raises:
        UsageError: not of that form, or the port is out of range.
    """
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest.removeprefix(":")
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            host, port_text = text, "8765"
    try:
        port = int(port_text)
    except ValueError:
        raise UsageError(f"invalid --bind {text!r}; use HOST:PORT, e.g. 127.0.0.1:8765") from None
    if not host or not 0 <= port <= 65535:
        raise UsageError(f"invalid --bind {text!r}; use HOST:PORT with a port 0..65535")
    return host, port


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host.lower() in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _config(app: Any) -> Any:
    import uvicorn

    return uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")


def serve(app: Any, host: str, port: int) -> None:
    """Serve ``app`` until interrupted (Ctrl-C)."""
    import uvicorn

    config = _config(app)
    config.host, config.port = host, port
    uvicorn.Server(config).run()


@dataclass
class RunningServer:
    """A browser served from a background thread; :meth:`stop` shuts it down."""

    url: str
    server: Any
    thread: threading.Thread

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)


def start_in_thread(app: Any, host: str = "127.0.0.1", port: int = 0, *, timeout: float = 15.0) -> RunningServer:
    """Serve ``app`` from a daemon thread on ``host:port`` (0: a free port) and wait until it answers."""
    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    server = uvicorn.Server(_config(app))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="vecmem-ui", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise UsageError(f"the memory browser did not start on {host}:{port} (is the port free?)")
        time.sleep(0.02)
    shown = f"[{host}]" if ":" in host else host
    return RunningServer(f"http://{shown}:{bound}", server, thread)

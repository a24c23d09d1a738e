"""One writer process per embedded Chroma path, enforced with an OS file lock.

Chroma's embedded store is corrupted by two processes writing one path (it happened in every trial:
``benchmarks/RESULTS.md``, "Figures behind implementation choices").
Opening a path for writing takes an exclusive, non-blocking lock on ``<path>/.vecmem-writer.lock``.
Within one process the lock is shared (reference-counted), so several Workspace objects may use the
same path, as Chroma itself shares one client per path in a process.
"""

from __future__ import annotations

import os
import threading

from filelock import FileLock, Timeout

from ..errors import WorkspaceLockedError

__all__ = ["acquire_writer_lock", "release_writer_lock", "LOCK_FILE"]

LOCK_FILE = ".vecmem-writer.lock"
_held: dict[str, tuple[FileLock, int]] = {}
_guard = threading.Lock()


def acquire_writer_lock(path: str) -> str:
    """Take (or share within this process) the writer lock of ``path``; returns the lock key.

    Raises:
        WorkspaceLockedError: another process holds the lock.
    """
    key = os.path.realpath(path)
    with _guard:
        if key in _held:
            lock, refs = _held[key]
            _held[key] = (lock, refs + 1)
            return key
        os.makedirs(key, exist_ok=True)
        lock = FileLock(os.path.join(key, LOCK_FILE), timeout=0, thread_local=False)
        try:
            lock.acquire()
        except Timeout:
            raise WorkspaceLockedError(
                f"another process is writing the Chroma store at {key!r}. Embedded Chroma allows one "
                "writer process per path: open it read-only (read_only=True), or run a Chroma server "
                "(`chroma run --path DIR`) and connect every process with ChromaWorkspace(host=..., port=...)."
            ) from None
        _held[key] = (lock, 1)
        return key


def release_writer_lock(key: str) -> None:
    """Drop one reference to the lock; the OS lock is released with the last one."""
    with _guard:
        if key not in _held:
            return
        lock, refs = _held[key]
        if refs > 1:
            _held[key] = (lock, refs - 1)
            return
        del _held[key]
        lock.release()

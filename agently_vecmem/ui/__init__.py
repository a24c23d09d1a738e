"""A local memory browser: records, record chains, the Ask trace, sessions and a map of a store.

``agently-vecmem ui STORE`` serves it (see :mod:`agently_vecmem.cli.ui`); :func:`create_app` builds the
ASGI app for a store, :func:`~.server.start_in_thread` serves one in the background. Everything it needs
(HTML, CSS, JavaScript) ships in the package: no CDN, no network.
"""

from __future__ import annotations

from typing import Any

from .app import MemoryBrowserApp, UIConfig
from .server import RunningServer, start_in_thread
from .store import Browser, RecordFilter, forget_records

__all__ = ["MemoryBrowserApp", "UIConfig", "Browser", "RecordFilter", "forget_records", "create_app",
           "start_in_thread", "RunningServer"]


def create_app(
    path: str | None = None,
    *,
    host: str | None = None,
    port: int = 8000,
    embedder: Any = None,
    collection: str = "vecmem_memory",
    writable: bool = False,
    config: UIConfig | None = None,
    user: str | None = None,
) -> MemoryBrowserApp:
    """The browser app over an embedded store (``path``) or a Chroma server (``host``/``port``).

    The store is opened on the first request, read-only unless ``writable``; a missing embedded store is
    reported as an error page, never created. ``user`` shows one user's memory (the default user when None).
    """
    import os

    from ..errors import ConfigurationError, WorkspaceError
    from ..workspace.chroma import ChromaWorkspace

    config = config or UIConfig(writable=writable)
    if host is not None:
        label = f"chroma server {host}:{port}" + (f", user {user}" if user else "")

        def open_store() -> ChromaWorkspace:
            ws = ChromaWorkspace(embedder=embedder, host=host, port=port, collection=collection,
                                 read_only=not config.writable, timeout=10.0)
            return ws if user is None else ws.for_user(user)
    else:
        if path is None:
            raise ConfigurationError("pass path= (an embedded store) or host= (a Chroma server)")
        label = str(path) + (f", user {user}" if user else "")

        def open_store() -> ChromaWorkspace:
            if not os.path.isfile(os.path.join(path, "chroma.sqlite3")):  # never create a store by browsing
                raise WorkspaceError(f"no memory store at {path!r}")
            ws = ChromaWorkspace(path, embedder=embedder, collection=collection, read_only=not config.writable)
            return ws if user is None else ws.for_user(user)
    return MemoryBrowserApp(open_store, label=label, config=config)

"""Shared fixtures: the real MiniLM embedder, a real Chroma server, and a Workspace factory that runs
the contract suite against embedded Chroma and the server."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from agently_vecmem.llm import OpenAIChatModel
from agently_vecmem.testing import DeterministicEmbedder, LoopbackOpenAIServer
from agently_vecmem.workspace import ChromaWorkspace

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
# The helpers in tests/ (_fakes, _servers, _server_worker, _agently_support) importable by name from every
# test module, also in the folders below; the package importable without an install.
for _p in (str(TESTS), str(ROOT)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from _servers import ChromaServer  # noqa: E402 - importable once tests/ is on sys.path

# Snapshots of server stores and the e5 engine's graph (embedders/e5_onnx.py) go to per-run directories, never the
# user's ~/.cache (children inherit them).
for _var, _prefix in (("AGENTLY_VECMEM_SNAPSHOTS", "vecmem-test-snapshots-"), ("AGENTLY_VECMEM_CACHE", "vecmem-test-cache-")):
    if not os.environ.get(_var):
        import tempfile

        os.environ[_var] = tempfile.mkdtemp(prefix=_prefix)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``full`` (long runs) belong to ``make test-full`` (VECMEM_FULL=1): deselected, not skipped,
    elsewhere."""
    if os.environ.get("VECMEM_FULL") == "1":
        return
    full = [item for item in items if item.get_closest_marker("full")]
    if full:
        config.hook.pytest_deselected(items=full)
        items[:] = [item for item in items if not item.get_closest_marker("full")]


@pytest.fixture(scope="session")
def minilm() -> Any:
    """The default embedder (all-MiniLM-L6-v2), loaded once per session."""
    from agently_vecmem.embedders import default_embedder

    embedder = default_embedder()
    embedder.embed_query("warm up")  # load now, so the first test does not pay ~8 s alone
    return embedder


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """A real ``chroma run`` subprocess on 127.0.0.1; yields ``(host, port)``."""
    srv = ChromaServer(tmp_path_factory.mktemp("chroma-server"))
    try:
        yield srv.start().address
    finally:
        srv.stop()


@pytest.fixture
def own_chroma_server(tmp_path: Path) -> Iterator[ChromaServer]:
    """A ``chroma run`` of this test alone (it may kill and restart it)."""
    data = tmp_path / "chroma-data"
    data.mkdir()
    srv = ChromaServer(data)
    try:
        yield srv.start()
    finally:
        srv.stop()


class WorkspaceFactory:
    """Opens ChromaWorkspaces on one backend; every workspace of a test shares one store.

    ``factory(embedder=..., **kw)`` opens a workspace (default collection of the test); ``fresh()``
    opens one on a store of its own (an import target); ``restart()`` closes everything and, for
    embedded stores, drops Chroma's in-process client cache so the next open reads from disk.
    """

    def __init__(self, backend: str, tmp_path: Path, server: tuple[str, int] | None) -> None:
        self.backend = backend
        self.tmp_path = tmp_path
        self.server = server
        self.collection = f"t-{uuid.uuid4().hex[:12]}"
        self.opened: list[Any] = []

    def _kwargs(self, store: str) -> dict[str, Any]:
        if self.backend == "server":
            assert self.server is not None
            host, port = self.server
            return {"host": host, "port": port, "collection": f"{self.collection}-{store}"}
        return {"path": str(self.tmp_path / store), "collection": "vecmem_memory"}

    def __call__(self, embedder: Any = None, *, store: str = "main", **kw: Any) -> Any:
        ws = ChromaWorkspace(embedder=embedder or DeterministicEmbedder(), **{**self._kwargs(store), **kw})
        self.opened.append(ws)
        return ws

    def fresh(self, embedder: Any = None, **kw: Any) -> Any:
        return self(embedder, store=f"fresh-{len(self.opened)}", **kw)

    def close_all(self) -> None:
        for ws in self.opened:
            ws.close()
        self.opened.clear()

    def restart(self) -> None:
        self.close_all()
        if self.backend == "embedded":
            import gc

            from chromadb.api.client import SharedSystemClient

            # Stop only this test's stores: other clients in the process must keep working.
            systems = SharedSystemClient._identifier_to_system
            for key in [k for k in systems if str(k).startswith(str(self.tmp_path))]:
                systems.pop(key).stop()
                # chromadb 1.5.0 has no refcount map (later 1.5 releases do)
                getattr(SharedSystemClient, "_identifier_to_refcount", {}).pop(key, None)
            gc.collect()


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One embedded store per test module (with :func:`ws`: one collection per test; a new path costs ~1 s)."""
    return str(tmp_path_factory.mktemp("store"))


@pytest.fixture
def ws(store_path: str) -> Iterator[Any]:
    """A ChromaWorkspace of this test alone (own collection in the module's store, DeterministicEmbedder).

    A module needing seeded records overrides it as ``def ws(ws): ws.put(...); return ws``.
    """
    w = ChromaWorkspace(store_path, collection=f"t-{uuid.uuid4().hex[:12]}", embedder=DeterministicEmbedder())
    yield w
    w.close()


@pytest.fixture(params=["embedded", "server"])
def workspace_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WorkspaceFactory]:
    """The contract suite's backend switch: embedded Chroma in a tmp dir, or the real server."""
    server = request.getfixturevalue("chroma_server") if request.param == "server" else None
    factory = WorkspaceFactory(request.param, tmp_path, server)
    yield factory
    factory.close_all()


# ---------------------------------------------------------------- the loopback OpenAI-compatible model
@pytest.fixture(scope="module")
def shared_server() -> Iterator[LoopbackOpenAIServer]:
    """One loopback server per module; tests use :func:`srv`. A module may override it (another embedder)."""
    with LoopbackOpenAIServer() as s:
        yield s


@pytest.fixture
def srv(shared_server: LoopbackOpenAIServer) -> Iterator[LoopbackOpenAIServer]:
    """The module's loopback server with no scripts, handlers or recorded requests (reset before and after)."""
    shared_server.reset()
    yield shared_server
    shared_server.reset()


@pytest.fixture(scope="module")
def sdk_client(shared_server: LoopbackOpenAIServer) -> openai.OpenAI:
    """One ``openai.OpenAI`` client per module: building one costs ~40 ms (TLS context), models copy it cheaply."""
    return openai.OpenAI(base_url=shared_server.base_url, api_key="test", max_retries=0, timeout=5.0)


@pytest.fixture
def model(srv: LoopbackOpenAIServer) -> OpenAIChatModel:
    return OpenAIChatModel(model="test", base_url=srv.base_url, api_key="x", max_retries=0, timeout=5)

"""The same end-to-end scenarios on every Agently host line, with the real agently and the loopback server.

The main run executes this file with the venv's agently 4.1.4.1 (Workspace line); ``test_agently_next_line``
runs it again in a child process with agently 4.1.4.10 (RecordStore line) first on ``PYTHONPATH``. The
:class:`Line` adapter holds the only differences: how a store is bound, and what a plain request is.
AgentExecution runs and the ``memory_store=`` binding exist on the RecordStore line only (marked below).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agently")

from agently import Agently  # noqa: E402

from agently_vecmem.errors import ConfigurationError, MemoryModeError  # noqa: E402
from agently_vecmem.filters import ALL_SCOPES, Scope  # noqa: E402
from agently_vecmem.integrations import agently as integration  # noqa: E402
from agently_vecmem.records import MemoryRecord  # noqa: E402

LINE = integration.host_line()
record_store_only = pytest.mark.skipif(LINE != integration.RECORD_STORE_LINE,
                                       reason="AgentExecution and memory_store= exist from agently 4.1.4.2")

FACT = "The user's name is Ada Lovelace and she lives in Paris."
SESSION_FACT = "In this chat the user is drafting a birthday invitation for Zorblax."
EXTRACTED = [
    {"scope": "GLOBAL_MEMORY", "summary": FACT, "body": {"summary": FACT}, "tags": ["profile"], "importance": 0.9},
    {"scope": "SESSION_MEMORY", "summary": SESSION_FACT, "body": {"summary": SESSION_FACT}, "tags": ["task"],
     "importance": 0.6},
]


@pytest.fixture(autouse=True)
def _installed():
    integration.install()
    yield
    integration.install()


def _text(body: dict) -> str:
    return "\n".join(m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
                     for m in body.get("messages") or [])


class Script:
    """Answers every un-headed ("chat") request: AgentlyMemory's phases and Agently's context selection by
    their instruct text, else the agent (recorded in ``agent_bodies``)."""

    def __init__(self, extract_memories: list[dict[str, Any]] | None = None) -> None:
        self.extract_memories = list(extract_memories or [])
        self.agent_bodies: list[dict] = []
        self.phases: list[str] = []

    def __call__(self, body: dict) -> Any:
        text = _text(body)
        if "offered_context_blocks" in text:  # 4.1.4.2+ TaskContext selection: keep every offered block
            self.phases.append("select")
            return {"selected_keys": sorted(set(re.findall(r"context-block:[0-9]+", text)))}
        if "Generate a compact retrieval query" in text:
            self.phases.append("plan")
            return {"query": "where does the user live name", "tags": [], "include_global": True,
                    "include_session": True}
        if "Judge which retrieved memory candidates" in text:
            self.phases.append("rerank")
            return {"decisions": []}
        if "Extract durable memories" in text:
            self.phases.append("extract")
            memories, self.extract_memories = self.extract_memories, []
            return {"memories": memories}
        self.phases.append("agent")
        self.agent_bodies.append(body)
        return "Noted."


class Line:
    """How each host line binds a store and sends a plain (non-AgentExecution) request."""

    def __init__(self, server: Any, tmp_path: Any) -> None:
        self.server, self.path = server, tmp_path / "store"

    def agent(self) -> Any:
        agent = Agently.create_agent()
        agent.set_settings("OpenAICompatible",
                           {"base_url": self.server.base_url, "model": "test", "api_key": "x", "stream": False})
        agent.set_settings("session.input_keys", ["input"])
        if LINE == integration.WORKSPACE_LINE:
            agent.use_workspace(str(self.path), provider="chroma", provider_options={"embedder": "hash"})
        return agent

    def store(self) -> Any:
        """The ChromaWorkspace behind the ``chroma`` provider at this root (``<root>/chroma``), shared."""
        return integration.chroma_store(str(self.path / "chroma"), embedder="hash")

    def use_vecmemory(self, agent: Any) -> Any:
        if LINE == integration.WORKSPACE_LINE:
            agent.activated_session.use_memory(mode="VecMemory")
        else:
            agent.activated_session.use_memory(mode="VecMemory", memory_store=self.store())
        return agent.activated_session.memory

    def bind_agently_memory_store(self, agent: Any) -> None:
        """Put the agent's own records (AgentlyMemory's store) on the ``chroma`` provider."""
        if LINE == integration.RECORD_STORE_LINE:  # the agent's default scope (session, agent id) applies
            agent.use_record_store(integration.chroma_record_backend(str(self.path / "chroma"), embedder="hash"),
                                   mode="read_write")

    @staticmethod
    def ask(agent: Any, text: str) -> Any:
        if LINE == integration.WORKSPACE_LINE:
            return agent.input(text).start()
        return agent.create_request().input(text).get_text()  # 4.1.4.2+: start() is an AgentExecution run


@pytest.fixture
def line(srv, tmp_path) -> Line:
    return Line(srv, tmp_path)


# ------------------------------------------------------------------------------------------ registration
def test_import_registers_what_this_release_understands():
    import agently_vecmem.agently  # noqa: F401

    expected = os.environ.get("VECMEM_EXPECT_AGENTLY")
    if expected:  # the child run pins the release it was launched with
        assert version("agently") == expected
    assert LINE == (integration.WORKSPACE_LINE if version("agently") in {"4.1.3.9", "4.1.4", "4.1.4.1"}
                    else integration.RECORD_STORE_LINE)
    assert integration.is_installed()
    assert Agently.plugin_manager.get_plugin("SessionMemory", "VecMemory").name == "VecMemory"
    if LINE == integration.RECORD_STORE_LINE:
        from agently.base import record_store_registry
        assert "chroma" in record_store_registry.list_backend_providers()
        assert not hasattr(Agently, "workspace")
    else:
        assert "chroma" in Agently.workspace.list_backend_providers()
    integration.uninstall()
    assert not integration.is_installed()
    integration.install()
    integration.install()
    assert integration.is_installed()


# ------------------------------------------------------------------------------------------ plain requests
def test_vecmemory_global_fact_reaches_the_next_session_and_session_fact_stays(line):
    script = Script()
    line.server.on("chat", script)
    extract = [{"memories": EXTRACTED}]
    line.server.on("extract", lambda body: extract.pop(0) if extract else {"memories": []})
    agent = line.agent()
    agent.activate_session(session_id="s1")
    plugin = line.use_vecmemory(agent)
    assert line.ask(agent, f"Hi! {FACT} {SESSION_FACT}") == "Noted."
    stored = [d for d in plugin.diagnostics if d["phase"] == "after_turn"][-1]
    assert stored["stored"] == 2, stored

    agent.activate_session(session_id="s2")
    plugin2 = line.use_vecmemory(agent)
    line.ask(agent, "Where do I live?")
    s2 = _text(script.agent_bodies[-1])
    assert "GLOBAL_MEMORY" in s2 and "Ada Lovelace" in s2
    assert "Zorblax" not in s2  # s1's session memory stays in s1
    prep = [d for d in plugin2.diagnostics if d["phase"] == "prepare_request"][-1]
    assert prep["packages"]["GLOBAL_MEMORY"]["selected_count"] == 1
    assert server_models(line.server, "extract") == {"test"}  # memory phases use the agent's model

    agent.activate_session(session_id="s1")  # re-activation keeps s1's plugin on the same Chroma store
    line.ask(agent, "What am I drafting?")
    s1 = _text(script.agent_bodies[-1])
    assert "Zorblax" in s1 and "Ada Lovelace" in s1
    records = line.store().scan(scope=ALL_SCOPES)
    assert {(r.memory_scope, r.session_id) for r in records} == {("GLOBAL_MEMORY", None), ("SESSION_MEMORY", "s1")}


def server_models(server: Any, phase: str) -> set[str]:
    return {r.body["model"] for r in server.requests_for(phase)}


def test_builtin_agently_memory_keeps_its_records_in_chroma(line):
    script = Script(extract_memories=EXTRACTED)
    line.server.on("chat", script)
    agent = line.agent()
    line.bind_agently_memory_store(agent)
    agent.activate_session(session_id="s1")
    agent.activated_session.use_memory(mode="AgentlyMemory")
    line.ask(agent, f"Hi! {FACT} {SESSION_FACT}")
    assert "extract" in script.phases
    records = line.store().scan(scope=ALL_SCOPES)
    assert {(r.memory_scope, r.session_id) for r in records} == {("GLOBAL_MEMORY", None), ("SESSION_MEMORY", "s1")}
    assert all(r.provenance.plugin == "AgentlyMemory" for r in records)

    agent.activate_session(session_id="s2")
    agent.activated_session.use_memory(mode="AgentlyMemory")
    line.ask(agent, "Where do I live?")
    s2 = _text(script.agent_bodies[-1])
    assert "Ada Lovelace" in s2 and "Zorblax" not in s2

    # VecMemory reads AgentlyMemory's records (one store, one record contract)
    agent.activate_session(session_id="s3")
    line.use_vecmemory(agent)
    line.ask(agent, "Where do I live?")
    assert "Ada Lovelace" in _text(script.agent_bodies[-1])


# ------------------------------------------------------------------------------------------ RecordStore line
@record_store_only
def test_agent_execution_reads_memory_through_the_context_source(line):
    script = Script()
    line.server.on("chat", script)
    extract = [{"memories": EXTRACTED}]
    line.server.on("extract", lambda body: extract.pop(0) if extract else {"memories": []})
    agent = line.agent()
    agent.activate_session(session_id="s1")
    line.use_vecmemory(agent)
    line.ask(agent, f"Hi! {FACT} {SESSION_FACT}")

    agent.activate_session(session_id="s2")
    plugin = line.use_vecmemory(agent)
    assert agent.input("Where do I live?").start() == "Noted."  # an AgentExecution run
    s2 = _text(script.agent_bodies[-1])
    assert "task_context_blocks" in s2 and "[GLOBAL_MEMORY]" in s2 and "Ada Lovelace" in s2
    assert "Zorblax" not in s2
    assert "select" in script.phases
    enumerated = [d for d in plugin.diagnostics if d["phase"] == "context_source"]
    assert enumerated and enumerated[-1]["visible"] == 1

    agent.activate_session(session_id="s1")
    agent.input("What am I drafting?").start()
    s1 = _text(script.agent_bodies[-1])
    assert "Zorblax" in s1 and "Ada Lovelace" in s1


def _mem(scope: str, summary: str, session: str | None = None, importance: float = 0.5) -> MemoryRecord:
    return MemoryRecord(memory_scope=scope, session_id=session, summary=summary, importance=importance,
                        body={"summary": summary})


@record_store_only
def test_context_source_revision_order_scope_reads_and_budgets(line):
    from agently.core import Session as AgentlySession

    ws = line.store()
    session = AgentlySession("s1", settings={})
    session.use_memory(mode="VecMemory", memory_store=ws)
    source = session.create_memory_context_source()
    assert source.source_kind == "session_memory"
    profile = {"projection_max_chars": 2000}

    def page(cursor=None, limit=10):
        return asyncio.run(source.async_enumerate_descriptors(profile=profile, cursor=cursor, limit=limit))

    empty = source.source_revision
    assert page().descriptors == ()
    low = ws.put(_mem("GLOBAL_MEMORY", "User likes tea", importance=0.2))[0]
    r1 = source.source_revision
    high = ws.put(_mem("SESSION_MEMORY", "Drafting an invitation for Zorblax", "s1", importance=0.9))[0]
    r2 = source.source_revision
    other = ws.put(_mem("SESSION_MEMORY", "Other session secret", "s2", importance=1.0))[0]
    assert source.source_revision == r2  # invisible to s1: its revision does not move
    ws.update(low.id, summary="User likes green tea")
    r3 = source.source_revision
    assert len({empty, r1, r2, r3}) == 4

    first = page(limit=1)
    assert [d.source_ref for d in first.descriptors] == [high.id] and first.next_cursor == "1"
    second = page(cursor=first.next_cursor, limit=1)
    assert [d.source_ref for d in second.descriptors] == [low.id] and second.next_cursor is None
    assert first.source_revision == second.source_revision == r3
    assert first.descriptors[0].metadata["memory_scope"] == "SESSION_MEMORY"

    read = asyncio.run(source.async_read_exact(high.id, max_chars=10_000))
    assert read.completeness == "complete" and "Zorblax" in read.content and read.source_revision == r3
    part = asyncio.run(source.async_read_exact(high.id, max_chars=12))
    assert len(part.content) == 12 and part.completeness == "truncated" and part.next_range_start == 12
    rest = asyncio.run(source.async_read_exact(high.id, max_chars=10_000, range_start=12))
    assert part.content + rest.content == read.content and rest.next_range_start is None
    scoped = asyncio.run(source.async_read_scoped(high.id, query="zorblax", max_chars=20))
    assert "Zorblax" in scoped.content and len(scoped.content) <= 20
    with pytest.raises(PermissionError):
        asyncio.run(source.async_read_exact(other.id, max_chars=100))

    # VecMemory's item budget caps what a block carries
    session.settings.set("session.memory.VecMemory.retrieve.budget.item_chars", 30)
    capped = asyncio.run(source.async_read_exact(high.id, max_chars=10_000))
    assert len(capped.content) <= 30 and capped.content.endswith("[truncated]")
    assert page().descriptors[0].estimated_chars <= 30


@record_store_only
def test_memory_store_binding_and_rebinding(line, tmp_path):
    from agently.base import record_store_registry

    agent = line.agent()
    agent.activate_session(session_id="s1")
    with pytest.raises(MemoryModeError, match="memory_store=chroma_store"):
        agent.activated_session.use_memory(mode="VecMemory")  # the agent's default store is no Chroma one
    ws = line.store()
    plugin = line.use_vecmemory(agent)
    assert plugin._require_store() is ws

    agent.activate_session(session_id="s2")
    agent.activate_session(session_id="s1")  # re-binds agent.record_store (local SQLite): refused, visibly
    assert agent.activated_session.memory is plugin and plugin._require_store() is ws
    assert any(d.get("reason") == "non_chroma_store_ignored" for d in plugin.diagnostics)

    other = record_store_registry.create(
        integration.chroma_record_backend(str(tmp_path / "other"), embedder="hash"), mode="read_write")
    agent.use_record_store(other)  # a Chroma record store: VecMemory follows it
    assert plugin._require_store() is other.backend.vecmem_workspace is not ws

    lazy = record_store_registry.create(str(tmp_path / "lazy"), provider="chroma", mode="read_write")
    with pytest.raises(MemoryModeError, match="chroma_record_backend"):  # 4.1.4.10 cannot materialize it
        agent.activated_session.use_memory(mode="VecMemory", memory_store=lazy)

    agent.activate_session(session_id="s3")  # no store given: the agent's record store, now a Chroma one
    agent.activated_session.use_memory(mode="VecMemory")
    assert agent.activated_session.memory._require_store() is other.backend.vecmem_workspace


@record_store_only
def test_record_store_backend_contract(line, tmp_path):
    from agently.base import record_store_registry

    # the registered provider builds the backend (the registry's own provider path)
    backend = record_store_registry._create_backend_from_provider(
        "chroma", root=str(tmp_path / "rs"), provider_options={"embedder": "hash"})
    assert type(backend).__name__ == "ChromaRecordStoreBackend" and backend.root == (tmp_path / "rs").resolve()
    store = record_store_registry.create(backend, mode="read_write", default_scope={"session_id": "s1", "agent_id": "a1"},
                                         default_search_scope={"session_id": "s2"})

    async def go():
        mem = await store.put(
            {"memory_scope": "GLOBAL_MEMORY", "summary": "User drinks green tea", "body": {"summary": "tea"},
             "tags": ["drink"], "importance": 0.8}, collection="memory", kind="global_memory",
            summary="User drinks green tea", scope={"memory_scope": "GLOBAL_MEMORY"}, source={"session_id": "s1"},
            meta={"tags": ["drink"]})
        note = await store.put({"title": "Quarterly plan"}, collection="notes", kind="plan")
        return mem, note, {
            "global_in_s2": await store.search(None, {"collection": "memory"}),
            "note_in_s2": await store.search(None, {"collection": "notes"}),
            "note_data": await store.get_data(note["id"]),
            "segment": await store.read_bounded(mem["id"], offset=0, limit=10),
            "envelope": await store.ref_envelope(note["id"]),
            "vector": await store.retrieve("green tea", method="vector", rerank=False),
        }

    mem, note, r = asyncio.run(go())
    assert mem["id"].startswith("mem_") and mem["scope"]["agent_id"] == "a1"
    # GLOBAL_MEMORY ignores the session filter 4.1.4.2+ adds to every search; other records keep it
    assert [x["id"] for x in r["global_in_s2"]] == [mem["id"]]
    assert r["note_in_s2"] == []
    assert r["note_data"] == {"title": "Quarterly plan"}
    assert r["segment"]["size"] == 10 and r["segment"]["eof"] is False and r["segment"]["ref"]["record_id"] == mem["id"]
    assert r["envelope"]["collection"] == "notes"
    assert r["vector"]["diagnostics"]["vector"]["used"] is True  # RecordStore.retrieve searches our vectors
    assert r["vector"]["items"][0]["ref"]["id"] == mem["id"]
    [record] = backend.vecmem_workspace.scan(scope=Scope.global_memory())
    assert record.id == mem["id"] and record.provenance.session_id == "s1"
    caps = store.capabilities() if hasattr(store, "capabilities") else backend.capabilities()
    assert {"embedding", "vector"} <= set(caps["materialized_components"])


def test_chroma_store_helper_and_the_agently_extra(chroma_server, tmp_path):
    from packaging.requirements import Requirement

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    [spec] = pyproject["project"]["optional-dependencies"]["agently"]
    req = Requirement(spec)
    for release in ("4.1.3.9", "4.1.4.1", "4.1.4.2", "4.1.4.10", version("agently")):
        assert req.specifier.contains(release), (spec, release)  # no downgrade of an installed release
    assert not req.specifier.contains("4.2.0")

    host, port = chroma_server
    server_ws = integration.chroma_store(f"http://{host}:{port}", embedder="hash", collection="helper_test")
    assert server_ws.mode == "server" and integration.chroma_store(f"{host}:{port}", embedder="hash",
                                                                   collection="helper_test") is server_ws
    embedded = integration.chroma_store(str(tmp_path / "mem"), embedder="hash")
    assert embedded.mode == "embedded" and integration.chroma_store(tmp_path / "mem", embedder="hash") is embedded
    with pytest.raises(ConfigurationError, match="HOST:PORT"):
        integration.chroma_store("localhost:http", embedder="hash")
    if LINE == integration.RECORD_STORE_LINE:  # the context source on a server store (no local snapshots)
        from agently.core import Session as AgentlySession

        session = AgentlySession("srv", settings={})
        session.use_memory(mode="VecMemory", memory_store=server_ws)
        source = session.create_memory_context_source()
        before = source.source_revision
        record = server_ws.put(_mem("GLOBAL_MEMORY", "User prefers window seats"))[0]
        assert source.source_revision != before
        page = asyncio.run(source.async_enumerate_descriptors(profile={}, cursor=None, limit=5))
        assert record.id in [d.source_ref for d in page.descriptors]

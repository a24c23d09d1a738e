"""agently 4.1.4.2+ only (collected on that line; ``test_agently_next_line`` runs it with 4.1.4.10):
AgentExecution runs through the context source, the context source itself, ``memory_store=`` binding and
re-binding, and the ``chroma`` RecordStore backend."""

from __future__ import annotations

import asyncio

import pytest
from _agently_support import FACT, SESSION_FACT, back_in_s1, mem, text

from agently_vecmem.errors import MemoryModeError
from agently_vecmem.filters import Scope
from agently_vecmem.integrations import agently as integration


# ------------------------------------------------------------------------------------------ RecordStore line
def test_agent_execution_reads_memory_through_the_context_source(line):
    script, agent, _ = line.start_vecmemory()
    line.ask(agent, f"Hi! {FACT} {SESSION_FACT}")

    agent.activate_session(session_id="s2")
    plugin = line.use_vecmemory(agent)
    assert agent.input("Where do I live?").start() == "Noted."  # an AgentExecution run
    s2 = text(script.agent_bodies[-1])
    assert "task_context_blocks" in s2 and "[GLOBAL_MEMORY]" in s2 and "Ada Lovelace" in s2
    assert "Zorblax" not in s2
    assert "select" in script.phases
    enumerated = [d for d in plugin.diagnostics if d["phase"] == "context_source"]
    assert enumerated and enumerated[-1]["visible"] == 1

    s1 = back_in_s1(agent, script)  # an AgentExecution run
    assert "Zorblax" in s1 and "Ada Lovelace" in s1


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
    low = ws.put(mem("GLOBAL_MEMORY", "User likes tea", importance=0.2))[0]
    r1 = source.source_revision
    high = ws.put(mem("SESSION_MEMORY", "Drafting an invitation for Zorblax", "s1", importance=0.9))[0]
    r2 = source.source_revision
    other = ws.put(mem("SESSION_MEMORY", "Other session secret", "s2", importance=1.0))[0]
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


def test_memory_store_binding_and_rebinding(line, tmp_path):
    from agently.base import record_store_registry

    agent = line.agent()
    agent.activate_session(session_id="s1")
    with pytest.raises(MemoryModeError, match="memory_store=chroma_store"):
        agent.activated_session.use_memory(mode="VecMemory")  # the agent's default store is no Chroma one
    ws = line.store()
    plugin = line.use_vecmemory(agent)
    assert plugin.require_store() is ws

    agent.activate_session(session_id="s2")
    agent.activate_session(session_id="s1")  # re-binds agent.record_store (local SQLite): refused, visibly
    assert agent.activated_session.memory is plugin and plugin.require_store() is ws
    assert any(d.get("reason") == "non_chroma_store_ignored" for d in plugin.diagnostics)

    other = record_store_registry.create(
        integration.chroma_record_backend(str(tmp_path / "other"), embedder="hash"), mode="read_write")
    agent.use_record_store(other)  # a Chroma record store: VecMemory follows it
    assert plugin.require_store() is other.backend.vecmem_workspace is not ws

    lazy = record_store_registry.create(str(tmp_path / "lazy"), provider="chroma", mode="read_write")
    with pytest.raises(MemoryModeError, match="chroma_record_backend"):  # 4.1.4.10 cannot materialize it
        agent.activated_session.use_memory(mode="VecMemory", memory_store=lazy)

    agent.activate_session(session_id="s3")  # no store given: the agent's record store, now a Chroma one
    agent.activated_session.use_memory(mode="VecMemory")
    assert agent.activated_session.memory.require_store() is other.backend.vecmem_workspace


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

"""agently 4.1.4.2+ only (collected on that line; ``test_agently_next_line`` runs it with 4.1.4.10):
AgentExecution runs through the context source, the context source itself, ``memory_store=`` binding and
re-binding, and the ``chroma`` RecordStore backend."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from _agently_support import FACT, SESSION_FACT, Script, back_in_s1, mem, text

from agently_vecmem.errors import MemoryModeError
from agently_vecmem.filters import Scope
from agently_vecmem.integrations import agently as integration
from agently_vecmem.records import MemoryRecord


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
    assert "select" not in script.phases  # only the required recall block is offered: no selector call
    [recall] = [d for d in plugin.diagnostics if d["phase"] == "context_source" and d["operation"] == "recall"]
    assert recall["visible"] == 1 and recall["memories"] == 1 and recall["query"] == "Where do I live?"
    assert recall["fallback"] is None and recall["plan"]["query"]  # VecMemory's pipeline ranked it

    s1 = back_in_s1(agent, script)  # an AgentExecution run
    assert "Zorblax" in s1 and "Ada Lovelace" in s1


def test_context_source_revision_order_scope_reads_and_budgets(line):
    from agently.core import Session as AgentlySession

    ws = line.store()
    session = AgentlySession("s1", settings={})
    session.use_memory(mode="VecMemory", memory_store=ws)
    session.settings.set("session.memory.VecMemory.context_source.offer_records", True)
    source = session.create_memory_context_source
    profile = {"projection_max_chars": 2000}

    def page(src, cursor=None, limit=10):
        return asyncio.run(src.async_enumerate_descriptors(profile=profile, cursor=cursor, limit=limit))

    empty = source()
    assert empty.source_kind == "session_memory"
    [recall] = page(empty).descriptors  # the required recall block comes first, with a small estimate
    assert recall.source_ref == "vecmem-recall" and recall.required and recall.estimated_chars <= 64
    low = ws.put(mem("GLOBAL_MEMORY", "User likes tea", importance=0.2))[0]
    r1 = source().source_revision
    high = ws.put(mem("SESSION_MEMORY", "Drafting an invitation for Zorblax", "s1", importance=0.9))[0]
    r2 = source().source_revision
    other = ws.put(mem("SESSION_MEMORY", "Other session secret", "s2", importance=1.0))[0]
    assert source().source_revision == r2  # invisible to s1: its revision does not move
    pinned = source()
    ws.update(low.id, summary="User likes green tea")
    assert pinned.source_revision == r2  # a source is pinned for its run
    r3 = source().source_revision
    assert len({empty.source_revision, r1, r2, r3}) == 4

    src = source()
    first = page(src, limit=2)
    assert [d.source_ref for d in first.descriptors] == ["vecmem-recall", high.id] and first.next_cursor == "2"
    second = page(src, cursor=first.next_cursor, limit=2)
    assert [d.source_ref for d in second.descriptors] == [low.id] and second.next_cursor is None
    assert first.source_revision == second.source_revision == r3
    assert first.descriptors[1].metadata["memory_scope"] == "SESSION_MEMORY"

    read = asyncio.run(src.async_read_exact(high.id, max_chars=10_000))
    assert read.completeness == "complete" and "Zorblax" in read.content and read.source_revision == r3
    part = asyncio.run(src.async_read_exact(high.id, max_chars=12))
    assert len(part.content) == 12 and part.completeness == "truncated" and part.next_range_start == 12
    rest = asyncio.run(src.async_read_exact(high.id, max_chars=10_000, range_start=12))
    assert part.content + rest.content == read.content and rest.next_range_start is None
    scoped = asyncio.run(src.async_read_scoped(high.id, query="zorblax", max_chars=20))
    assert "Zorblax" in scoped.content and len(scoped.content) <= 20
    with pytest.raises(PermissionError):
        asyncio.run(src.async_read_exact(other.id, max_chars=100))

    # the recall block: ranked for the query, whole items within max_chars, always complete
    ranked = asyncio.run(src.async_read_scoped("vecmem-recall", query="green tea", max_chars=10_000))
    assert ranked.completeness == "complete" and ranked.refs[0] == low.id and "Other session" not in ranked.content
    tight = asyncio.run(src.async_read_scoped("vecmem-recall", query="green tea", max_chars=130))
    assert len(tight.content) <= 130 and tight.completeness == "complete" and tight.refs == (low.id,)
    newest = asyncio.run(src.async_read_exact("vecmem-recall", max_chars=10_000))  # no query: importance, newest
    assert newest.refs == (high.id, low.id)
    diag = [d for d in session.memory.diagnostics if d.get("operation") == "recall"]
    assert diag[-1]["fallback"] == "importance_newest" and diag[-1]["reason"] == "no_query"

    # VecMemory's item budget caps what a block carries
    session.settings.set("session.memory.VecMemory.retrieve.budget.item_chars", 30)
    capped = asyncio.run(src.async_read_exact(high.id, max_chars=10_000))
    assert len(capped.content) <= 30 and capped.content.endswith("[truncated]")
    assert page(source()).descriptors[1].estimated_chars <= 30


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


# ------------------------------------------------------------------------------------------ issue 26: relevance
ORDER_FACT = "User's order id is A-100"
TOPICS = ("hiking in the Alps", "a new espresso machine", "learning the cello", "a trip to Lisbon",
          "repainting the kitchen", "adopting a cat", "a chess tournament", "tomato gardening")


class Selecting(Script):
    """:class:`Script` whose context selector names no block (``"none"``) or an unknown one (``"unknown"``);
    ``on_select`` runs inside the selector call (a write landing mid-run)."""

    def __init__(self, reply: str, on_select: Any = None) -> None:
        super().__init__()
        self.reply, self.on_select = reply, on_select

    def __call__(self, body: dict) -> Any:
        if "offered_context_blocks" not in text(body):
            return super().__call__(body)
        self.phases.append("select")
        if self.on_select is not None:
            self.on_select()
        return {"selected_keys": [] if self.reply == "none" else ["context-block:99999"]}


def seed_order_fact(store: Any, n: int) -> Any:
    """One old fact and ``n`` newer unrelated memories of the same importance (the issue's store)."""
    base = time.time() - 10 * 86400
    fact = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=ORDER_FACT, body={"summary": ORDER_FACT},
                        importance=0.5, created_at=base, updated_at=base)
    noise = [MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f"User mentioned {TOPICS[i % len(TOPICS)]} (note {i})",
                          body={"summary": f"note {i}"}, importance=0.5, created_at=base + 3600 + i,
                          updated_at=base + 3600 + i) for i in range(n)]
    store.put([fact, *noise])
    return fact


def fresh_agent(line: Any, store: Any, script: Script, *, offer_records: bool = False) -> tuple[Any, Any]:
    line.server.on("chat", script)
    agent = line.agent()
    if offer_records:
        agent.set_settings("session.memory.VecMemory.context_source.offer_records", True)
    agent.activate_session(session_id="fresh")
    agent.activated_session.use_memory(mode="VecMemory", memory_store=store)
    plugin = agent.activated_session.memory
    assert plugin.config().context_source.offer_records is offer_records
    return agent, plugin


def source_ops(plugin: Any, operation: str) -> list[dict]:
    return [d for d in plugin.diagnostics if d["phase"] == "context_source" and d["operation"] == operation]


def test_old_fact_among_300_newer_memories_reaches_the_agent_execution_request(line):
    store = line.store()
    fact = seed_order_fact(store, 300)
    script = Script()
    agent, plugin = fresh_agent(line, store, script)
    agent.input("What is my order id?").start()  # an AgentExecution run
    assert "order id is A-100" in text(script.agent_bodies[-1])  # (the body escapes the apostrophe)
    [recall] = source_ops(plugin, "recall")
    assert recall["refs"][0] == fact.id and recall["visible"] == 301 and recall["fallback"] is None
    assert "select" not in script.phases  # one required block and nothing optional: no selector call


def test_a_selector_naming_no_or_unknown_blocks_still_gets_the_recall_block(line):
    store = line.store()
    fact = seed_order_fact(store, 300)
    for reply in ("none", "unknown"):  # an unknown key voids the selector's whole reply
        script = Selecting(reply)
        agent, plugin = fresh_agent(line, store, script, offer_records=True)
        agent.input("What is my order id?").start()
        assert "select" in script.phases  # the 255 newest memories were offered; none was kept
        assert "order id is A-100" in text(script.agent_bodies[-1])
        assert source_ops(plugin, "recall")[-1]["refs"][0] == fact.id


def test_writes_during_the_run_do_not_fail_it(line, monkeypatch):
    from agently_vecmem.integrations.agently.context_source import VecMemoryContextSource

    store = line.store()
    seed_order_fact(store, 300)
    write = lambda tag: store.put(mem("GLOBAL_MEMORY", f"Concurrent write {tag}"))  # noqa: E731
    original = VecMemoryContextSource.enumerate_descriptors

    def enumerate_then_write(self, *, profile, cursor, limit):
        page = original(self, profile=profile, cursor=cursor, limit=limit)
        write(f"page {cursor}")  # another writer commits between two descriptor pages
        return page

    monkeypatch.setattr(VecMemoryContextSource, "enumerate_descriptors", enumerate_then_write)
    script = Selecting("none", on_select=lambda: write("selection"))
    agent, plugin = fresh_agent(line, store, script, offer_records=True)
    agent.input("What is my order id?").start()
    assert "order id is A-100" in text(script.agent_bodies[-1])  # (the body escapes the apostrophe)
    pages = source_ops(plugin, "enumerate")
    assert len(pages) == 2 and len({p["revision"] for p in pages}) == 1  # one pinned revision, one build
    assert store.scan(scope=Scope.global_memory(), limit=1000).__len__() == 301 + 3


def test_the_next_run_syncs_through_the_change_feed(line):
    store = line.store()
    seed_order_fact(store, 300)
    script = Script()
    agent, plugin = fresh_agent(line, store, script, offer_records=True)
    agent.input("What is my order id?").start()
    assert sum(p["returned"] for p in source_ops(plugin, "enumerate")) == 302  # first run: recall + 301 records
    plugin.diagnostics.clear()
    store.put(mem("GLOBAL_MEMORY", "User likes green tea"))
    agent.input("What do I drink?").start()
    assert source_ops(plugin, "enumerate") == []  # no record re-read: Agently applied our delta
    [delta] = source_ops(plugin, "changes")
    assert 1 <= delta["changes"] <= 2  # the new memory (and the first run's stored turn, if any)
    assert "green tea" in text(script.agent_bodies[-1])


def test_agent_execution_on_a_chroma_server_store(line, chroma_server):
    host, port = chroma_server
    store = integration.chroma_store(f"http://{host}:{port}", embedder="hash", collection=f"i26_{uuid.uuid4().hex[:8]}")
    fact = seed_order_fact(store, 300)
    script = Script()
    agent, plugin = fresh_agent(line, store, script)
    agent.input("What is my order id?").start()
    assert "order id is A-100" in text(script.agent_bodies[-1])  # (the body escapes the apostrophe)
    assert source_ops(plugin, "recall")[-1]["refs"][0] == fact.id
    plugin.diagnostics.clear()
    store.put(mem("GLOBAL_MEMORY", "User likes green tea"))
    agent.input("What do I drink?").start()
    assert source_ops(plugin, "enumerate") == [] and len(source_ops(plugin, "changes")) == 1
    assert "green tea" in text(script.agent_bodies[-1])


def test_agent_execution_serves_each_user_their_own_memory(line):
    """Per-user stores (``chroma_store(..., user=...)``): an AgentExecution run of bob never sees alice's fact
    among 300 memories of hers; a run of alice's does."""
    root = line.store()
    seed_order_fact(root.for_user("alice"), 300)
    script = Script()
    bob, bob_plugin = fresh_agent(line, root.for_user("bob"), script)
    bob.input("What is my order id?").start()
    assert "A-100" not in text(script.agent_bodies[-1])
    [recall] = source_ops(bob_plugin, "recall")
    assert recall["visible"] == 0 and recall["refs"] == []
    alice, _ = fresh_agent(line, integration.chroma_store(str(line.path / "chroma"), embedder="hash", user="alice"),
                           script)
    alice.input("What is my order id?").start()
    assert "order id is A-100" in text(script.agent_bodies[-1])

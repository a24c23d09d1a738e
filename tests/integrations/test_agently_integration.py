"""agently-vecmem inside the real agently 4.1.4.1: the ``chroma`` Workspace provider and the ``VecMemory`` mode.

An agent is pointed at the loopback OpenAI-compatible server (``stream: False``: the loopback server answers
with plain JSON completions). Agently's own requests carry no ``X-VecMem-Phase`` header, so they arrive as
phase ``"chat"``; the handler tells AgentlyMemory's plan / rerank / extract requests apart by their instruct text.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("agently")

# tests/_agently_support.py (tests/ is on sys.path): the scripted model, the host-line adapter, the facts and
# the autouse ``installed`` fixture shared with tests/agently_lines.

from _agently_support import EXTRACTED, FACT, SESSION_FACT, Line, Script, back_in_s1, installed, text  # noqa: E402, F401
from agently import Agently  # noqa: E402

from agently_vecmem.filters import ALL_SCOPES, Scope  # noqa: E402
from agently_vecmem.integrations import agently as integration  # noqa: E402
from agently_vecmem.testing import DeterministicEmbedder  # noqa: E402


def _last_prepare(plugin: Any) -> dict:
    return [d for d in plugin.diagnostics if d["phase"] == "prepare_request"][-1]


# ---------------------------------------------------------------------------------------------- install
def test_install_is_idempotent_and_reversible():
    integration.install()
    integration.install()
    assert Agently.workspace.list_backend_providers().count("chroma") == 1
    assert Agently.plugin_manager.get_plugin("SessionMemory", "VecMemory") is integration.AgentlyVecMemory
    assert integration.is_installed()
    integration.uninstall()
    integration.uninstall()
    assert not integration.is_installed()
    assert "chroma" not in Agently.workspace.list_backend_providers()
    assert "AgentlyMemory" in Agently.plugin_manager.get_plugin_list("SessionMemory")
    import agently_vecmem.agently  # noqa: F401 - importing installs only once per process

    integration.install()
    assert integration.is_installed()


def test_base_package_import_does_not_touch_agently():
    code = "import sys, agently_vecmem, agently_vecmem.cli; print('agently' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------------------------------- backend
def test_chroma_provider_backend_contract(tmp_path):
    ws = Agently.create_workspace(str(tmp_path / "w"), provider="chroma", provider_options={"embedder": "hash"})
    backend = ws.backend
    assert isinstance(backend, integration.ChromaWorkspaceBackend)
    assert (ws.files_root / "AGENTLY_WORKSPACE.md").exists()

    async def go():
        mem = await ws.put(
            {"memory_scope": "GLOBAL_MEMORY", "summary": "User drinks green tea", "body": {"summary": "tea"},
             "tags": ["drink"], "importance": 0.8, "provenance": {"plugin": "AgentlyMemory"}},
            collection="memory", kind="global_memory", summary="User drinks green tea",
            scope={"memory_scope": "GLOBAL_MEMORY"}, source={"plugin": "AgentlyMemory", "session_id": "s1"},
            meta={"tags": ["drink"], "memory_scope": "GLOBAL_MEMORY", "session_id": None},
        )
        note = await ws.put({"title": "Quarterly plan", "owner": "Bob"}, collection="notes", kind="plan",
                            scope={"project": "atlas"}, meta={"owner": "bob"})
        text = await ws.put("free text about the moon landing", collection="notes", scope={"project": "zeus"})
        return mem, note, text

    mem, note, text = asyncio.run(go())
    assert mem["id"].startswith("mem_") and mem["collection"] == "memory" and mem["kind"] == "global_memory"
    assert mem["scope"] == {"memory_scope": "GLOBAL_MEMORY"} and mem["meta"]["tags"] == ["drink"]
    assert note["id"].startswith("rec_") and note["path"].endswith(".json")
    # memory records are MemoryRecords of the ChromaWorkspace VecMemory uses
    [record] = backend.vecmem_workspace.scan(scope=Scope.global_memory())
    assert record.id == mem["id"] and record.provenance.plugin == "AgentlyMemory"

    async def reads():
        return {
            "data": await ws.get_data(mem),
            "text": await ws.get(note),
            "note_data": await ws.get_data(note["id"]),
            "by_path": await ws.get_data(text["path"]),
            "scope": await ws.grep(None, {"scope.project": "atlas"}),
            "meta": await ws.grep(None, {"meta.owner": "bob"}),
            "kind": await ws.grep(None, {"collection": "memory", "kind": "global_memory"}),
            "none_kind": await ws.grep(None, {"collection": "memory", "kind": "session_memory"}),
            "query": await ws.grep("moon", {"collection": "notes"}),
            "like": await ws.grep("Quarter", None),
            "recent": await ws.grep(None, None),
            "vector": await ws.retrieve("green tea", method="vector", rerank=False),
        }

    r = asyncio.run(reads())
    assert r["data"]["summary"] == "User drinks green tea" and r["data"]["memory_scope"] == "GLOBAL_MEMORY"
    assert set(r["data"]) >= {"memory_scope", "summary", "body", "tags", "importance", "provenance", "vector_index"}
    assert json.loads(r["text"]) == {"title": "Quarterly plan", "owner": "Bob"}
    assert r["note_data"]["owner"] == "Bob" and r["by_path"] == "free text about the moon landing"
    assert [x["id"] for x in r["scope"]] == [note["id"]]
    assert [x["id"] for x in r["meta"]] == [note["id"]]
    assert [x["id"] for x in r["kind"]] == [mem["id"]] and r["none_kind"] == []
    assert [x["id"] for x in r["query"]] == [text["id"]]
    assert [x["id"] for x in r["like"]] == [note["id"]]  # "Quarter" is no token of "Quarterly": LIKE fallback
    assert [x["id"] for x in r["recent"]] == [text["id"], note["id"], mem["id"]]  # newest first
    diag = r["vector"]["diagnostics"]
    assert diag["vector"]["used"] is True and diag["vector"]["similarity"] == "cosine"
    assert r["vector"]["items"][0]["ref"]["id"] == mem["id"]
    caps = ws.capabilities()
    assert caps["vector_search"] is True and caps["backend"] == "chroma"


def test_provider_rejects_unknown_options(tmp_path):
    from agently_vecmem.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="unknown chroma provider option"):
        Agently.create_workspace(str(tmp_path / "w"), provider="chroma", provider_options={"embeder": "hash"})


# ---------------------------------------------------------------------------------------------- VecMemory
def test_vecmemory_mode_remembers_global_facts_across_sessions(srv, tmp_path):
    script, agent, plugin = Line(srv, tmp_path).start_vecmemory()
    assert isinstance(plugin, integration.AgentlyVecMemory)
    assert agent.input(f"Hi! {FACT} {SESSION_FACT}").start() == "Noted."
    stored = plugin.diagnostics[-1]
    assert stored["phase"] == "after_turn" and stored["stored"] == 2, stored

    agent.activate_session(session_id="s2")
    agent.activated_session.use_memory(mode="VecMemory")
    assert agent.input("Where do I live?").start() == "Noted."
    s2_request = text(script.agent_bodies[-1])
    assert "[GLOBAL_MEMORY]" in s2_request and "Ada Lovelace" in s2_request
    assert s2_request.index("[GLOBAL_MEMORY]") < s2_request.index("Ada Lovelace")
    assert "Zorblax" not in s2_request  # session memory of s1 stays in s1

    plugin2 = agent.activated_session.memory
    prep = _last_prepare(plugin2)
    assert prep["packages"]["GLOBAL_MEMORY"]["selected_count"] == 1
    assert prep["packages"]["GLOBAL_MEMORY"]["memory_rerank_skipped"]["reason"] == "candidate_count_below_min"
    # every memory phase went to the agent's configured model (the loopback server), with our phase header
    assert srv.requests_for("extract") and all(r.body["model"] == "test" for r in srv.requests_for("extract"))
    assert script.phases.count("agent") == 2

    # and back in s1 the session fact is there
    s1_request = back_in_s1(agent, script)
    assert "Zorblax" in s1_request and "Ada Lovelace" in s1_request


def test_vecmemory_without_usable_model_runs_deterministic_path(tmp_path):
    agent = Agently.create_agent()
    agent.set_settings("OpenAICompatible", {"base_url": "https://api.openai.com/v1", "api_key": None, "model": None})
    agent.use_workspace(str(tmp_path / "ws"), provider="chroma", provider_options={"embedder": "hash"})
    agent.activate_session(session_id="s1")
    session = agent.activated_session
    session.use_memory(mode="VecMemory")
    plugin = session.memory
    out = asyncio.run(plugin.after_turn(session=session, user_content="My favourite colour is teal.",
                                        assistant_content="Noted.", result=None, settings=session.settings))
    assert out["stored"] == 1 and out["reason"] == "no_model" and out["raw_turn_kept"] is True
    unavailable = [d for d in plugin.diagnostics if d.get("reason") == "model_unavailable"]
    assert unavailable and unavailable[0]["detail"] == "default_openai_endpoint_without_auth"

    from agently.core import Prompt

    prompt = Prompt(Agently.plugin_manager, session.settings)
    prompt.set("input", "what colour do I like?")
    diag = asyncio.run(plugin.prepare_request(prompt=prompt, session=session, settings=session.settings))
    assert diag["plan"]["diagnostics"]["reason"] == "deterministic_fallback"
    injected = prompt.get("SESSION_MEMORY")
    assert injected and "teal" in injected[0]["content"]


def test_model_settings_read_through_agently_chain(srv):
    agent = Agently.create_agent()
    agent.set_settings("OpenAICompatible", {"base_url": srv.base_url, "model": "m1",
                                            "auth": {"api_key": "k1", "headers": {"X-Org": "o"}}})
    kwargs, reason = integration.model_settings_from_agently(agent.settings)
    assert reason is None and kwargs["model"] == "m1" and kwargs["api_key"] == "k1"
    assert kwargs["base_url"] == srv.base_url and kwargs["extra_headers"] == {"X-Org": "o"}
    agent.set_settings("OpenAICompatible", {"full_url": srv.base_url + "/chat/completions"})
    kwargs, _ = integration.model_settings_from_agently(agent.settings)
    assert kwargs["base_url"] == srv.base_url
    fresh = Agently.create_agent()
    fresh.set_settings("OpenAICompatible", {"base_url": "https://api.openai.com/v1"})
    assert integration.model_settings_from_agently(fresh.settings) == (None, "default_openai_endpoint_without_auth")


# ---------------------------------------------------------------------------------------------- AgentlyMemory
def test_builtin_agently_memory_runs_unchanged_on_chroma_provider(srv, tmp_path):
    script = Script(extract_memories=EXTRACTED)
    srv.on("chat", script)
    agent = Line(srv, tmp_path).agent()
    agent.activate_session(session_id="s1")
    agent.activated_session.use_memory(mode="AgentlyMemory")
    agent.input(f"Hi! {FACT} {SESSION_FACT}").start()
    assert "extract" in script.phases

    ws = agent.workspace.backend.vecmem_workspace
    records = ws.scan(scope=ALL_SCOPES)
    assert {r.memory_scope for r in records} == {"GLOBAL_MEMORY", "SESSION_MEMORY"}
    assert all(r.provenance.plugin == "AgentlyMemory" for r in records)
    session_record = next(r for r in records if r.memory_scope == "SESSION_MEMORY")
    assert session_record.session_id == "s1"

    agent.activate_session(session_id="s2")
    agent.activated_session.use_memory(mode="AgentlyMemory")
    agent.input("Where do I live?").start()
    s2_request = text(script.agent_bodies[-1])
    assert "[GLOBAL_MEMORY]" in s2_request and "Ada Lovelace" in s2_request
    assert "Zorblax" not in s2_request
    plugin = agent.activated_session.memory
    packages = _last_prepare(plugin)["packages"]
    skipped = packages["GLOBAL_MEMORY"]["memory_rerank_skipped"]
    assert skipped == {"enabled": True, "reason": "candidate_count_below_min", "candidate_count": 1,
                       "rerank_min_candidates": 2}
    # AgentlyMemory stored vector metadata naming our index
    ref = ws.scan(scope=Scope.global_memory())[0]
    assert ref.vector_index.available is True


def test_agently_memory_and_vecmemory_read_each_others_records(srv, tmp_path):
    script = Script(extract_memories=EXTRACTED[:1])
    srv.on("chat", script)
    srv.on("extract", lambda body: {"memories": [
        {"scope": "GLOBAL_MEMORY", "summary": "The user's dog is called Biscuit.", "tags": ["pet"],
         "importance": 0.8}]} if "Biscuit" in text(body) else {"memories": []})
    agent = Line(srv, tmp_path).agent()

    agent.activate_session(session_id="a")  # AgentlyMemory writes
    agent.activated_session.use_memory(mode="AgentlyMemory")
    agent.input(FACT).start()
    agent.activate_session(session_id="b")  # VecMemory writes and reads the AgentlyMemory record
    agent.activated_session.use_memory(mode="VecMemory")
    agent.input("My dog is called Biscuit. Where do I live?").start()
    assert "Ada Lovelace" in text(script.agent_bodies[-1])
    agent.activate_session(session_id="c")  # AgentlyMemory reads the VecMemory record
    agent.activated_session.use_memory(mode="AgentlyMemory")
    agent.input("What is my dog called?").start()
    last = text(script.agent_bodies[-1])
    assert "Biscuit" in last and "Ada Lovelace" in last


def test_agently_memory_rerank_empty_fallback_diagnostic(srv, tmp_path):
    agent = Line(srv, tmp_path).agent()
    ws = agent.workspace

    async def seed():
        refs = []
        for summary in ("User lives in Paris", "User lives near the Seine"):
            refs.append(await ws.put(
                {"memory_scope": "GLOBAL_MEMORY", "summary": summary, "body": {"summary": summary},
                 "tags": [], "importance": 0.5}, collection="memory", kind="global_memory",
                summary=summary, scope={"memory_scope": "GLOBAL_MEMORY"}, source={}, meta={"tags": []}))
        return refs

    refs = asyncio.run(seed())
    script = Script()

    def drop_all(body):
        if "Judge which retrieved memory candidates" in text(body):
            script.phases.append("rerank")
            return {"decisions": [{"id": f"record:{r['id']}", "useful": False, "score": 0.0, "reason": "no"}
                                  for r in refs]}
        return script(body)

    srv.on("chat", drop_all)
    agent.set_settings("session.memory.AgentlyMemory.extract.enabled", False)
    agent.activate_session(session_id="s1")
    agent.activated_session.use_memory(mode="AgentlyMemory")
    agent.input("Where do I live?").start()
    assert "rerank" in script.phases
    diag = _last_prepare(agent.activated_session.memory)["packages"]["GLOBAL_MEMORY"]
    assert diag["memory_rerank_empty_fallback"]["reason"] == "rerank_dropped_all_memory_candidates"
    assert diag["selected_count"] == 2
    assert "User lives in Paris" in text(script.agent_bodies[-1])


# ---------------------------------------------------------------------------------------------- real MiniLM
@pytest.mark.slow
def test_agently_vector_retrieval_with_real_minilm(tmp_path):
    ws = Agently.create_workspace(str(tmp_path / "w"), provider="chroma", provider_options={"embedder": "minilm"})

    async def go():
        for summary in ("The user drinks green tea every morning", "The user's car is a red hatchback",
                        "The user works as a nurse in Lyon"):
            await ws.put({"memory_scope": "GLOBAL_MEMORY", "summary": summary, "body": {"summary": summary},
                          "tags": [], "importance": 0.5}, collection="memory", kind="global_memory",
                         summary=summary, scope={"memory_scope": "GLOBAL_MEMORY"}, source={}, meta={"tags": []})
        vec = await ws.retrieve("favourite hot beverage", method="vector", rerank=False, top_n=1,
                                selection="top_n")
        job = await ws.retrieve("which profession", method="hybrid", rerank=False)
        return vec, job

    vec, job = asyncio.run(go())
    assert vec["diagnostics"]["vector"]["used"] is True
    assert "green tea" in vec["items"][0]["summary"]
    assert "nurse" in job["items"][0]["summary"]
    assert ws.backend.embedder.model_id.endswith("all-MiniLM-L6-v2")


def test_deterministic_embedder_object_as_provider_option(tmp_path):
    emb = DeterministicEmbedder(dim=64)
    ws = Agently.create_workspace(str(tmp_path / "w"), provider="chroma", provider_options={"embedder": emb})
    assert ws.backend.embedder is emb

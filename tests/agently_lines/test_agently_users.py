"""Many users on one store, through the real agently on every host line: two users' agents bound to the same
Chroma store (``provider_options={"user": ...}`` on 4.1.3.9–4.1.4.1, ``chroma_store(..., user=...)`` on
4.1.4.2+) never see each other's memories, while each user's next session sees their own."""

from __future__ import annotations

from _agently_support import EXTRACTED, FACT, LINE, SESSION_FACT, Script, text
from agently import Agently

from agently_vecmem.filters import ALL_SCOPES
from agently_vecmem.integrations import agently as integration


def _agent(line, user: str):  # noqa: ANN001, ANN202
    agent = Agently.create_agent()
    agent.set_settings("OpenAICompatible",
                       {"base_url": line.server.base_url, "model": "test", "api_key": "x", "stream": False})
    agent.set_settings("session.input_keys", ["input"])
    if LINE == integration.WORKSPACE_LINE:
        agent.use_workspace(str(line.path), provider="chroma", provider_options={"embedder": "hash", "user": user})
    return agent


def _use_memory(line, agent, user: str, session_id: str):  # noqa: ANN001, ANN202
    agent.activate_session(session_id=session_id)
    if LINE == integration.WORKSPACE_LINE:
        agent.activated_session.use_memory(mode="VecMemory")
    else:
        store = integration.chroma_store(str(line.path / "chroma"), embedder="hash", user=user)
        agent.activated_session.use_memory(mode="VecMemory", memory_store=store)
    return agent.activated_session.memory


def test_two_users_on_one_store_never_see_each_other(line):
    script = Script()
    line.server.on("chat", script)
    extract = [{"memories": EXTRACTED}]
    line.server.on("extract", lambda body: extract.pop(0) if extract else {"memories": []})

    alice = _agent(line, "alice")
    alice_memory = _use_memory(line, alice, "alice", "chat-1")
    line.ask(alice, f"Hi! {FACT} {SESSION_FACT}")
    assert [d for d in alice_memory.diagnostics if d["phase"] == "after_turn"][-1]["stored"] == 2

    bob = _agent(line, "bob")  # same session id as alice's on purpose
    bob_memory = _use_memory(line, bob, "bob", "chat-1")
    line.ask(bob, "Where do I live? What am I drafting?")
    asked = text(script.agent_bodies[-1])
    assert "Ada Lovelace" not in asked and "Zorblax" not in asked
    prep = [d for d in bob_memory.diagnostics if d["phase"] == "prepare_request"][-1]
    assert prep["user_id"] == "bob"
    assert prep["packages"]["GLOBAL_MEMORY"]["selected_count"] == 0

    alice2 = _agent(line, "alice")
    _use_memory(line, alice2, "alice", "chat-2")
    line.ask(alice2, "Where do I live?")
    assert "Ada Lovelace" in text(script.agent_bodies[-1])  # her durable fact follows her
    assert "Zorblax" not in text(script.agent_bodies[-1])  # her session memory stays in chat-1

    store = integration.chroma_store(str(line.path / "chroma"), embedder="hash")
    assert store.user_counts().get("alice") == 2 and "bob" not in {r.user_id for r in
                                                                    store.for_user("alice").scan(scope=ALL_SCOPES)}
    assert store.scan(scope=ALL_SCOPES) == []  # the default user holds nothing of theirs

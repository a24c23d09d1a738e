"""The memory plugins on a real ``chroma run`` server, two Workspaces standing for two worker processes:
``VecMemory`` through ``Session`` (the loopback model, the real ``openai`` client), and Agently's own
``AgentlyMemory`` on the ``chroma`` provider of the real agently 4.1.4.1 (its public API only)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from _server_worker import _consolidate, _decide, _extract

from agently_vecmem.filters import Scope
from agently_vecmem.llm import OpenAIChatModel
from agently_vecmem.session import Session
from agently_vecmem.testing import DeterministicEmbedder, LoopbackOpenAIServer
from agently_vecmem.workspace import ChromaWorkspace


def _chat_bodies(server: LoopbackOpenAIServer) -> list[str]:
    return [json.dumps(r.body) for r in server.requests_for("chat")]


def test_vecmemory_sessions_in_two_workers_share_memory(chroma_server, srv) -> None:  # noqa: ANN001
    host, port = chroma_server
    name = f"vm-{uuid.uuid4().hex[:8]}"
    for phase, handler in (("retrieve_plan", _decide), ("rerank", _decide), ("extract", _extract),
                           ("consolidate", _consolidate)):
        srv.on(phase, handler)
    model = OpenAIChatModel(model="test", base_url=srv.base_url, api_key="x", max_retries=0, timeout=5)
    a = ChromaWorkspace(host=host, port=port, collection=name, embedder=DeterministicEmbedder(dim=64))
    b = ChromaWorkspace(host=host, port=port, collection=name, embedder=DeterministicEmbedder(dim=64))
    on_a = Session(id="alice").use_memory(mode="VecMemory", workspace=a, model=model)
    on_b = Session(id="bob").use_memory(mode="VecMemory", workspace=b, model=model)
    alice_on_b = Session(id="alice").use_memory(mode="VecMemory", workspace=b, model=model)

    on_a.chat("Please remember tok-globalfact (scope=GLOBAL_MEMORY).", model=model)
    on_a.chat("Please remember tok-alicefact (scope=SESSION_MEMORY).", model=model)
    assert [r.summary for r in a.scan(scope=Scope.global_memory())] == ["fact tok-globalfact"]

    on_b.chat("What do you know about tok-globalfact and tok-alicefact?", model=model)
    sent = _chat_bodies(srv)[-1]
    assert "fact tok-globalfact" in sent, "the other worker's global fact reaches the model"
    assert "fact tok-alicefact" not in sent, "alice's session memory stays in alice's session"
    alice_on_b.chat("What about tok-alicefact?", model=model)
    assert "fact tok-alicefact" in _chat_bodies(srv)[-1], "a session resumed in another worker keeps its memory"
    # b wrote nothing through the memory pipeline on a's facts; a sees b's own new memory at once
    on_b.chat("Please remember tok-bobfact (scope=GLOBAL_MEMORY).", model=model)
    on_a.chat("And tok-bobfact?", model=model)
    assert "fact tok-bobfact" in _chat_bodies(srv)[-1]
    assert a._changes.stats["reloads"] == 0 and b._changes.stats["reloads"] == 0
    a.close()
    b.close()


# ---------------------------------------------------------------------------------------------- AgentlyMemory
FACT = "The user's name is Ada Lovelace and she lives in Paris."


class _AgentlyScript:
    """Answers agently's un-headed requests: AgentlyMemory's phases by their instruct text, else the agent."""

    def __init__(self) -> None:
        self.agent_bodies: list[dict[str, Any]] = []
        self.extracted = False

    def __call__(self, body: dict[str, Any]) -> Any:
        text = "\n".join(m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
                         for m in body.get("messages") or [])
        if "Generate a compact retrieval query" in text:
            return {"query": "where does the user live name", "tags": [], "include_global": True,
                    "include_session": True}
        if "Judge which retrieved memory candidates" in text:
            return {"decisions": []}
        if "Extract durable memories" in text:
            if self.extracted or "Ada Lovelace" not in text:
                return {"memories": []}
            self.extracted = True
            return {"memories": [{"scope": "GLOBAL_MEMORY", "summary": FACT, "body": {"summary": FACT},
                                  "tags": ["profile"], "importance": 0.9}]}
        self.agent_bodies.append(body)
        return "Noted."


def test_agently_memory_on_the_chroma_provider_shares_a_server(chroma_server, tmp_path) -> None:  # noqa: ANN001
    pytest.importorskip("agently")
    from agently import Agently

    from agently_vecmem.integrations import agently as integration

    integration.install()
    host, port = chroma_server
    collection = f"am-{uuid.uuid4().hex[:8]}"
    script = _AgentlyScript()
    with LoopbackOpenAIServer() as llm:
        llm.on("chat", script)

        def agent(root: str) -> Any:
            a = Agently.create_agent()
            a.set_settings("OpenAICompatible", {"base_url": llm.base_url, "model": "test", "api_key": "x",
                                                "stream": False})
            a.set_settings("session.input_keys", ["input"])
            a.use_workspace(str(tmp_path / root), provider="chroma",
                            provider_options={"embedder": "hash", "host": host, "port": port,
                                              "collection": collection})
            return a

        first, second = agent("worker1"), agent("worker2")
        first.activate_session(session_id="s1")
        first.activated_session.use_memory(mode="AgentlyMemory")
        first.input(f"Hi! {FACT}").start()
        assert script.extracted
        second.activate_session(session_id="s2")
        second.activated_session.use_memory(mode="AgentlyMemory")
        second.input("Where do I live?").start()
        sent = json.dumps(script.agent_bodies[-1])
        assert "Ada Lovelace" in sent, "the memory written through the first worker reaches the second's agent"

"""Shared parts of the Agently tests (``tests/agently_lines`` on every host line, ``test_agently_integration`` on
4.1.4.1): the scripted model, the per-line adapter, the facts, the install fixture.

Imported by name (``tests/`` is on ``sys.path``, see ``tests/conftest.py``), also in the child run of
``test_agently_next_line``."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from agently import Agently

from agently_vecmem.integrations import agently as integration
from agently_vecmem.records import MemoryRecord

LINE = integration.host_line()

FACT = "The user's name is Ada Lovelace and she lives in Paris."
SESSION_FACT = "In this chat the user is drafting a birthday invitation for Zorblax."
EXTRACTED = [
    {"scope": "GLOBAL_MEMORY", "summary": FACT, "body": {"summary": FACT}, "tags": ["profile"], "importance": 0.9},
    {"scope": "SESSION_MEMORY", "summary": SESSION_FACT, "body": {"summary": SESSION_FACT}, "tags": ["task"],
     "importance": 0.6},
]


@pytest.fixture(autouse=True)
def installed() -> Any:
    """agently-vecmem installed around every test (a test may uninstall it); autouse where imported."""
    integration.install()
    yield
    integration.install()


def text(body: dict) -> str:
    """The text of a chat request: its messages' contents, one a line (JSON for non-text contents)."""
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
        body_text = text(body)
        if "offered_context_blocks" in body_text:  # 4.1.4.2+ TaskContext selection: keep every offered block
            self.phases.append("select")
            return {"selected_keys": sorted(set(re.findall(r"context-block:[0-9]+", body_text)))}
        if "Generate a compact retrieval query" in body_text:
            self.phases.append("plan")
            return {"query": "where does the user live name", "tags": [], "include_global": True,
                    "include_session": True}
        if "Judge which retrieved memory candidates" in body_text:
            self.phases.append("rerank")
            return {"decisions": []}
        if "Extract durable memories" in body_text:
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

    def start_vecmemory(self) -> tuple[Script, Any, Any]:
        """The common opening: a :class:`Script` on ``chat``, ``extract`` answering :data:`EXTRACTED` once, and
        an agent in session ``s1`` on VecMemory. Returns ``(script, agent, plugin)``."""
        script = Script()
        self.server.on("chat", script)
        extract = [{"memories": EXTRACTED}]
        self.server.on("extract", lambda body: extract.pop(0) if extract else {"memories": []})
        agent = self.agent()
        agent.activate_session(session_id="s1")
        return script, agent, self.use_vecmemory(agent)

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


def back_in_s1(agent: Any, script: Script, ask: Any = None) -> str:
    """Re-activate session ``s1`` and ask what the user is drafting (``ask(agent, text)``, default
    ``agent.input(text).start()``); returns the text the agent was sent — it should hold both facts."""
    agent.activate_session(session_id="s1")
    if ask is None:
        agent.input("What am I drafting?").start()
    else:
        ask(agent, "What am I drafting?")
    return text(script.agent_bodies[-1])


def server_models(server: Any, phase: str) -> set[str]:
    return {r.body["model"] for r in server.requests_for(phase)}


def mem(scope: str, summary: str, session: str | None = None, importance: float = 0.5) -> MemoryRecord:
    return MemoryRecord(memory_scope=scope, session_id=session, summary=summary, importance=importance,
                        body={"summary": summary})

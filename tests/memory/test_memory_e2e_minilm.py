"""End to end on the real MiniLM embedder and embedded Chroma: a fact told in one session is found in
another by meaning (no shared keywords), while the first session's own memory stays private."""

from __future__ import annotations

import json

import pytest

from agently_vecmem.filters import Scope
from agently_vecmem.llm.openai_compat import OpenAIChatModel
from agently_vecmem.session import Session
from agently_vecmem.testing import LoopbackOpenAIServer
from agently_vecmem.workspace import ChromaWorkspace

pytestmark = pytest.mark.slow

FACT = "User's dog Biscuit is a beagle"
PRIVATE = "In this conversation the user is drafting a wedding toast"


def test_fact_from_session_one_is_injected_in_session_two(minilm, tmp_path) -> None:
    ws = ChromaWorkspace(tmp_path / "store", embedder=minilm)
    with LoopbackOpenAIServer() as server:
        model = OpenAIChatModel(model="test", base_url=server.base_url, api_key="x", max_retries=0, timeout=10)
        server.on("retrieve_plan", lambda body: {"query": "pet", "decisions": []})

        s1 = Session(id="s1").use_memory(mode="VecMemory", workspace=ws, model=model)
        server.script("chat", "What a lovely dog! Good luck with the toast.")
        server.script("extract", {"memories": [
            {"scope": "GLOBAL_MEMORY", "summary": FACT, "body": {"summary": FACT, "details": {"breed": "beagle"},
                                                                  "confidence": 0.95},
             "tags": ["pet", "dog"], "importance": 0.8},
            {"scope": "SESSION_MEMORY", "summary": PRIVATE, "tags": ["task"], "importance": 0.6},
        ]})
        s1.chat("My dog Biscuit is a beagle. Also, I'm drafting a wedding toast.", model=model)
        assert len(ws.scan(scope=Scope.global_memory())) == 1
        assert len(ws.scan(scope=Scope.session_memory("s1"))) == 1
        assert ws.scan(scope=Scope.global_memory())[0].vector_index.model == minilm.model_id

        s2 = Session(id="s2").use_memory(mode="VecMemory", workspace=ws, model=model)
        server.script("chat", "Biscuit is a beagle.")
        server.script("extract", {"memories": []})
        mark = len(server.requests)
        assert s2.chat("what breed is my pet?", model=model) == "Biscuit is a beagle."

        chat = next(m["content"] for m in server.chat_bodies("chat")[-1]["messages"] if m["role"] == "user")
        global_section = chat.split("[GLOBAL_MEMORY]:", 1)[1].split("[SESSION_MEMORY]:", 1)[0]
        assert FACT in global_section
        assert "wedding toast" not in chat
        for request in server.requests[mark:]:
            assert "wedding toast" not in json.dumps(request.body)
        prep = s2.memory.diagnostics[-2]
        assert prep["phase"] == "prepare_request" and prep["packages"]["SESSION_MEMORY"]["candidate_count"] == 0
        (item,) = [i for i in s2.memory.diagnostics[-2]["packages"].values() if i["selected_count"]]
        assert item["selected_count"] == 1
    ws.close()

"""Threads and asyncio (issue #8, item 7): one Session and one Workspace shared by several threads and by
concurrent coroutines lose no update: every turn is in the history (in some order), every record is
stored, counts are exact and the exact in-memory views agree with Chroma.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
from collections import Counter

import pytest

from agently_vecmem import MemoryRecord, Scope
from agently_vecmem.llm import OpenAIChatModel
from agently_vecmem.session import Prompt, Session
from agently_vecmem.testing import DeterministicEmbedder, LoopbackOpenAIServer
from agently_vecmem.workspace import ChromaWorkspace

FULL = bool(os.environ.get("VECMEM_FULL"))
THREADS, TURNS = (4, 10) if FULL else (3, 3)
USER = re.compile(r'"user_content": "([^"]*)"')


@pytest.fixture
def env(tmp_path):
    ws = ChromaWorkspace(tmp_path / "threads", embedder=DeterministicEmbedder(dim=32))
    with LoopbackOpenAIServer() as server:
        # One distinct extracted memory per turn (its summary names the turn), so every turn must be stored.
        server.on("extract", lambda body: {"memories": [
            {"scope": "SESSION_MEMORY", "summary": f"remember {USER.findall(body['messages'][-1]['content'])[0]}"}]})
        server.on("retrieve_plan", lambda body: {"query": "remember", "decisions": [
            {"id": i, "useful": True, "score": 0.5}
            for i in re.findall(r'"id": "(mem_[0-9a-f]{32})"', body["messages"][-1]["content"])]})
        server.on("consolidate", lambda body: {"decisions": [{"index": 0, "action": "ADD"}]})
        server.on("chat", lambda body: "reply to " + body["messages"][-1]["content"][-40:])
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="x", max_retries=0, timeout=30)
        session = Session(id="shared").use_memory(mode="VecMemory", workspace=ws, model=model)
        session.settings.set("session.memory.VecMemory.consolidate.enabled", False)
        yield ws, session, model
    ws.close()


def check(ws: ChromaWorkspace, session: Session, texts: list[str]) -> None:
    history = session.full_context
    users = Counter(m["content"] for m in history if m["role"] == "user")
    assert users == Counter(texts), "a turn is missing from (or duplicated in) the history"
    assert sum(m["role"] == "assistant" for m in history) == len(texts)
    stored = ws.scan(scope=Scope.session_memory("shared"))
    assert Counter(r.summary for r in stored) == Counter(f"remember {t}" for t in texts)
    assert ws.count(scope=Scope.session_memory("shared")) == len(texts)
    view = ws.view(Scope.session_memory("shared"))
    assert sorted(r.id for r in view.records) == sorted(r.id for r in stored), "exact view lost an update"


def test_one_session_from_several_threads(env) -> None:
    ws, session, model = env
    texts = [f"thread {t} turn {i}" for t in range(THREADS) for i in range(TURNS)]
    errors: list[BaseException] = []

    def run(t: int) -> None:
        try:
            for i in range(TURNS):
                assert session.chat(f"thread {t} turn {i}", model=model).startswith("reply to")
        except BaseException as e:  # noqa: BLE001 - surfaced below
            errors.append(e)

    pool = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    assert not errors, errors
    check(ws, session, texts)


def test_one_session_from_asyncio_gather(env) -> None:
    ws, session, model = env
    n = THREADS * TURNS
    texts = [f"coroutine {i}" for i in range(n)]

    async def main() -> list:
        chats = [session.achat(t, model=model) for t in texts]
        prompts = [Prompt().set("input", f"what do I remember {i}") for i in range(n)]
        prepares = [session.memory.prepare_request(prompt=p, session=session) for p in prompts]
        return await asyncio.gather(*chats, *prepares)

    results = asyncio.run(main())
    assert all(r.startswith("reply to") for r in results[:n])
    assert all("plan" in d for d in results[n:])
    check(ws, session, texts)


def test_one_workspace_from_many_writer_threads(env) -> None:
    ws, _, _ = env
    per = 40 if FULL else 15
    scopes = [Scope.global_memory(), Scope.session_memory("a"), Scope.session_memory("b")]
    for s in scopes:
        ws.view(s)  # cache the views first, so every write must keep them current

    def run(t: int) -> None:
        for i in range(per):
            sid = "a" if (t + i) % 2 else "b"
            ws.put([MemoryRecord(memory_scope="SESSION_MEMORY", session_id=sid, summary=f"w {t} {i}"),
                    MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f"g {t} {i}")])
            ws.search(f"w {t} {i}", scope=Scope.session_memory(sid), k=2)

    pool = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    total = THREADS * per
    assert ws.count(scope=Scope.global_memory()) == total
    assert ws.count(scope=Scope.session_memory("a")) + ws.count(scope=Scope.session_memory("b")) == total
    for s in scopes:
        view_ids = [r.id for r in ws.view(s).records]
        assert sorted(view_ids) == sorted(r.id for r in ws.scan(scope=s)), f"view of {s} lost an update"

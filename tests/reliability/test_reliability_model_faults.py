"""Model faults (issue #8, item 4): every memory phase degrades visibly and never breaks the user's turn.

The LoopbackOpenAIServer answers every request of one phase with a fault; the other phases answer
valid JSON. The real ``openai`` client (OpenAIChatModel, short timeout, 0 or 1 retries) talks to it.
For every (phase, fault) pair: ``session.chat`` returns the chat reply, the plugin records the
degradation in ``plugin.diagnostics``, the turn is in the chat history, and a memory of the turn (an
extracted memory or the raw turn) is stored.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from typing import Any

import pytest

from agently_vecmem import ALL_SCOPES, MemoryRecord
from agently_vecmem.llm import OpenAIChatModel
from agently_vecmem.session import Session
from agently_vecmem.testing import DeterministicEmbedder, Fault, LoopbackOpenAIServer
from agently_vecmem.workspace import ChromaWorkspace

FULL = bool(os.environ.get("VECMEM_FULL"))
TIMEOUT = 0.3
FAULTS = {
    "malformed": lambda: Fault.malformed(),
    "wrong_schema": lambda: {"answer": 42, "decisions": "none", "memories": "nope", "query": ""},
    "timeout": lambda: Fault.delay(TIMEOUT * 3, then="{}"),
    "429": lambda: Fault.status(429, retry_after=0.05),
    "500": lambda: Fault.status(500),
    "empty": lambda: Fault.empty(),
    "oversized": lambda: Fault.oversized(300_000),
    "drop": lambda: Fault.drop(),
}
# (phase faulted, retrieve_plan mode, where the degradation must show up)
PHASES = {
    "retrieve_plan-fused": ("retrieve_plan", "fused"),
    "retrieve_plan-separate": ("retrieve_plan", "separate"),
    "rerank": ("rerank", "separate"),
    "extract": ("extract", "fused"),
    "consolidate": ("consolidate", "fused"),
}
USER = re.compile(r'"user_content": "([^"]*)"')
IDS = re.compile(r'"id": "(mem_[0-9a-f]{32})"')


def candidate_ids(body: dict) -> list[str]:
    return IDS.findall(body["messages"][-1]["content"])


def healthy(srv: LoopbackOpenAIServer) -> None:
    """Valid replies for every phase (a fault for one phase is installed on top)."""
    srv.on("retrieve_plan", lambda body: {
        "query": "green tea", "tags": [], "include_global": True, "include_session": True,
        "decisions": [{"id": i, "useful": True, "score": 0.9} for i in candidate_ids(body)],
    })
    srv.on("rerank", lambda body: {"decisions": [{"id": i, "useful": True, "score": 0.9}
                                                    for i in candidate_ids(body)]})
    # A near-duplicate of the seeded "User likes green tea" so that consolidation is asked.
    # A different tag per turn keeps turn 2's memory from being an exact duplicate of turn 1's.
    srv.on("extract", lambda body: {"memories": [
        {"scope": "GLOBAL_MEMORY", "summary": "User likes green tea very much",
         "tags": ["drink", f"turn{len(USER.findall(body['messages'][-1]['content'])[0])}"], "importance": 0.8}]})
    srv.on("consolidate", lambda body: {"decisions": [{"index": 0, "action": "ADD"}]})
    srv.on("chat", lambda body: "chat-reply")


def chat_model(srv: LoopbackOpenAIServer) -> OpenAIChatModel:
    """The user's own chat model: never faulted, with a generous timeout (the machine may be loaded)."""
    return OpenAIChatModel("chat", base_url=srv.base_url, api_key="x", max_retries=0, timeout=30)


def seeded_workspace(path: str) -> ChromaWorkspace:
    """A fresh collection with three similar global memories (enough candidates to ask rerank)."""
    ws = ChromaWorkspace(path, embedder=DeterministicEmbedder(dim=64), collection=f"c{uuid.uuid4().hex[:10]}")
    ws.put([MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=s, tags=["drink"]) for s in
            ("User likes green tea", "User drinks green tea every morning", "User dislikes coffee, prefers tea")])
    return ws


def degradation(diags: list[dict[str, Any]], phase: str, mode: str) -> list[Any]:
    """The diagnostics that must record a failure of ``phase``."""
    prep = [d for d in diags if d["phase"] == "prepare_request"]
    turn = [d for d in diags if d["phase"] == "after_turn"]
    if phase == "retrieve_plan":
        return [d["plan"]["diagnostics"] for d in prep
                if d["plan"]["diagnostics"].get("degraded") and d["plan"]["diagnostics"]["reason"] == "retrieve_plan_failed"]
    if phase == "rerank":
        return [p["rerank"] for d in prep for p in d["packages"].values()
                if p.get("rerank", {}).get("reason") == "rerank_failed"]
    if phase == "extract":
        return [d for d in turn if d.get("reason") == "extract_failed" and d.get("raw_turn_kept")]
    return [c for d in turn for c in d["consolidation"] if c.get("reason") == "consolidate_failed"]


def matrix() -> list[tuple[str, str, int]]:
    """Full: every phase x every fault x retries 0/1 (1 only for retryable faults). Quick: a rotation in
    which every phase meets 3 faults and every fault meets at least one phase (15 cases)."""
    faults = list(FAULTS)
    if FULL:
        return [(c, f, r) for c in PHASES for f in faults for r in (0, 1)
                if r == 0 or f in ("429", "500", "timeout", "drop")]
    return [(c, faults[(3 * i + j) % len(faults)], 0) for i, c in enumerate(PHASES) for j in range(3)]


@pytest.mark.parametrize(("case", "fault", "retries"), matrix())
def test_fault_in_phase_degrades_without_losing_the_turn(srv, store_path, case, fault, retries) -> None:
    phase, mode = PHASES[case]
    healthy(srv)
    srv.on(phase, lambda body: FAULTS[fault]())
    ws = seeded_workspace(store_path)
    model = OpenAIChatModel("m", base_url=srv.base_url, api_key="x", max_retries=retries, timeout=TIMEOUT,
                            backoff=0.01)
    sid = f"s-{uuid.uuid4().hex[:8]}"
    session = Session(id=sid).use_memory(mode="VecMemory", workspace=ws, model=model)
    session.settings.set("session.memory.VecMemory.retrieve_plan.mode", mode)
    # The per-turn tag lowers the similarity to the seeded memory; make sure consolidation is asked.
    session.settings.set("session.memory.VecMemory.consolidate.similarity_threshold", 0.5)
    try:
        texts = ["Do I like green tea?", "What should I drink with green tea?"][: 2 if FULL else 1]
        for text in texts:
            assert session.chat(text, model=chat_model(srv)) == "chat-reply"
        assert srv.requests_for(phase), f"phase {phase} was never asked; the fault was not exercised"
        diags = list(session.memory.diagnostics)
        found = degradation(diags, phase, mode)
        assert found, f"no diagnostic records the {fault} fault of {phase}: {diags}"
        for d in found:
            assert d.get("error_type"), d
        # no turn lost: history has both turns, and each turn left a memory
        contents = [m["content"] for m in session.full_context]
        assert contents == [m for t in texts for m in (t, "chat-reply")]
        mine = [r for r in ws.scan(scope=ALL_SCOPES) if r.provenance.session_id == sid]
        turns = {r.provenance.turn_index for r in mine}
        assert len(turns) == len(texts), f"a turn left no memory: {[(r.summary, r.provenance) for r in mine]}"
        raw = [r for r in mine if not r.extracted]
        if phase == "extract":
            assert {r.body["user"] for r in raw} == set(texts)
        if retries and fault in ("429", "500"):
            reqs = srv.requests_for(phase)
            assert len(reqs) >= 2
            if fault == "429":  # Retry-After is honoured
                assert reqs[1].timestamp - reqs[0].timestamp >= 0.045
    finally:
        ws.close()


@pytest.mark.parametrize("phase", ["retrieve_plan", "extract"])
def test_429_retry_after_is_honoured(srv, store_path, phase) -> None:
    """With max_retries=1 a 429 is retried after its Retry-After; the second 429 degrades the phase."""
    healthy(srv)
    srv.on(phase, lambda body: Fault.status(429, retry_after=0.2))
    ws = seeded_workspace(store_path)
    model = OpenAIChatModel("m", base_url=srv.base_url, api_key="x", max_retries=1, timeout=TIMEOUT)
    session = Session(id=f"r-{phase}").use_memory(mode="VecMemory", workspace=ws, model=model)
    try:
        assert session.chat("green tea?", model=chat_model(srv)) == "chat-reply"
        reqs = srv.requests_for(phase)
        assert len(reqs) >= 2 and reqs[1].timestamp - reqs[0].timestamp >= 0.19
        assert degradation(list(session.memory.diagnostics), phase, "fused")
    finally:
        ws.close()


def test_timeout_is_bounded(srv, store_path) -> None:
    """A hanging model costs at most about (retries + 1) x timeout per attempt budget, not the hang."""
    healthy(srv)
    srv.on("extract", lambda body: Fault.delay(5.0, then="{}"))
    ws = seeded_workspace(store_path)
    model = OpenAIChatModel("m", base_url=srv.base_url, api_key="x", max_retries=0, timeout=TIMEOUT)
    session = Session(id="timeout").use_memory(mode="VecMemory", workspace=ws, model=model)
    start = time.monotonic()
    assert session.chat("green tea please", model=chat_model(srv)) == "chat-reply"
    assert time.monotonic() - start < 4 * TIMEOUT + 2.0
    ws.close()

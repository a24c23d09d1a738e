"""The typed memory pipeline (issue 15): reply shapes derived from the reply models, output caps on every
phase request (settable per phase), a reply cut by the cap, and one snapshot per scope per call."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from agently_vecmem.llm.openai_compat import OpenAIChatModel
from agently_vecmem.memory.plugin import VecMemory
from agently_vecmem.memory.prompts import default_max_tokens
from agently_vecmem.memory.replies import (
    ConsolidateReply,
    ExtractReply,
    FusedRetrieveReply,
    PlanReply,
    RerankReply,
    output_shape,
)
from agently_vecmem.records import MemoryRecord
from agently_vecmem.session import Prompt, Session
from agently_vecmem.testing import Fault, LoopbackOpenAIServer, phase_input
from agently_vecmem.workspace import ChromaWorkspace

# The shapes that were written by hand next to the models before issue 15 (the model sees exactly these).
PLAN = {
    "query": "(str) Compact retrieval query for Workspace memory.",
    "tags": "([str]) Tags that should be used for memory retrieval.",
    "include_global": "(bool) Whether to retrieve Workspace-global memory.",
    "include_session": "(bool) Whether to retrieve active-session memory.",
}
DECISION = {
    "id": "(str) Candidate id exactly as provided.",
    "useful": "(bool) True when this memory should be injected.",
    "score": "(float) Relevance from 0.0 to 1.0.",
    "reason": "(str) Brief decision reason.",
}
EXTRACT = {"memories": [{
    "scope": "(str) GLOBAL_MEMORY or SESSION_MEMORY.",
    "summary": "(str) Short stable memory summary.",
    "body": "(dict) Memory body matching the configured body schema.",
    "tags": "([str]) Retrieval tags.",
    "importance": "(float) Importance from 0.0 to 1.0.",
    "action": "(str) ADD for a new fact; UPDATE or SUPERSEDE with target_id when it refines or contradicts one "
              "of related_memories; NOOP when a related memory already says it; FORGET with target_id when the "
              "user asks to forget what a related memory says.",
    "target_id": "(str|null) id from related_memories for UPDATE/SUPERSEDE/NOOP/FORGET.",
}]}
CONSOLIDATE = {"decisions": [{
    "index": "(int) Index of the new memory in new_memories.",
    "action": "(str) ADD (keep both), UPDATE (new refines the existing one), SUPERSEDE (new contradicts and "
              "replaces it), NOOP (already known; drop the new one).",
    "target_id": "(str|null) The existing memory id for UPDATE/SUPERSEDE/NOOP.",
    "summary": "(str|null) Optional merged summary for UPDATE.",
    "body": "(dict|null) Optional merged body for UPDATE.",
}]}


def test_output_shapes_are_derived_from_the_reply_models() -> None:
    assert output_shape(PlanReply) == PLAN
    assert output_shape(RerankReply) == {"decisions": [DECISION]}
    assert output_shape(FusedRetrieveReply) == {**PLAN, "decisions": [DECISION]}
    assert output_shape(ExtractReply) == EXTRACT
    assert output_shape(ConsolidateReply) == CONSOLIDATE
    # every field of every reply model is shown to the model, with a description
    for model in (PlanReply, RerankReply, FusedRetrieveReply, ExtractReply, ConsolidateReply):
        assert set(output_shape(model)) == set(model.model_fields)


@pytest.fixture
def ws(ws: ChromaWorkspace) -> ChromaWorkspace:
    """conftest's workspace with three tea/coffee memories."""
    ws.put([MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=s) for s in
            ("User likes green tea", "User drinks green tea every morning", "User dislikes coffee")])
    return ws


def healthy(srv: LoopbackOpenAIServer) -> None:
    ids = lambda body: [c["id"] for c in phase_input(body)["candidates"]]  # noqa: E731
    srv.on("retrieve_plan", lambda body: {"query": "green tea", "decisions": [
        {"id": i, "useful": True, "score": 0.9} for i in ids(body)] if "candidates" in phase_input(body) else []})
    srv.on("rerank", lambda body: {"decisions": [{"id": i, "useful": True, "score": 0.9} for i in ids(body)]})
    srv.on("extract", lambda body: {"memories": [{"scope": "GLOBAL_MEMORY", "summary": "User likes green tea a lot"}]})
    srv.on("consolidate", lambda body: {"decisions": [{"index": 0, "action": "ADD"}]})


def plugin(ws: ChromaWorkspace, model: Any, **vecmem: Any) -> VecMemory:
    return VecMemory(workspace=ws, model=model, settings={"session": {"memory": {"VecMemory": vecmem}}})


def run_both(p: VecMemory, sid: str = "s1") -> tuple[dict[str, Any], dict[str, Any]]:
    prompt = Prompt()
    prompt.set("input", "Do I like green tea?")
    session = Session(id=sid)
    return (p.prepare_request_sync(prompt=prompt, session=session),
            p.after_turn_sync(session=session, user_content="I like green tea", assistant_content="ok"))


def test_every_phase_request_sends_an_output_cap(srv: LoopbackOpenAIServer, model: OpenAIChatModel, ws: Any) -> None:
    healthy(srv)
    p = plugin(ws, model, retrieve_plan={"mode": "separate"}, extract={"related_memories": 0},
               consolidate={"similarity_threshold": 0.0})
    run_both(p)
    caps = {r.phase: r.body["max_tokens"] for r in srv.requests if r.path.endswith("chat/completions")}
    assert set(caps) == {"retrieve_plan", "rerank", "extract", "consolidate"}
    assert caps == {
        "retrieve_plan": default_max_tokens("retrieve_plan", 0),
        "rerank": default_max_tokens("rerank", 3),   # sized to the 3 candidates judged
        "extract": default_max_tokens("extract", 6),  # sized to extract.max_memories
        "consolidate": default_max_tokens("consolidate", 1),
    }
    # settable per phase through <phase>.execution
    srv.reset()
    healthy(srv)
    p = plugin(ws, model, retrieve_plan={"execution": {"max_tokens": 77}}, extract={"execution": {"max_tokens": 99}})
    run_both(p, "s2")
    caps = {r.phase: r.body["max_tokens"] for r in srv.requests if r.path.endswith("chat/completions")}
    assert caps["retrieve_plan"] == 77 and caps["extract"] == 99


def test_reply_cut_by_the_cap_is_a_failed_attempt(srv: LoopbackOpenAIServer, model: OpenAIChatModel, ws: Any) -> None:
    healthy(srv)
    full = '{"memories": [{"scope": "GLOBAL_MEMORY", "summary": "User likes green tea"}]}'
    srv.script("extract", Fault.truncated(full[:30]), Fault.truncated(full[:45]))
    _, turn = run_both(plugin(ws, model))
    assert len(srv.requests_for("extract")) == 2
    assert turn["reason"] == "extract_failed" and turn["failure"] == "output_truncated" and turn["raw_turn_kept"]
    assert turn["model_calls"]["by_phase"]["extract"] == 2 and turn["model_calls"]["failed"] == 2
    # the re-ask tells the model why: its reply was cut off
    second = srv.requests_for("extract")[1].body["messages"]
    assert second[-2] == {"role": "assistant", "content": full[:30]}
    assert "cut off at the output limit" in second[-1]["content"]
    # a cut reply followed by a complete one: one failed attempt, then the memory is stored
    srv.reset()
    healthy(srv)
    srv.script("extract", Fault.truncated(full[:30]), full.replace("green tea", "oolong"))
    _, turn = run_both(plugin(ws, model), "s3")
    assert turn["attempts"] == 2 and turn["extracted"] == 1 and turn["model_calls"]["failed"] == 1


def test_one_snapshot_per_scope_per_call(srv: LoopbackOpenAIServer, model: OpenAIChatModel, ws: Any,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    healthy(srv)
    reads: Counter[str] = Counter()
    asked: list[set[str]] = []
    real_views = ws.views

    def views(*scopes: Any) -> Any:  # (``view`` asks ``views``; a request asks for its scopes at once)
        reads.update(scope.memory_scope or "ALL" for scope in scopes)
        asked.append({scope.memory_scope for scope in scopes})
        return real_views(*scopes)

    monkeypatch.setattr(ws, "views", views)
    p = plugin(ws, model, consolidate={"similarity_threshold": 0.0}, extract={"related_memories": 2})
    prompt = Prompt()
    prompt.set("input", "Do I like green tea?")
    prepared = p.prepare_request_sync(prompt=prompt, session=Session(id="s1"))
    assert prepared["packages"]["GLOBAL_MEMORY"]["candidate_count"] == 3
    assert reads == Counter({"GLOBAL_MEMORY": 1, "SESSION_MEMORY": 1})
    assert asked == [{"GLOBAL_MEMORY", "SESSION_MEMORY"}]  # in one call: loaded side by side
    reads.clear()
    # related memories (both scopes), dedup keys and near-duplicates (global) of one turn: one read each
    turn = p.after_turn_sync(session=Session(id="s1"), user_content="I like green tea", assistant_content="ok")
    assert turn["related"] > 0 and srv.requests_for("extract") and srv.requests_for("consolidate")
    assert reads == Counter({"GLOBAL_MEMORY": 1, "SESSION_MEMORY": 1})

"""The model budget of one plugin call (issue 15): at most ``1 + max_retries`` requests per phase, whatever
the model answers or raises, counted locally by the call (never read from the model's shared call log)."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agently_vecmem.llm import summarize_calls
from agently_vecmem.llm.openai_compat import OpenAIChatModel
from agently_vecmem.memory.plugin import VecMemory
from agently_vecmem.records import MemoryRecord
from agently_vecmem.session import Prompt, Session
from agently_vecmem.testing import (
    DeterministicEmbedder,
    Fault,
    LoopbackOpenAIServer,
    ScriptedModel,
    approx_tokens,
    phase_input,
)
from agently_vecmem.workspace import ChromaWorkspace


def test_deeply_nested_extract_reply_is_bounded(srv: LoopbackOpenAIServer, model: OpenAIChatModel, ws: Any) -> None:
    """The issue's reproduction: 40 replies of ``"[" * 1000`` (json raises RecursionError) made 41 extract
    requests for one turn and reported ``model_calls.calls == 1``."""
    srv.script("extract", *(["[" * 1000] * 40))
    session = Session(id="s1").use_memory(mode="VecMemory", workspace=ws, model=model)
    diag = session.memory.after_turn_sync(session=session, user_content="I live in Oslo", assistant_content="ok")
    assert len(srv.requests_for("extract")) == 2
    assert diag["model_calls"]["calls"] == 2 and diag["model_calls"]["by_phase"] == {"extract": 2}
    assert diag["reason"] == "extract_failed" and diag["raw_turn_kept"] is True
    assert diag["degraded"] is True and diag["stored"] == 1


# ------------------------------------------------------------------------------------------------------
# Property tests: per phase, hypothesis generates what the model does on each request of that phase.
# ------------------------------------------------------------------------------------------------------



FULL = bool(os.environ.get("VECMEM_FULL"))
# VECMEM_FULL: 4 phases x 120 in-process + 4 x 15 over HTTP = 540 generated cases; quick: 4 x 12 + 4 x 3.
EXAMPLES = int(os.environ.get("VECMEM_BUDGET_EXAMPLES", 120 if FULL else 12))
HTTP_EXAMPLES = max(1, EXAMPLES // 8) if FULL else 3
PHASE_OF = {"plan": "retrieve_plan", "rerank": "rerank", "extract": "extract", "consolidate": "consolidate"}


class Boom(Exception):
    """A foreign exception type no layer knows about."""


EXCEPTIONS = [
    RecursionError("maximum recursion depth exceeded"), MemoryError(), ValueError("bad value"), KeyError("k"),
    TypeError("wrong type"), AttributeError("no attr"), ZeroDivisionError("division by zero"), OSError(5, "io"),
    RuntimeError("runtime"), UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), StopIteration(),
    Boom("boom"), ConnectionResetError("reset"), AssertionError("assert"), IndexError("index"),
]


@dataclass(frozen=True)
class Act:
    """One generated model behaviour: ``kind`` and its parameter. ``valid`` answers correctly."""

    kind: str
    arg: object = None

    @property
    def good(self) -> bool:
        return self.kind == "valid"

    def failure(self, http: bool) -> str:
        """The diagnostic ``failure`` when this is the phase's last request."""
        if self.kind == "prose" and not str(self.arg).strip():  # blank text is an empty reply: a ModelError
            return "model_error"
        if self.kind in ("nested", "wrong_types", "not_object", "prose", "huge"):
            return "invalid_reply"
        if self.kind == "truncated":
            return "output_truncated"
        if self.kind in ("raises", "invalid_utf8") and not http:  # foreign exceptions (none is a ModelError)
            return "unexpected_error"
        return "model_error"


WRONG_VALUE = st.one_of(st.integers(), st.none(), st.floats(allow_nan=False), st.lists(st.integers(), min_size=1),
                        st.dictionaries(st.text(max_size=5), st.integers(), min_size=1, max_size=3))
ACTS = st.one_of(
    st.just(Act("valid")),
    st.integers(1000, 30000).map(lambda n: Act("nested", "[" * n)),
    st.integers(1000, 30000).map(lambda n: Act("nested", '{"a":' * n)),
    st.integers(50_000, 400_000).map(lambda n: Act("huge", n)),
    st.fixed_dictionaries({k: WRONG_VALUE for k in ("query", "decisions", "memories")}).map(
        lambda d: Act("wrong_types", d)),
    st.one_of(st.integers(), st.lists(st.integers(), max_size=4), st.text(max_size=30)).map(
        lambda v: Act("not_object", json.dumps(v))),
    st.text(st.characters(blacklist_characters="{[", blacklist_categories=("Cs",)), min_size=1, max_size=200).map(
        lambda t: Act("prose", t)),
    st.just(Act("empty")),
    st.sampled_from([429, 500, 503]).map(lambda c: Act("status", c)),
    st.just(Act("timeout")),
    st.just(Act("truncated")),
    st.just(Act("invalid_utf8")),
    st.just(Act("malformed")),
    st.sampled_from(EXCEPTIONS).map(lambda e: Act("raises", e)),
)


def reply_for(act: Act, healthy: Any, body: dict[str, Any]) -> Any:
    """The scripted reply acting out ``act`` for a request ``body``."""
    if act.kind == "valid":
        return healthy(body)
    if act.kind in ("nested", "not_object", "prose"):
        return act.arg
    if act.kind == "huge":
        return Fault.oversized(int(act.arg))  # type: ignore[call-overload]
    if act.kind == "wrong_types":
        return act.arg
    if act.kind == "empty":
        return Fault.empty()
    if act.kind == "status":
        return Fault.status(int(act.arg))  # type: ignore[call-overload]
    if act.kind == "timeout":
        return Fault.delay(1.0, then=healthy(body))
    if act.kind == "truncated":
        return Fault.truncated(json.dumps(healthy(body))[:40])
    if act.kind == "invalid_utf8":
        return Fault.invalid_utf8()
    if act.kind == "malformed":
        return Fault.malformed()
    return Fault.raises(act.arg)  # type: ignore[arg-type]


def ids_in(body: dict[str, Any]) -> list[str]:
    return [c["id"] for c in phase_input(body).get("candidates", [])]


HEALTHY = {
    "retrieve_plan": lambda body: {"query": "green tea", "tags": [], "include_global": True,
                                   "include_session": True,
                                   "decisions": [{"id": i, "useful": True, "score": 0.9} for i in ids_in(body)]},
    "rerank": lambda body: {"decisions": [{"id": i, "useful": True, "score": 0.9} for i in ids_in(body)[::-1]]},
    "extract": lambda body: {"memories": [{"scope": "GLOBAL_MEMORY", "summary": "User likes green tea "
                                           + phase_input(body)["user_content"], "importance": 0.8}]},
    "consolidate": lambda body: {"decisions": [{"index": m["index"], "action": "ADD"}
                                               for m in phase_input(body)["new_memories"]]},
    "chat": lambda body: "chat-reply",
}


@pytest.fixture(scope="module")
def seeded(store_path: str) -> Iterator[ChromaWorkspace]:
    w = ChromaWorkspace(store_path, collection=f"p-{uuid.uuid4().hex[:12]}", embedder=DeterministicEmbedder())
    w.put([MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=s, tags=["drink"]) for s in
           ("User likes green tea", "User drinks green tea every morning", "User dislikes coffee, prefers tea")])
    yield w
    w.close()


def plugin_for(ws: ChromaWorkspace, model: Any, case: str, retries: int) -> VecMemory:
    vecmem: dict[str, Any] = {
        "retrieve_plan": {"mode": "separate"},
        "retrieve": {"max_rerank_retries": retries},
        # every turn's memory is judged against the seeded ones (none is shown to the extractor first)
        "extract": {"related_memories": 0},
        "consolidate": {"similarity_threshold": 0.0, "enabled": case == "consolidate"},
    }
    return VecMemory(workspace=ws, model=model, settings={"session": {"memory": {"VecMemory": vecmem}}})


def run_case(ws: ChromaWorkspace, model: Any, recorder: Any, case: str, acts: list[Act], retries: int,
             http: bool) -> None:
    """Drive one plugin call with ``acts`` as the faulted phase's behaviour; check the budget properties."""
    phase = PHASE_OF[case]
    queue = deque(acts)
    for name, handler in HEALTHY.items():
        recorder.on(name, handler)
    recorder.on(phase, lambda body: reply_for(queue.popleft() if queue else Act("valid"), HEALTHY[phase], body))
    budget = retries + 1 if case == "rerank" else 2
    plugin = plugin_for(ws, model, case, retries)
    session = Session(id=f"s-{uuid.uuid4().hex[:8]}")
    before = len(recorder.requests)
    token = uuid.uuid4().hex[:8]
    if case in ("plan", "rerank"):
        prompt = Prompt()
        prompt.set("input", f"Do I like green tea? {token}")
        diag = plugin.prepare_request_sync(prompt=prompt, session=session)
    else:
        diag = plugin.after_turn_sync(session=session, user_content=f"I like green tea {token}", assistant_content="ok")
    requests = recorder.requests[before:]
    mine = [r for r in requests if r.phase == phase]
    # the budget: exactly as many requests as it took to get a good reply, never more than 1 + retries
    acts = [*acts, *[Act("valid")] * budget]  # the model answers correctly once the generated acts run out
    first_good = next((i for i, a in enumerate(acts[:budget]) if a.good), None)
    expected = budget if first_good is None else first_good + 1
    assert len(mine) == expected <= budget, (acts, len(mine))
    failed = first_good is None
    # diagnostics count exactly this call's requests
    calls = diag["model_calls"]
    assert calls["calls"] == len(requests) and calls["by_phase"].get(phase, 0) == len(mine)
    if not http:
        assert calls["total_tokens"] == summarize_calls(model.calls).total_tokens
        assert calls["failed"] == summarize_calls(model.calls).failed
    last = acts[budget - 1] if failed else None
    if case == "plan":
        plan = diag["plan"]["diagnostics"]
        if failed:
            assert plan["reason"] == "retrieve_plan_failed" and plan["degraded"] and plan["error_type"]
            assert diag["plan"]["query"] == f"Do I like green tea? {token}"  # the deterministic query
            assert diag["packages"]["GLOBAL_MEMORY"]["selected_count"] > 0  # retrieval went on
        else:
            assert plan == {"mode": "separate", "degraded": False, "attempts": expected}
    elif case == "rerank":
        rerank = diag["packages"]["GLOBAL_MEMORY"]["rerank"]
        assert rerank["attempts"] == expected
        if failed:  # the documented fallback: the deterministic candidates, unjudged
            assert rerank["reason"] == "rerank_failed" and rerank["degraded"] and rerank["error_type"]
        else:
            assert rerank["degraded"] is False
        assert diag["degraded"] is failed
    elif case == "extract":
        if failed:  # the documented fallback: the raw turn is kept
            assert diag["reason"] == "extract_failed" and diag["raw_turn_kept"] and diag["error_type"]
            assert diag["stored"] == 1 and diag["refs"][0]["summary"].startswith("Turn: I like green tea")
        else:
            assert diag["attempts"] == expected and diag["extracted"] == 1 and diag["stored"] == 1
    else:
        failures = [c for c in diag["consolidation"] if c["reason"] == "consolidate_failed"]
        if failed:  # the documented fallback: the new memory is added unjudged
            assert failures and failures[0]["error_type"] and diag["degraded"]
        else:
            assert not failures
        assert diag["stored"] == 1
    if failed:
        named = (diag["plan"]["diagnostics"] if case == "plan" else
                 diag["packages"]["GLOBAL_MEMORY"]["rerank"] if case == "rerank" else
                 diag if case == "extract" else failures[0])
        assert last is not None
        if http:
            assert named["failure"] in ("model_error", "invalid_reply", "output_truncated", "unexpected_error")
        else:
            assert named["failure"] == last.failure(http), (last, named)


PROPERTY = settings(max_examples=EXAMPLES, deadline=None, derandomize=not FULL,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])


@pytest.mark.parametrize("case", list(PHASE_OF))
@PROPERTY
@given(acts=st.lists(ACTS, min_size=1, max_size=6), retries=st.integers(0, 3))
def test_phase_budget_holds_in_process(seeded: ChromaWorkspace, case: str, acts: list[Act], retries: int) -> None:
    model = ScriptedModel(timeout=0.001)
    run_case(seeded, model, model, case, acts, retries, http=False)


@pytest.mark.parametrize("case", list(PHASE_OF))
@settings(PROPERTY, max_examples=HTTP_EXAMPLES)
@given(acts=st.lists(ACTS.filter(lambda a: a.kind != "timeout" or FULL), min_size=1, max_size=4),
       retries=st.integers(0, 2))
def test_phase_budget_holds_over_http(seeded: ChromaWorkspace, srv: LoopbackOpenAIServer, case: str,
                                      acts: list[Act], retries: int) -> None:
    srv.reset()
    model = OpenAIChatModel("m", base_url=srv.base_url, api_key="x", max_retries=0, timeout=0.3)
    run_case(seeded, model, srv, case, acts, retries, http=True)


# ------------------------------------------------------------------------------------------------------
# Two threads, one plugin: each call counts its own requests, never the other thread's.
# ------------------------------------------------------------------------------------------------------
def test_concurrent_calls_count_only_their_own_requests(seeded: ChromaWorkspace, srv: LoopbackOpenAIServer) -> None:
    lock = threading.Lock()
    counter = [0]

    def flaky(phase: str) -> Any:
        def handler(body: dict[str, Any]) -> Any:
            with lock:
                counter[0] += 1
                n = counter[0]
            # every third request is unusable, so calls take 1 or 2 requests in an interleaved order
            return "[" * 2000 if n % 3 == 0 else HEALTHY[phase](body)
        return handler

    for phase in ("retrieve_plan", "extract"):
        srv.on(phase, flaky(phase))
    model = OpenAIChatModel("m", base_url=srv.base_url, api_key="x", max_retries=0, timeout=30)
    plugin = VecMemory(workspace=seeded, model=model, settings={"session": {"memory": {"VecMemory": {
        "consolidate": {"enabled": False}, "extract": {"related_memories": 0}}}}})
    turns = 6 if FULL else 3
    calls: list[tuple[str, float, float, dict[str, Any]]] = []
    errors: list[BaseException] = []

    def run(sid: str) -> None:
        session = Session(id=sid)
        try:
            for i in range(turns):
                prompt = Prompt()
                prompt.set("input", f"green tea {sid} {i}")
                start = time.monotonic()
                diag = plugin.prepare_request_sync(prompt=prompt, session=session)
                middle = time.monotonic()
                turn = plugin.after_turn_sync(session=session, user_content=f"green tea {sid} {i}",
                                              assistant_content="ok")
                end = time.monotonic()
                with lock:
                    calls.extend([(sid, start, middle, diag), (sid, middle, end, turn)])
        except BaseException as e:  # noqa: BLE001 - surfaced below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(sid,)) for sid in (f"a-{uuid.uuid4().hex[:6]}",
                                                                    f"b-{uuid.uuid4().hex[:6]}")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    requests = [(r, phase_input(r.body)["session_id"]) for r in srv.requests if r.phase != "chat"]
    assert len(requests) >= 4 * turns  # both threads asked the model on every call
    for sid, start, end, diag in calls:
        own = [r for r, s in requests if s == sid and start <= r.timestamp <= end]
        assert diag["model_calls"]["calls"] == len(own), (sid, diag["model_calls"], len(own))
        by_phase: dict[str, int] = {}
        for r in own:
            by_phase[r.phase] = by_phase.get(r.phase, 0) + 1
        assert diag["model_calls"]["by_phase"] == by_phase
        # and its tokens: the loopback server reports ~len/4 prompt tokens per request (every reply is a 200)
        prompt_tokens = sum(approx_tokens("\n".join(m["content"] for m in r.body["messages"])) for r in own)
        assert diag["model_calls"]["prompt_tokens"] == prompt_tokens
    assert sum(d["model_calls"]["calls"] for *_, d in calls) == len(requests)

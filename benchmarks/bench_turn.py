"""Turn overhead of the VecMemory plugin: model calls per turn and retrieval time per turn.

A scripted 20-turn conversation runs through ``Session.chat`` with VecMemory against the loopback
OpenAI-compatible server (the real ``openai`` client over HTTP), on a workspace that already holds 10k
memory records (``--quick``: 500). The same conversation runs twice side by side:

* ``fused`` (our default): one call plans and judges, extraction sees related memories;
* ``separate``: AgentlyMemory's call pattern (a plan call, then a rerank call).

Both run with the CLI's default embedder (``auto``: the torch-free int8 ONNX MiniLM when installed); the
fused mode runs once more with the library's default torch MiniLM, reported beside it.

Reported per mode: extra model calls per turn (all calls but the chat call itself), memory retrieval time
per turn excluding model calls (p50/p95, from the plugin's own stage timings), and injected characters
against the budget. Targets: fused extra calls per turn ≤ 2; retrieval p50 ≤ 25 ms at 10k records.
"""

from __future__ import annotations

import json
import re
import tempfile
import time

import numpy as np
from _common import parser, row, summary

from agently_vecmem.embedders.base import Embedder
from agently_vecmem.llm import OpenAIChatModel
from agently_vecmem.records import MemoryRecord
from agently_vecmem.session import Session
from agently_vecmem.testing import DeterministicEmbedder, LoopbackOpenAIServer
from agently_vecmem.workspace import ChromaWorkspace

FACTS = [
    ("My name is Dana and I work as a marine biologist.", "GLOBAL_MEMORY", "User is Dana, a marine biologist", ["profile"]),
    ("I live in Lisbon with my partner Ines.", "GLOBAL_MEMORY", "User lives in Lisbon with partner Ines", ["home"]),
    ("We're planning a trip to the Azores in May.", "SESSION_MEMORY", "Trip to the Azores planned for May", ["travel"]),
    ("My favourite food is grilled octopus.", "GLOBAL_MEMORY", "User's favourite food is grilled octopus", ["food"]),
    ("Can you remind me what I do for work?", None, None, []),
    ("I'm allergic to penicillin.", "GLOBAL_MEMORY", "User is allergic to penicillin", ["health"]),
    ("Our budget for the trip is 2,000 euros.", "SESSION_MEMORY", "Azores trip budget is 2,000 euros", ["travel"]),
    ("Where do I live again?", None, None, []),
    ("Actually we moved to Porto last month.", "GLOBAL_MEMORY", "User lives in Porto (moved last month)", ["home"]),
    ("I have a cat called Sardinha.", "GLOBAL_MEMORY", "User has a cat called Sardinha", ["pet"]),
    ("What should we pack for the Azores?", None, None, []),
    ("Ines is vegetarian.", "GLOBAL_MEMORY", "Partner Ines is vegetarian", ["food"]),
    ("Suggest a dinner we can both enjoy.", None, None, []),
    ("I run every Tuesday and Thursday morning.", "GLOBAL_MEMORY", "User runs Tuesday and Thursday mornings", ["routine"]),
    ("Let's fly on May 12.", "SESSION_MEMORY", "Flight to the Azores on May 12", ["travel"]),
    ("What medicine should I avoid?", None, None, []),
    ("My sister Rita visits in June.", "GLOBAL_MEMORY", "User's sister Rita visits in June", ["family"]),
    ("How much did we want to spend on the trip?", None, None, []),
    ("I started learning the guitar.", "GLOBAL_MEMORY", "User is learning the guitar", ["hobby"]),
    ("Summarize what you know about me.", None, None, []),
]
_ID = re.compile(r"mem_[0-9a-f]{32}")
_WORDS = ["project", "meeting", "garden", "invoice", "concert", "recipe", "flight", "library", "doctor",
          "bicycle", "museum", "contract", "holiday", "printer", "football", "coffee", "painting", "lecture"]


def background_records(n: int, seed: int) -> list[MemoryRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        a, b, c = rng.choice(_WORDS, 3, replace=False)
        out.append(MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f"Note {i}: the {a} about the {b} needs a {c}",
                                tags=[str(a)]))
    return out


def make_server(turn: dict[str, int]) -> LoopbackOpenAIServer:
    server = LoopbackOpenAIServer()

    def judge(body: dict) -> dict:
        ids = list(dict.fromkeys(_ID.findall(body["messages"][-1]["content"])))
        decisions = [{"id": i, "useful": k < 3, "score": 0.9 - 0.1 * k, "reason": "r"} for k, i in enumerate(ids)]
        return {"query": "memory query", "tags": [], "include_global": True, "include_session": True,
                "decisions": decisions}

    def extract(body: dict) -> dict:
        _text, scope, summary_text, tags = FACTS[turn["i"]]
        if scope is None:
            return {"memories": []}
        return {"memories": [{"scope": scope, "summary": summary_text, "body": {"fact": summary_text},
                              "tags": tags, "importance": 0.8, "action": "ADD"}]}

    server.on("retrieve_plan", judge)
    server.on("rerank", judge)
    server.on("extract", extract)
    server.on("consolidate", lambda body: {"decisions": [{"index": 0, "action": "ADD"}]})
    server.on("chat", lambda body: "Sure.")
    return server


def run_mode(mode: str, n_records: int, seed: int, embedder: Embedder, vectors: np.ndarray) -> dict:
    tmp = tempfile.mkdtemp(prefix=f"vecmem-turn-{mode}-")
    ws = ChromaWorkspace(tmp, embedder=embedder, spaces=[])  # English turns: the spaces cost is bench_spaces
    ws.put(background_records(n_records, seed), vectors=vectors)
    turn = {"i": 0}
    with make_server(turn) as server:
        model = OpenAIChatModel("bench", base_url=server.base_url, api_key="x", max_retries=0, timeout=10)
        settings = {"session": {"memory": {"VecMemory": {"retrieve_plan": {"mode": mode}}}}}
        session = Session(id="bench", settings=settings).use_memory(mode="VecMemory", workspace=ws, model=model)
        session.memory.config()  # validate settings before timing
        retrieval_ms, after_ms, extra_calls, injected, budget = [], [], [], [], 0
        for i, (text, *_rest) in enumerate(FACTS):
            turn["i"] = i
            before = len(server.requests)
            session.chat(text, model=model)
            calls = [r for r in server.requests[before:] if r.path.endswith("chat/completions")]
            extra_calls.append(sum(1 for r in calls if r.phase != "chat"))
            prep = [d for d in session.memory.diagnostics if d["phase"] == "prepare_request"][-1]
            after = [d for d in session.memory.diagnostics if d["phase"] == "after_turn"][-1]
            retrieval_ms.append(prep["timings_ms"]["total_excluding_model"])
            after_ms.append(after["timings_ms"]["total_excluding_model"])
            used = sum(p["used_chars"] for p in prep["packages"].values())
            budget = max(p["char_budget"] for p in prep["packages"].values())
            injected.append(used)
        chat_body = server.chat_bodies("chat")[-1]
    ws.close()
    return {
        "extra_calls_per_turn": float(np.mean(extra_calls)),
        "retrieval_p50": float(np.percentile(retrieval_ms, 50)),
        "retrieval_p95": float(np.percentile(retrieval_ms, 95)),
        "after_turn_p50": float(np.percentile(after_ms, 50)),
        "max_injected": max(injected),
        "budget": budget,
        "within_budget": all(x <= budget * 2 for x in injected),  # two scopes, one budget each
        "last_request_chars": len(json.dumps(chat_body)),
    }


def main() -> None:
    args = parser(__doc__ or "").parse_args()
    n = 500 if args.quick else 10_000
    if args.quick:
        embedders: dict[str, Embedder] = {"hash": DeterministicEmbedder()}
    else:
        from agently_vecmem.embedders import default_embedder, resolve_embedder

        # The CLI's default (auto: the int8 ONNX MiniLM when installed) and the library's default (torch
        # MiniLM) share one model_id, so both read the same store, written here with the torch vectors.
        embedders = {"torch": default_embedder()}
        auto = resolve_embedder("auto")
        if type(auto) is not type(embedders["torch"]):
            embedders = {"onnx": auto, **embedders}
    main_name = next(iter(embedders))
    print(f"bench_turn: 20 turns, {n} stored records, embedders {', '.join(embedders)} "
          f"({embedders[main_name].model_id}), loopback model over HTTP")
    vectors = embedders["hash" if args.quick else "torch"].embed_documents(
        [r.document() for r in background_records(n, args.seed)])
    t0 = time.perf_counter()
    runs = [("fused", main_name), ("separate", main_name)] + [("fused", name) for name in embedders if name != main_name]
    results = {(mode, name): run_mode(mode, n, args.seed, embedders[name], vectors) for mode, name in runs}
    for (mode, name), r in results.items():
        label = f"[{mode}, {name}]"
        row(f"{label} extra model calls per turn", f"{r['extra_calls_per_turn']:.2f}")
        row(f"{label} retrieval ms/turn excl. model p50/p95", f"{r['retrieval_p50']:.1f} / {r['retrieval_p95']:.1f}")
        row(f"{label} after_turn ms excl. model p50", f"{r['after_turn_p50']:.1f}")
        row(f"{label} max injected chars (budget per scope)", f"{r['max_injected']} ({r['budget']})")
    fused, sep = results[("fused", main_name)], results[("separate", main_name)]
    ratio = fused["extra_calls_per_turn"] / max(sep["extra_calls_per_turn"], 1e-9)
    ok = fused["extra_calls_per_turn"] <= 2 and fused["retrieval_p50"] <= 25 and fused["within_budget"]
    others = "".join(f"; {name} {r['retrieval_p50']:.1f} ms" for (mode, name), r in results.items()
                     if mode == "fused" and name != main_name)
    print(f"  total {time.perf_counter() - t0:.1f} s")
    summary(
        "bench_turn", ok,
        f"extra calls/turn fused {fused['extra_calls_per_turn']:.2f} vs AgentlyMemory-pattern "
        f"{sep['extra_calls_per_turn']:.2f} (ratio {ratio:.2f}); retrieval p50 {main_name} "
        f"{fused['retrieval_p50']:.1f} ms{others} at {n} records (target <= 25)",
    )


if __name__ == "__main__":
    main()

"""Overhead of VecMemory's context source in agently 4.1.4.2+ AgentExecution runs (issue 26).

Run it on the RecordStore line: ``PYTHONPATH=.venv/agently-4.1.4.10:. python benchmarks/bench_agent_source.py``.

A store of N memory records (1k and 10k; ``--full`` adds 100k; ``--quick``: 300) and a fresh session; each
variant asks ``agent.input(q).start()`` against the loopback OpenAI-compatible server (no model latency, the
selector keeps nothing), then writes one memory and asks again. Reported per variant: the *first* start() (the
index is built from the source) and the *later* start() after a write (the index syncs from the last revision),
and how many descriptors the source listed for each. VecMemory's retrieval runs without a model.

* ``recall`` (default): one required recall block, ranked for the question; nothing optional is offered.
* ``records+feed``: ``context_source.offer_records`` — every record also offered; later runs get a delta through
  the change feed.
* ``old``: the source before issue 26 (every record offered, live revision, no change feed, no recall), loaded
  from ``git show HEAD:...`` when the checkout still has it there; skipped otherwise.

Agently's TaskContext index is a process-global cache; each variant uses its own store path (its own source ids).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

from _common import ROOT, load, parser, row, summary

from agently_vecmem.records import MemoryRecord

OLD_PATH = "agently_vecmem/integrations/agently/context_source.py"


def old_source_class() -> type | None:
    """The pre-issue-26 VecMemoryContextSource from git HEAD, if HEAD still holds that version."""
    try:
        text = subprocess.run(["git", "show", f"HEAD:{OLD_PATH}"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    if "RECALL_REF" in text:  # HEAD already has the new source
        return None
    module = types.ModuleType("agently_vecmem.integrations.agently._context_source_before_26")
    module.__package__ = "agently_vecmem.integrations.agently"
    exec(compile(text, f"HEAD:{OLD_PATH}", "exec"), module.__dict__)  # noqa: S102 - our own file at HEAD
    return module.VecMemoryContextSource


def seed(store, n: int) -> None:
    base = time.time() - 30 * 86400
    topics = ("hiking", "espresso", "cello", "Lisbon", "kitchen", "cat", "chess", "tomatoes")
    batch = []
    for i in range(n):
        s = f"User mentioned {topics[i % len(topics)]} (note {i})"
        batch.append(MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=s, body={"summary": s}, importance=0.5,
                                  created_at=base + i, updated_at=base + i))
        if len(batch) == 2000:
            store.put(batch)
            batch = []
    if batch:
        store.put(batch)


def run_variant(server, tmp: Path, n: int, variant: str, old_cls: type | None) -> dict:
    from agently import Agently

    from agently_vecmem.integrations import agently as integration
    from agently_vecmem.integrations.agently.record_store_line import RecordStoreVecMemory

    store = integration.chroma_store(str(tmp / f"{variant}-{n}"), embedder="hash")
    seed(store, n)
    original = RecordStoreVecMemory.create_context_source
    if variant == "old":
        RecordStoreVecMemory.create_context_source = lambda self, *, session=None, settings=None, **_: old_cls(
            self, session or self.session)
    try:
        agent = Agently.create_agent()
        agent.set_settings("OpenAICompatible", {"base_url": server.base_url, "model": "bench", "api_key": "x",
                                                "stream": False})
        agent.set_settings("session.input_keys", ["input"])
        agent.set_settings("session.memory.VecMemory", {
            "extract": {"enabled": False}, "retrieve_plan": {"enabled": False}, "retrieve": {"rerank": False},
            "context_source": {"offer_records": variant != "recall"},
        })
        agent.activate_session(session_id="bench")
        agent.activated_session.use_memory(mode="VecMemory", memory_store=store)
        plugin = agent.activated_session.memory

        def timed_start(question: str) -> tuple[float, int]:
            plugin.diagnostics.clear()
            began = time.perf_counter()
            agent.input(question).start()
            listed = sum(d.get("returned", 0) for d in plugin.diagnostics
                         if d.get("phase") == "context_source" and d.get("operation") == "enumerate")
            listed += sum(d.get("changes", 0) for d in plugin.diagnostics
                          if d.get("phase") == "context_source" and d.get("operation") == "changes")
            return time.perf_counter() - began, listed

        first, first_listed = timed_start("What did I say about the cello?")
        later = []
        for i in range(3):
            store.put(MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f"User likes green tea {i}",
                                   body={"summary": "tea"}))
            later.append(timed_start("What do I drink?"))
        later.sort()
        return {"first_s": first, "first_listed": first_listed, "later_s": later[1][0], "later_listed": later[1][1]}
    finally:
        RecordStoreVecMemory.create_context_source = original


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--full", action="store_true", help="add the 100k-record store (slow)")
    args = p.parse_args()
    from agently_vecmem.integrations import agently as integration
    from agently_vecmem.testing import LoopbackOpenAIServer

    if integration.host_line() != integration.RECORD_STORE_LINE:
        sys.exit("bench_agent_source needs agently 4.1.4.2+: PYTHONPATH=.venv/agently-4.1.4.10:. python "
                 "benchmarks/bench_agent_source.py")
    integration.install()
    sizes = [300] if args.quick else [1_000, 10_000] + ([100_000] if args.full else [])
    old_cls = old_source_class()
    variants = ["recall", "records+feed"] + (["old"] if old_cls is not None else [])
    print(f"bench_agent_source: start() of an AgentExecution run, {load()}")
    print("  (first = the index is built from the source; later = after one write; listed = descriptors "
          "enumerated, or delta changes)")
    results: dict[tuple[int, str], dict] = {}
    with LoopbackOpenAIServer() as server, tempfile.TemporaryDirectory(prefix="vecmem-bench-agent-") as tmp:
        server.on("chat", lambda body: {"selected_keys": []} if "offered_context_blocks" in str(body) else "ok")
        server.set_default(lambda body: {"memories": []})
        run_variant(server, Path(tmp), 10, "recall", old_cls)  # warm-up (imports, first TaskContext)
        for n in sizes:
            for variant in variants:
                r = results[(n, variant)] = run_variant(server, Path(tmp), n, variant, old_cls)
                row(f"{n:>7} records  {variant:<13}", f"first {r['first_s'] * 1000:8.0f} ms ({r['first_listed']:>6} listed)",
                    f"later {r['later_s'] * 1000:8.0f} ms ({r['later_listed']:>6} listed)", width=30)
    top = sizes[-1]
    recall = results[(top, "recall")]
    passed = recall["later_listed"] <= 1 and results[(top, "records+feed")]["later_listed"] <= 2
    text = (f"{top} records: recall first {recall['first_s'] * 1000:.0f} ms, later {recall['later_s'] * 1000:.0f} ms; "
            f"records+feed later lists {results[(top, 'records+feed')]['later_listed']} descriptors")
    if (top, "old") in results:
        text += f"; old later {results[(top, 'old')]['later_s'] * 1000:.0f} ms listing {results[(top, 'old')]['later_listed']}"
    summary("bench_agent_source", passed, text)


if __name__ == "__main__":
    main()

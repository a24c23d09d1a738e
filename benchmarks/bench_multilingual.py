"""The multilingual dense signal: what a Chinese query costs over a MiniLM store, and how well it ranks.

For each multilingual embedder (multilingual-e5-small 4-bit ``e5``, the preferred signal up to 1,000 records,
and USE multilingual v3 ``multilingual``, the one above):

* cold start in a fresh process: import + load + one query;
* throughput on the probe's facts (Chinese and English, one batch) and one-query latency;
* the first CJK query on a MiniLM scope of N records (embeds every document in-process, once per snapshot),
  against a later CJK query (cached) and an English query on the same scope (never takes this path);

then the quality of the signal on the bilingual probe's Chinese questions (dense R@1 / R@3) over three
stores: the Chinese facts, the English facts (cross-lingual), and a mixed store (every other fact in English),
raw and with the per-script centring that ``memory/crosslingual.py`` applies to mixed scopes; last, the
signal the retrieval really uses (both models blended) over the same stores.

Usage: ``python benchmarks/bench_multilingual.py [--quick]``
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402
import numpy as np  # noqa: E402

NAMES = ("e5", "multilingual")


def child_cold(name: str) -> None:
    t0 = time.perf_counter()
    from agently_vecmem.embedders import resolve_embedder

    resolve_embedder(name).embed_query("我对花生过敏")
    print(json.dumps({"seconds": time.perf_counter() - t0}))


def recall(scores: np.ndarray, ks: tuple[int, ...] = (1, 3)) -> tuple[float, ...]:
    """Recall@k of question i finding fact i (scores: questions x facts)."""
    own = scores[np.arange(len(scores)), np.arange(len(scores))][:, None]
    rank = (scores > own).sum(axis=1)
    return tuple(float((rank < k).mean()) for k in ks)


@contextmanager
def only(name: str | None) -> Iterator[None]:
    """The multilingual signal from one model (``e5`` / ``multilingual``), whatever the scope size; ``None``:
    the configured blend."""
    from agently_vecmem.search import multilingual as crosslingual

    saved = crosslingual.SIGNALS
    if name is not None:
        signal = {"e5": "e5", "multilingual": "use"}[name]
        crosslingual.SIGNALS = tuple((n, crosslingual.MAX_RECORDS, w) for n, _, w in saved if n == signal)
    try:
        yield
    finally:
        crosslingual.SIGNALS = saved


def minilm_view(texts: list[str]) -> Any:
    """A snapshot of MiniLM-labelled records with stand-in vectors (the multilingual signal ignores them)."""
    from agently_vecmem.embedders.hashing import DeterministicEmbedder
    from agently_vecmem.filters import Scope
    from agently_vecmem.records import MemoryRecord
    from agently_vecmem.search import multilingual as crosslingual
    from agently_vecmem.search.view import ScopeView

    records = tuple(MemoryRecord(id=f"r{k}", memory_scope="GLOBAL_MEMORY", summary=t,
                                 vector_index={"model": next(iter(crosslingual.ENGLISH_ONLY_MODELS))})
                    for k, t in enumerate(texts))
    return ScopeView(Scope.global_memory(), records, DeterministicEmbedder().embed_documents(texts), tuple(texts))


def signal_scores(items: list[Any], facts: list[str]) -> np.ndarray:
    """The multilingual signal as retrieval computes it, Chinese questions x ``facts``."""
    from agently_vecmem.search import multilingual as crosslingual

    view = minilm_view(facts)
    return np.stack([crosslingual.multilingual_dense_scores(view, i.question["zh"]) for i in items])


def measure(name: str, n: int, probe: Any, stores: dict[str, list[str]]) -> str:
    """Cost and quality of one multilingual embedder; returns its summary line."""
    from agently_vecmem.embedders import resolve_embedder
    from agently_vecmem.search.candidates import retrieve_candidates

    texts = [i.fact[lang] for i in probe.items for lang in ("en", "zh")]
    zh = [i.fact["zh"] for i in probe.items]
    cold = json.loads(subprocess.run([sys.executable, __file__, "--child", name], capture_output=True,
                                     text=True, check=True).stdout.strip().splitlines()[-1])["seconds"]
    emb = resolve_embedder(name)
    emb.embed_query("warm up")
    t0 = time.perf_counter()
    emb.embed_documents(texts)
    per_s = len(texts) / (time.perf_counter() - t0)
    lat = [c.timed(lambda: emb.embed_query("我最喜欢哪家饭店？"))[0] * 1000 for _ in range(30)]
    print(f"[{name}] cold start to the first vector {cold:.2f} s; throughput {per_s:.0f} texts/s "
          f"({len(texts)} probe facts); one query p50 {np.median(lat):.1f} ms")

    view = minilm_view([f"{zh[k % len(zh)]} ({k})" for k in range(n)])
    q = view.vectors[0]
    with only(name):
        first, _ = c.timed(lambda: retrieve_candidates(view, "我对什么过敏？", q, k=10))
        later, _ = c.timed(lambda: retrieve_candidates(view, "我养的宠物是什么品种？", q, k=10))
        english, _ = c.timed(lambda: retrieve_candidates(view, "what am I allergic to?", q, k=10))
    print(f"[{name}] scope of {n}: first CJK query {first * 1000:.0f} ms (embeds the scope), later CJK query "
          f"{later * 1000:.1f} ms, English query {english * 1000:.1f} ms")

    items = [i for i in probe.items if i.kind != "date"]
    questions = np.stack([emb.embed_query(i.question["zh"]) for i in items])
    for store, facts in stores.items():
        raw = recall(questions @ emb.embed_documents(facts).T)
        line = f"[{name}] Chinese questions over {store}: dense R@1/R@3 {raw[0]:.3f} / {raw[1]:.3f}"
        if store == "mixed":
            with only(name):
                cen = recall(signal_scores(items, facts))
            line += f", centred per script {cen[0]:.3f} / {cen[1]:.3f}"
        print(line)
    return f"{name}: cold {cold:.1f}s, {per_s:.0f} texts/s, first CJK query on {n} records {first:.1f}s"


def blend_quality(probe: Any, stores: dict[str, list[str]]) -> str:
    """The signal the retrieval uses (both models blended, centred per script in a mixed scope)."""
    items = [i for i in probe.items if i.kind != "date"]
    out = []
    for store, facts in stores.items():
        r1, r3 = recall(signal_scores(items, facts))
        print(f"[blend, as retrieved] Chinese questions over {store}: dense R@1/R@3 {r1:.3f} / {r3:.3f}")
        out.append(f"{store} {r1:.3f}/{r3:.3f}")
    return "blend " + ", ".join(out)


def main() -> None:
    from agently_vecmem.eval.probe import PROBE_DATA_PATH, load_probe

    args = c.parser(__doc__.splitlines()[0]).parse_args()
    probe = load_probe(PROBE_DATA_PATH)
    items = [i for i in probe.items if i.kind != "date"]
    stores = {"zh facts": [i.fact["zh"] for i in items], "en facts": [i.fact["en"] for i in items],
              "mixed": [i.fact["en" if k % 2 else "zh"] for k, i in enumerate(items)]}
    sizes = {"e5": 100 if args.quick else 1000, "multilingual": 300 if args.quick else 3000}
    lines = [measure(name, sizes[name], probe, stores) for name in NAMES]
    c.summary("bench_multilingual", True, "; ".join([*lines, blend_quality(probe, stores)]))


if __name__ == "__main__":
    if "--child" in sys.argv:
        child_cold(sys.argv[sys.argv.index("--child") + 1])
    else:
        main()

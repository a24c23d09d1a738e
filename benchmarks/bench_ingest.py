"""Ingest throughput: ChromaWorkspace.put with the real MiniLM embedder vs the raw encoder rate.

The raw rate is ``embedder.embed_documents`` alone on the same texts, measured in the same run and
alternated with the put rounds (target: put >= 0.8x raw). The ONNX embedder is reported beside it.

Usage: ``python benchmarks/bench_ingest.py [--quick] [--n 2000] [--rounds 2] [--no-onnx]``
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402

from agently_vecmem.embedders import default_embedder  # noqa: E402
from agently_vecmem.embedders.base import Embedder  # noqa: E402
from agently_vecmem.filters import Scope  # noqa: E402
from agently_vecmem.records import MemoryRecord  # noqa: E402
from agently_vecmem.workspace.chroma import ChromaWorkspace  # noqa: E402

TARGET = 0.8
_SUBJECTS = ["The user", "My sister", "Our team lead", "The customer", "Alex", "The landlord", "Grandma"]
_VERBS = ["prefers", "mentioned", "is allergic to", "bought", "plans to visit", "dislikes", "asked about"]
_OBJECTS = ["green tea in the morning", "a trip to Kyoto in April", "peanuts and shellfish",
            "a second-hand road bike", "the quarterly budget review", "jazz records from the 60s",
            "learning Rust over the summer", "the broken dishwasher", "vegetarian recipes"]


def short_texts(n: int, salt: str) -> list[str]:
    """Short, varied memory-like sentences (8-20 words)."""
    out = []
    for i in range(n):
        s, v, o = _SUBJECTS[i % 7], _VERBS[(i // 7) % 7], _OBJECTS[(i // 49) % 9]
        out.append(f"{s} {v} {o} (note {salt}{i}, {['last week', 'yesterday', 'in 2023', 'often'][i % 4]}).")
    return out


def records_for(texts: list[str], round_: int) -> list[MemoryRecord]:
    scopes = [Scope.session_memory(f"s{i}") for i in range(10)] + [Scope.global_memory()]
    out = []
    for i, t in enumerate(texts):
        sc = scopes[i % len(scopes)]
        out.append(MemoryRecord(id=f"r{round_}_{i:06d}", memory_scope=sc.memory_scope,  # type: ignore[arg-type]
                                session_id=sc.session_id, summary=t))
    return out


def measure(name: str, embedder: Embedder, n: int, rounds: int, workdir: Path) -> dict:
    embedder.embed_documents(short_texts(64, "warm"))  # load the model, warm the kernels
    ws = ChromaWorkspace(workdir / name, embedder=embedder, spaces=[])  # the primary embedder alone (spaces: bench_spaces)
    ws.put(records_for(short_texts(64, "w"), -1))  # warm Chroma
    raw, put = [], []
    for r in range(rounds):
        texts = short_texts(n, f"{r}-")
        recs = records_for(texts, r)
        assert [x.document() for x in recs] == texts  # put embeds exactly the same strings
        steps = [("raw", lambda t=texts: embedder.embed_documents(t)), ("put", lambda rs=recs: ws.put(rs))]
        for kind, fn in (steps if r % 2 == 0 else steps[::-1]):
            t0 = time.perf_counter()
            fn()
            (raw if kind == "raw" else put).append(n / (time.perf_counter() - t0))
    ws.close()
    raw_rate, put_rate = sum(raw) / len(raw), sum(put) / len(put)
    c.row(f"{name}: encoder alone (embed_documents)", f"{raw_rate:,.0f} texts/s",
          "rounds " + ", ".join(f"{x:,.0f}" for x in raw))
    c.row(f"{name}: ChromaWorkspace.put", f"{put_rate:,.0f} records/s", "rounds " + ", ".join(f"{x:,.0f}" for x in put),
          f"ratio {put_rate / raw_rate:.2f}")
    return {"raw": raw_rate, "put": put_rate, "ratio": put_rate / raw_rate}


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--no-onnx", action="store_true")
    args = p.parse_args()
    n = args.n or (200 if args.quick else 2000)
    rounds = args.rounds or 2
    print(f"== ingest {n:,} short texts x {rounds} rounds (alternating order); {c.load()}", flush=True)
    with c.tmpdir("bench_ingest_") as work:
        t0 = time.perf_counter()
        torch_emb = default_embedder()
        res = measure("torch MiniLM", torch_emb, n, rounds, work)
        c.row("(torch model load + warm-up included above)", f"{time.perf_counter() - t0:.1f} s total")
        onnx = None
        if not args.no_onnx and not args.quick:
            from agently_vecmem.embedders.onnx import OnnxMiniLMEmbedder

            onnx = measure("onnx int8 MiniLM", OnnxMiniLMEmbedder(), n, rounds, work)
    text = (f"put {res['put']:,.0f} records/s = {res['ratio']:.2f}x raw encoder {res['raw']:,.0f}/s "
            f"(target >= {TARGET})")
    if onnx:
        text += f"; onnx put {onnx['put']:,.0f}/s = {onnx['ratio']:.2f}x its raw {onnx['raw']:,.0f}/s"
    c.summary("bench_ingest", res["ratio"] >= TARGET, text)


if __name__ == "__main__":
    main()

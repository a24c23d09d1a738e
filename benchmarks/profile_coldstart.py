"""Where a fresh worker's first search over a big GLOBAL scope spends its time (issue 21, point 4).

A store of N GLOBAL_MEMORY records (``_scale_data``: English-like documents, hash-embedder vectors; cached
with ``--store-dir``). Three fresh processes, one after another:

* ``real``: open the workspace, the first ``ws.view(Scope.global_memory())``, the first
  ``retrieve_candidates(view, text, qvec, k=10)`` and a second one (warm), as a worker pays them;
* ``steps``: the same work done step by step with the functions the workspace and the engine use: the scope
  directory, Chroma's read (all fields, then each field alone), the scope filter, ``decode_rows`` (record
  construction), the sort, numpy stacking, the snapshot, tokenization, the BM25 postings, the neighbour and
  session structures, then the rest of the first retrieval;
* ``persisted``: what loading a persisted snapshot would cost instead: ``pickle`` of the record tuple, the
  documents and the built BM25 index, ``np.load(mmap_mode="r")`` of the vectors (and one dense pass over it).

``--server`` also times Chroma's read through a ``chroma run`` on the same store.

Usage: ``python benchmarks/profile_coldstart.py [--records 100000] [--store-dir DIR] [--server]``
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _scale_data as data  # noqa: E402
from _common import child_result, chroma_server, load, rss_bytes  # noqa: E402

MB = 1 << 20
QUERY = "What did the user say about the orchestra training and the british opponents?"


def _lap(out: dict[str, float], name: str, t: float) -> float:
    now = time.perf_counter()
    out[name] = now - t
    return now


def real(path: str) -> dict[str, float]:
    from agently_vecmem.filters import Scope
    from agently_vecmem.search.candidates import retrieve_candidates
    from agently_vecmem.workspace import ChromaWorkspace

    out: dict[str, float] = {}
    t = time.perf_counter()
    ws = ChromaWorkspace(path, embedder=data.DeterministicEmbedder(dim=data.DIM), read_only=True)
    t = _lap(out, "open", t)
    view = ws.view(Scope.global_memory())
    t = _lap(out, "first view", t)
    qvec = ws.embed_query(QUERY)
    t = _lap(out, "query embedding", t)
    retrieve_candidates(view, QUERY, qvec, k=10)
    t = _lap(out, "first retrieve_candidates", t)
    retrieve_candidates(view, QUERY + " again", ws.embed_query(QUERY + " again"), k=10)
    _lap(out, "second retrieve_candidates (warm)", t)
    out["rss_mb"] = rss_bytes() / MB
    out["records"] = len(view)
    return out


def _read(col: Any, ids: list[str], include: list[str]) -> dict[str, Any]:
    merged: dict[str, Any] = {"ids": [], **{k: [] for k in include}}
    for start in range(0, len(ids), 5_000):
        res = col.get(ids=ids[start:start + 5_000], include=include)
        merged["ids"].extend(res["ids"])
        for k in include:
            merged[k].extend(res[k])
    return merged


def chroma_reads(ws: Any, col: Any, out: dict[str, float], prefix: str = "") -> dict[str, Any]:
    """Chroma's reads of the GLOBAL scope by id (the workspace's path), all fields then each alone."""
    from agently_vecmem.filters import Scope
    from agently_vecmem.records import DEFAULT_USER
    from agently_vecmem.workspace.directory import directory_key

    t = time.perf_counter()
    ids = ws._dirs.ids(directory_key(DEFAULT_USER, "memory", "GLOBAL_MEMORY", None))
    t = _lap(out, f"{prefix}scope directory (ids)", t)
    res = _read(col, ids, ["metadatas", "documents", "embeddings"])
    t = _lap(out, f"{prefix}Chroma read: metadatas+documents+embeddings", t)
    _read(col, ids, ["metadatas"])
    t = _lap(out, f"{prefix}Chroma read: metadatas only", t)
    _read(col, ids, ["documents"])
    t = _lap(out, f"{prefix}Chroma read: documents only", t)
    _read(col, ids, ["embeddings"])
    t = _lap(out, f"{prefix}Chroma read: embeddings only", t)
    _read(col, ids, [])
    t = _lap(out, f"{prefix}Chroma read: ids only", t)
    col.get(where=Scope.global_memory().for_user(DEFAULT_USER).where(), include=[])
    _lap(out, f"{prefix}Chroma filtered read (where vecmem_scope), ids only", t)
    return res


def steps(path: str) -> dict[str, float]:
    import numpy as np

    from agently_vecmem.filters import Scope, matches
    from agently_vecmem.records import DEFAULT_USER
    from agently_vecmem.search import candidates as cand
    from agently_vecmem.search.lexical import BM25Index, bm25_for_view, tokenize
    from agently_vecmem.search.view import ScopeView, record_order
    from agently_vecmem.workspace import ChromaWorkspace
    from agently_vecmem.workspace.chroma_io import decode_rows

    out: dict[str, float] = {}
    ws = ChromaWorkspace(path, embedder=data.DeterministicEmbedder(dim=data.DIM), read_only=True)
    res = chroma_reads(ws, ws._io.collection, out)
    scope = Scope.global_memory().for_user(DEFAULT_USER)
    clause = scope.where()
    t = time.perf_counter()
    keep = [i for i, meta in enumerate(res["metadatas"]) if matches(clause, meta or {})]
    picked = {k: [res[k][i] for i in keep] for k in ("ids", "metadatas", "documents", "embeddings")}
    t = _lap(out, "scope filter (matches on every row)", t)
    rows = list(decode_rows(picked))
    t = _lap(out, "decode_rows (MemoryRecord.from_chroma + per-row vector)", t)
    rows.sort(key=lambda row: record_order(row[0]))
    t = _lap(out, "sort by record_order", t)
    vecs = np.asarray([v for _, _, v in rows], dtype=np.float32).reshape(len(rows), data.DIM)
    t = _lap(out, "numpy stacking of the vectors", t)
    view = ScopeView(scope, tuple(r for r, _, _ in rows), vecs, tuple(d for _, d, _ in rows), 0)
    t = _lap(out, "ScopeView", t)
    del res, picked, rows
    out["rss_mb_after_view"] = rss_bytes() / MB
    t = time.perf_counter()
    for doc in view.documents:
        tokenize(doc)
    t = _lap(out, "BM25: tokenize every document (cold)", t)
    BM25Index.build(view.documents)
    t = _lap(out, "BM25: postings (tokens cached)", t)
    bm25_for_view(view)  # the cached one the retrieval uses
    t = time.perf_counter()
    cand._order_columns(view)
    t = _lap(out, "neighbours: order columns (provenance per record)", t)
    cand.neighbor_indices(view)
    t = _lap(out, "neighbours: links (lexsort)", t)
    cand._session_groups(view)
    t = _lap(out, "session groups", t)
    qvec = ws.embed_query(QUERY)
    t = time.perf_counter()
    cand.retrieve_candidates(view, QUERY, qvec, k=10)
    _lap(out, "rest of the first retrieve_candidates", t)
    out["rss_mb"] = rss_bytes() / MB
    snap = Path(os.environ["PROFILE_SNAPSHOT"])
    with open(snap / "records.pkl", "wb") as fh:
        pickle.dump(view.records, fh, protocol=5)
    with open(snap / "documents.pkl", "wb") as fh:
        pickle.dump(view.documents, fh, protocol=5)
    with open(snap / "bm25.pkl", "wb") as fh:
        pickle.dump(bm25_for_view(view), fh, protocol=5)
    with open(snap / "neighbors.pkl", "wb") as fh:
        pickle.dump((cand._order_columns(view), cand.neighbor_indices(view), cand._session_groups(view)), fh,
                    protocol=5)
    np.save(snap / "vectors.npy", view.vectors)
    t = time.perf_counter()
    pickle.dumps(view.records, protocol=5)
    _lap(out, "pickle.dumps of the record tuple", t)
    return out


def persisted(_: str) -> dict[str, float]:
    import numpy as np

    import agently_vecmem.records  # noqa: F401
    import agently_vecmem.search.lexical  # noqa: F401 - the classes the pickles name

    snap = Path(os.environ["PROFILE_SNAPSHOT"])
    out: dict[str, float] = {}
    for name in ("records", "documents", "bm25", "neighbors"):
        t = time.perf_counter()
        with open(snap / f"{name}.pkl", "rb") as fh:
            pickle.load(fh)
        _lap(out, f"pickle.load: {name} ({(snap / f'{name}.pkl').stat().st_size / MB:.0f} MB)", t)
    t = time.perf_counter()
    vecs = np.load(snap / "vectors.npy", mmap_mode="r")
    t = _lap(out, f"np.load(mmap_mode='r'): vectors ({(snap / 'vectors.npy').stat().st_size / MB:.0f} MB)", t)
    vecs @ np.ones(vecs.shape[1], dtype=np.float32)
    _lap(out, "first dense pass over the mapped vectors (page cache warm)", t)
    out["rss_mb"] = rss_bytes() / MB
    return out


def server_reads(path: str) -> dict[str, float]:
    from agently_vecmem.workspace import ChromaWorkspace

    out: dict[str, float] = {}
    with chroma_server(path) as (port, _):
        ws = ChromaWorkspace(host="127.0.0.1", port=port, embedder=data.DeterministicEmbedder(dim=data.DIM))
        chroma_reads(ws, ws._io.collection, out, "server: ")
        ws.close()
    return out


def child(kind: str, path: str) -> dict[str, float]:
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
    code = (f"import sys, json; sys.path.insert(0, {str(Path(__file__).parent)!r}); import profile_coldstart as p; "
            f"print('RESULT ' + json.dumps(p.{kind}({path!r})))")
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    result = child_result(proc, kind)
    result["process wall (incl. imports)"] = time.perf_counter() - t
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--store-dir", type=Path, default=None, help="reuse a store built there (default: a temp dir)")
    p.add_argument("--server", action="store_true", help="also time Chroma's reads through `chroma run`")
    args = p.parse_args()
    root = args.store_dir or Path(tempfile.mkdtemp(prefix="profile-coldstart-"))
    corpus = data.Corpus(0)
    store, reused = data.cached_store(root, f"globals-{args.records}", lambda d: data.build_store(
        d / "chroma", data.global_records(corpus, args.records), f"{args.records:,} GLOBAL"))
    path = str(store / "chroma")
    print(f"profile_coldstart: {args.records:,} GLOBAL records ({'reused' if reused else 'built'} {store}); {load()}")
    with tempfile.TemporaryDirectory(prefix="profile-snapshot-") as snap:
        os.environ["PROFILE_SNAPSHOT"] = snap
        results = {kind: child(kind, path) for kind in ("real", "steps", "persisted")}
        if args.server:
            results["server"] = child("server_reads", path)
    for kind, figures in results.items():
        print(f"-- {kind}")
        for name, value in figures.items():
            unit = "" if name in ("records",) else (" MB" if name.startswith("rss") else " s")
            print(f"  {name:<62} {value:10.3f}{unit}" if unit != " MB" else f"  {name:<62} {value:10.0f}{unit}")
    print("RESULTS " + json.dumps(results))


if __name__ == "__main__":
    main()

"""Many users on one store: what a user's first retrieval costs as the collection grows, embedded and on a
``chroma run`` server, measured side by side with the read the store did before users had a scope key of
their own.

U users with 3 GLOBAL memories each live in one collection (the store is filled with Chroma's client
directly, as a store written before users would be, then migrated when the workspace opens it: that run
lists every scope in its directory; the migration time is printed). For 20 users never read before in the
process:

* ``first retrieval``: a fresh session of the user on VecMemory, ``prepare_request`` (its first read of the
  user's GLOBAL and SESSION scopes through their directories, then hybrid retrieval), no model;
* ``first view``: ``for_user(u).view(GLOBAL)`` of another unseen user (reads by id through the directory),
  beside two filtered reads of the same records: by the scope's one ``vecmem_scope`` key, and ``before``, by
  the conjunction of broad conditions (``user_id``, ``collection``, ``memory_scope``, ``status``) that almost
  every record matches;
* ``count()``: Chroma's unfiltered count, a floor for any filtered read of the collection;
* ``put``: one GLOBAL memory of one user (embedding excluded: deterministic vectors).

Sizes: 1,000 and 10,000 users (``--quick``: 300 and 3,000); ``--full`` adds 100,000 (300,000 records; the
fill takes minutes).
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
from _common import (
    chroma_server,
    load,
    ms,
    p50,
    p95,
    parser,
    row,
    rss_bytes,
    summary,
    tmpdir,
)

from agently_vecmem.filters import Scope, compile_where
from agently_vecmem.records import MemoryRecord
from agently_vecmem.session import Prompt, Session
from agently_vecmem.testing import DeterministicEmbedder
from agently_vecmem.workspace import ChromaWorkspace

PER_USER = 3
SAMPLE = 20
COLLECTION = "vecmem_memory"


def fill(client: Any, emb: DeterministicEmbedder, users: int, seed: int) -> None:
    """``users`` x :data:`PER_USER` GLOBAL records in the collection a ChromaWorkspace with ``emb`` opens."""
    col = client.get_or_create_collection(
        COLLECTION, embedding_function=None, configuration={"hnsw": {"space": "cosine"}},
        metadata={"vecmem_schema": 1, "vecmem_embedder_model": emb.model_id, "vecmem_embedder_dim": emb.dim})
    rng = np.random.default_rng(seed)
    topics = ["tea", "coffee", "cycling", "piano", "order", "garden", "travel", "books"]
    batch: list[MemoryRecord] = []

    def flush() -> None:
        vecs = rng.normal(size=(len(batch), emb.dim)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        col.add(ids=[r.id for r in batch], embeddings=vecs, metadatas=[r.to_chroma() for r in batch],
                documents=[r.search_text() for r in batch])
        batch.clear()

    for u in range(users):
        for j in range(PER_USER):
            batch.append(MemoryRecord(memory_scope="GLOBAL_MEMORY", user_id=f"user{u}",
                                      summary=f"user {u} likes {topics[(u + j) % len(topics)]} number {j}"))
        if len(batch) >= 4_998:
            flush()
    if batch:
        flush()


def old_where(user: str) -> dict[str, Any]:
    """The clause of a user's active GLOBAL scope as a conjunction of broad conditions (before ``vecmem_scope``)."""
    return compile_where({"user_id": user, "collection": "memory", "memory_scope": "GLOBAL_MEMORY",
                          "status": "active"})  # type: ignore[return-value]


def measure(ws: ChromaWorkspace, users: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed + 1)
    chosen = rng.choice(users, size=min(2 * SAMPLE, users), replace=False)
    picks, others = [f"user{u}" for u in chosen[::2]], [f"user{u}" for u in chosen[1::2]]
    col = ws.client.get_collection(COLLECTION)
    first, view_first, scope_new, scope_old, counts, puts = [], [], [], [], [], []
    for user, other in zip(picks, others, strict=False):
        t = time.perf_counter()
        view = ws.for_user(other).view(Scope.global_memory())
        view_first.append(time.perf_counter() - t)
        assert len(view) == PER_USER
        t = time.perf_counter()
        col.get(where=old_where(user), include=["metadatas", "documents", "embeddings"])
        scope_old.append(time.perf_counter() - t)
        t = time.perf_counter()
        col.get(where=Scope.global_memory().for_user(user).where(), include=["metadatas", "documents", "embeddings"])
        scope_new.append(time.perf_counter() - t)
        t = time.perf_counter()
        col.count()
        counts.append(time.perf_counter() - t)
        mine = ws.for_user(user)
        session = Session(id=f"first-{user}").use_memory(mode="VecMemory", workspace=mine)
        prompt = Prompt().set("input", "what does the user like?")
        t = time.perf_counter()
        diag = session.memory.prepare_request_sync(prompt=prompt, session=session)
        first.append(time.perf_counter() - t)
        assert diag["user_id"] == user and len(prompt.get("GLOBAL_MEMORY") or []) == PER_USER
        record = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f"{user} now likes tennis")
        vec = ws.embedder.embed_documents([record.document()])
        t = time.perf_counter()
        mine.put(record, vectors=vec)
        puts.append(time.perf_counter() - t)
    return {"first": first, "view": view_first, "new": scope_new, "old": scope_old, "count": counts, "put": puts}


def report(mode: str, users: int, m: dict[str, Any], migrated: float) -> float:
    ratio = p50(m["old"]) / p50(m["view"])
    row(f"{mode:<8} {users:>7,} users ({users * PER_USER:>7,} records, migrated in {migrated:.1f} s)",
        f"first retrieval p50 {ms(p50(m['first']))} p95 {ms(p95(m['first']))}",
        f"| first view {ms(p50(m['view']))}; filtered by key {ms(p50(m['new']))}, before {ms(p50(m['old']))}"
        f" ({ratio:.1f}x)",
        f"| count() {ms(p50(m['count']))}",
        f"| put p50 {ms(p50(m['put']))}",
        f"| RSS {rss_bytes() / 2**20:.0f} MB", width=1)
    return ratio


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--full", action="store_true", help="also 100,000 users (300,000 records)")
    p.add_argument("--no-server", action="store_true", help="embedded stores only")
    args = p.parse_args()
    sizes = [300, 3_000] if args.quick else [1_000, 10_000] + ([100_000] if args.full else [])
    emb = DeterministicEmbedder(dim=64)
    print(f"bench_users: {PER_USER} GLOBAL memories per user, {SAMPLE} unseen users per size; {load()}")
    results: dict[str, dict[int, float]] = {"embedded": {}, "server": {}}
    import chromadb

    for users in sizes:
        with tmpdir("bench-users") as d:
            fill(chromadb.PersistentClient(path=str(d / "embedded")), emb, users, args.seed)
            t = time.perf_counter()
            with ChromaWorkspace(d / "embedded", embedder=emb) as ws:
                migrated = time.perf_counter() - t
                results["embedded"][users] = report("embedded", users, measure(ws, users, args.seed), migrated)
            if args.no_server:
                continue
            with chroma_server(d / "server") as (port, _):
                fill(chromadb.HttpClient(host="127.0.0.1", port=port), emb, users, args.seed)
                t = time.perf_counter()
                with ChromaWorkspace(host="127.0.0.1", port=port, embedder=emb) as ws:
                    migrated = time.perf_counter() - t
                    results["server"][users] = report("server", users, measure(ws, users, args.seed), migrated)
    largest = sizes[-1]
    text = json.dumps({mode: {str(k): round(v, 1) for k, v in r.items()} for mode, r in results.items() if r})
    summary("bench_users", True, f"first view vs a filtered read before at {largest:,} users: "
            f"{results['embedded'][largest]:.1f}x embedded; all sizes {text}")


if __name__ == "__main__":
    main()

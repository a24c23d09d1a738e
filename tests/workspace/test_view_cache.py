"""The bounded snapshot cache: least recently used scopes evicted whole within a byte budget, with stats; a
workspace that evicts (even one whose budget holds no scope at all) answers exactly like one that never does."""

from __future__ import annotations

import random
from collections import Counter
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from agently_vecmem import MemoryRecord, Scope
from agently_vecmem.errors import ConfigurationError
from agently_vecmem.search.view import ScopeView
from agently_vecmem.testing import DeterministicEmbedder
from agently_vecmem.workspace import ChromaWorkspace
from agently_vecmem.workspace.view_cache import ViewCache, view_bytes


def _view(n: int, dim: int = 8) -> ScopeView:
    recs = tuple(MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f"r{i}") for i in range(n))
    return ScopeView(Scope.global_memory(), recs, np.ones((n, dim), dtype=np.float32), tuple("d" for _ in recs))


def test_lru_eviction_within_the_budget_and_stats() -> None:
    one = view_bytes(_view(10))
    cache = ViewCache(budget=2 * one)
    cache.add(("a",), _view(10))
    cache.add(("b",), _view(10))
    assert cache.get(("a",)) is not None  # a is now the most recently used
    cache.add(("c",), _view(10))  # over budget: b (least recently used) goes
    assert cache.get(("b",)) is None and cache.get(("a",)) is not None and cache.get(("c",)) is not None
    assert cache.stats() == {"scopes": 2, "bytes": 2 * one, "budget_bytes": 2 * one, "hits": 3, "misses": 1,
                             "evictions": 1}
    cache.replace(("a",), _view(20))  # a write grew a: c goes
    assert len(cache) == 1 and cache.total == view_bytes(_view(20)) and cache.evictions == 2
    cache.replace(("zzz",), _view(1))  # not cached: nothing to replace
    assert len(cache) == 1


def test_a_scope_loaded_from_its_snapshot_counts_what_it_holds_in_memory(tmp_path: Any) -> None:
    """Its vectors are memory-mapped (the page cache holds them, shared) and its records stay encoded: only
    the per-record structures count, about a quarter of a decoded scope's (vectors not included)."""
    from agently_vecmem.workspace.snapshots import SnapshotFiles

    view = _view(300, dim=64)
    files = SnapshotFiles(tmp_path, {"collection": "c", "model": "m", "dim": 64}, min_records=1)
    assert files.save(view.scope.key, *view.columns(), view.rows(slice(None)), {}, {"kind": "seq"})
    loaded = files.load(view.scope.key)
    assert loaded is not None
    mapped = ScopeView(view.scope, loaded.records, loaded.vectors, loaded.documents, ids=loaded.ids)
    assert mapped.encoded and mapped.vector_bytes == 0 and view.vector_bytes == 300 * 64 * 4
    assert view_bytes(mapped) * 3 < view_bytes(view) - view.vector_bytes
    grown = mapped.with_records([MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="new")],
                                np.ones((1, 64), dtype=np.float32), ["new"], version=2)
    assert grown is not None and grown.encoded and grown.vector_bytes >= 301 * 64 * 4  # an append copies the rows


def test_a_scope_larger_than_the_budget_is_not_kept(caplog: pytest.LogCaptureFixture) -> None:
    cache = ViewCache(budget=10)
    cache.add(("big",), _view(5))
    cache.add(("big2",), _view(5))
    assert len(cache) == 0 and cache.total == 0
    assert sum("larger than the snapshot budget" in r.getMessage() for r in caplog.records) == 1  # logged once
    with pytest.raises(ConfigurationError):
        ViewCache(budget=-1)


def _program(seed: int, steps: int) -> list[tuple[Any, ...]]:
    rng = random.Random(seed)
    users, sessions = ["default", "u1", "u2"], [f"s{i}" for i in range(12)]
    ops: list[tuple[Any, ...]] = []
    for step in range(steps):
        user, sid = rng.choice(users), rng.choice(sessions)
        kind = rng.choice(["put", "put", "read", "read", "read", "delete", "update"])
        ops.append((kind, user, sid, step, rng.random()))
    return ops


@pytest.mark.parametrize("budget", [1, 40_000])  # nothing fits; about two small scopes fit
def test_evicting_workspace_answers_like_one_that_never_evicts(tmp_path: Any, budget: int) -> None:
    emb = DeterministicEmbedder(dim=32)
    full = ChromaWorkspace(tmp_path / "full", embedder=emb)
    small = ChromaWorkspace(tmp_path / "small", embedder=emb, cache_bytes=budget)
    written: dict[str, list[str]] = {}
    for kind, user, sid, step, x in _program(seed=budget, steps=300):
        pair = [ws if user == "default" else ws.for_user(user) for ws in (full, small)]
        scope = Scope.session_memory(sid) if x < 0.6 else Scope.global_memory()
        mine = written.setdefault(user, [])
        if kind == "put":
            rec = MemoryRecord(id=f"{user}-{step}", memory_scope=scope.memory_scope or "GLOBAL_MEMORY",
                               session_id=scope.session_id, summary=f"{user} note {step} about tea {sid}")
            for ws in pair:
                ws.put(rec)
            mine.append(rec.id)
        elif kind == "delete" and mine:
            victim = mine.pop(int(x * len(mine)))
            assert [ws.delete(victim, hard=x < 0.5) for ws in pair] == [1, 1]
        elif kind == "update" and mine:
            rid = mine[int(x * len(mine))]
            for ws in pair:
                ws.update(rid, summary=f"updated {step} coffee")
        else:
            views = [ws.view(scope) for ws in pair]
            skip = {"vector_index", "updated_at"}  # update() stamps each store's own clock
            assert [r.model_dump(exclude=skip) for r in views[0].records] == [
                r.model_dump(exclude=skip) for r in views[1].records]
            hits = [[(h.record.id, round(h.score, 5)) for h in ws.search("tea note", scope=scope, k=5)] for ws in pair]
            assert hits[0] == hits[1]
    stats = small.cache_stats()
    assert stats["budget_bytes"] == budget and stats["bytes"] <= budget
    assert stats["evictions"] > 0 or budget == 1
    assert full.cache_stats()["evictions"] == 0 and small.info()["cache"]["misses"] > full.cache_stats()["misses"]
    full.close()
    small.close()


def test_a_write_touches_only_the_snapshots_its_records_belong_to(tmp_path: Any,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """With many session scopes cached, a GLOBAL write updates the GLOBAL snapshot only and a session write
    that session's (and the GLOBAL one, which spans sessions); a record moved between sessions leaves the old
    session's snapshot and enters the new one's; other users' snapshots are never looked at."""
    ws = ChromaWorkspace(tmp_path / "s", embedder=DeterministicEmbedder(dim=16))
    bob = ws.for_user("bob")
    for i in range(200):
        ws.put(MemoryRecord(memory_scope="SESSION_MEMORY", session_id=f"s{i}", summary=f"note {i}"))
        bob.put(MemoryRecord(memory_scope="SESSION_MEMORY", session_id=f"s{i}", summary=f"bob {i}"))
        ws.view(Scope.session_memory(f"s{i}"))
        bob.view(Scope.session_memory(f"s{i}"))
    ws.view(Scope.global_memory())
    touched: list[Scope] = []
    real = ScopeView.with_records

    def spy(self: ScopeView, *args: Any, **kwargs: Any) -> Any:
        touched.append(self.scope)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ScopeView, "with_records", spy)
    ws.put(MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="a global fact"))
    assert [(s.memory_scope, s.session_id) for s in touched] == [("GLOBAL_MEMORY", None)]
    touched.clear()
    moved = ws.put(MemoryRecord(memory_scope="SESSION_MEMORY", session_id="s5", summary="moving"))[0]
    assert {(s.memory_scope, s.session_id) for s in touched} == {("GLOBAL_MEMORY", None), ("SESSION_MEMORY", "s5")}
    touched.clear()
    ws.update(moved.id, session_id="s9")
    assert {s.session_id for s in touched} == {None, "s5", "s9"}
    assert "moving" not in [r.summary for r in ws.view(Scope.session_memory("s5")).records]
    assert [r.summary for r in ws.view(Scope.session_memory("s9")).records] == ["note 9", "moving"]
    assert all(s.user_id == "default" for s in touched)


def test_rewrites_in_a_warm_scope_answer_like_a_fresh_read(tmp_path: Any) -> None:
    """Supersedes, deletes and importance changes in a scope whose snapshot (with its lexical index and order
    columns) is warm keep those structures, filtered: every answer equals a fresh process's read of the store."""
    from agently_vecmem.memory.pending import dedup_key, supersede
    from agently_vecmem.memory.remembering import _dedup_keys
    from agently_vecmem.search.candidates import retrieve_candidates

    ws = ChromaWorkspace(str(tmp_path / "s"), embedder=DeterministicEmbedder(), snapshots=False)
    rng = random.Random(3)
    words = ["tea", "Lisbon", "sister", "guitar", "marathon", "Porto", "garden", "cat", "pottery", "Rust"]
    ws.put([MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=" ".join(rng.sample(words, 4)) + f" {i}",
                         provenance={"session_id": f"c{i % 3}", "position": i}) for i in range(60)])
    queries = ["Where does my sister live?", "tea garden", "guitar marathon Rust"]
    g = Scope.global_memory()

    def answers(workspace: ChromaWorkspace) -> list[list[tuple[str, float]]]:
        view = workspace.view(g)
        return [[(c.record.id, round(c.score, 5)) for c in retrieve_candidates(view, q, workspace.embed_query(q), k=8)]
                for q in queries]

    answers(ws)  # warm: the structures are built
    call = SimpleNamespace(view=ws.view)  # what consolidation's exact-duplicate check reads the keys through
    for step in range(9):
        _dedup_keys(call, g)  # type: ignore[arg-type]
        view = ws.view(g)
        target = view.records[rng.randrange(len(view))]
        if step % 3 == 0:
            new = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f"{target.summary} corrected", supersedes=target.id)
            ws.put([supersede(target, new.id), new])
        elif step % 3 == 1:
            # another write first (as another worker's would be): the delete lands on an appended snapshot
            ws.put([MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f"cat garden note {step}")])
            ws.delete([target.id])
        else:
            ws.update(target.id, importance=0.95)
        kept = ws.view(g).derived if step % 3 else ws.view(g).base[0]  # type: ignore[index]
        assert any(isinstance(k, tuple) and k[0] == "bm25" for k in kept), step  # filtered, not rebuilt
        assert "dedup_keys" in kept, step
        assert _dedup_keys(call, g) == Counter(map(dedup_key, ws.view(g).records)), step  # type: ignore[arg-type]
        warm = answers(ws)
        fresh = ChromaWorkspace(str(tmp_path / "s"), embedder=DeterministicEmbedder(), snapshots=False, read_only=True)
        assert warm == answers(fresh), step
        fresh.close()
    ws.close()

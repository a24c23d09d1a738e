"""ChromaWorkspace on a real ``chroma run`` server shared by several Workspaces (each one stands for a worker
process: its own scope snapshots, its own writer id): change markers, incremental refresh, bad markers,
a writer dying mid-write, all-or-nothing puts, and the server going away and coming back."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import numpy as np
import pytest
from test_workspace_contract import _assert_view_consistent, rec, seed, srec

from agently_vecmem.errors import WorkspaceError
from agently_vecmem.filters import ALL_SCOPES, Scope
from agently_vecmem.records import MemoryRecord
from agently_vecmem.testing import DeterministicEmbedder
from agently_vecmem.workspace import ChromaWorkspace, changelog

G = Scope.global_memory()
S1 = Scope.session_memory("s1")
S2 = Scope.session_memory("s2")
SCOPES = [G, S1, S2, Scope.global_memory(include_inactive=True), ALL_SCOPES]


@pytest.fixture
def pair(chroma_server: tuple[str, int]):
    """Two Workspaces on one server collection, as two worker processes would open them."""
    host, port = chroma_server
    name = f"p-{uuid.uuid4().hex[:10]}"
    a = ChromaWorkspace(host=host, port=port, collection=name, embedder=DeterministicEmbedder())
    b = ChromaWorkspace(host=host, port=port, collection=name, embedder=DeterministicEmbedder())
    yield a, b
    a.close()
    b.close()


def summaries(ws: ChromaWorkspace, scope: Scope) -> list[str]:
    return [r.summary for r in ws.view(scope).records]


def test_foreign_writes_are_seen_on_the_next_read_incrementally(pair) -> None:  # noqa: ANN001
    a, b = pair
    recs = seed(b)
    _assert_view_consistent(a, SCOPES)  # a caches every view
    reloads = a._changes.stats["reloads"]
    b.put([rec("User likes hiking", created_at=0.5), srec("Booked the flight", created_at=6.0)])
    assert "User likes hiking" in summaries(a, G) and "Booked the flight" in summaries(a, S1)
    assert a.search("hiking", scope=G, k=1)[0].record.summary == "User likes hiking"
    b.update(recs["g_tea"].id, summary="User prefers black tea")
    b.update(recs["s1_trip"].id, memory_scope="SESSION_MEMORY", session_id="s2")  # moves between scopes
    b.update(recs["g_job"].id, status="superseded", superseded_by=recs["g_tea"].id)
    _assert_view_consistent(a, SCOPES)
    assert "User works as a nurse" not in summaries(a, G)
    assert "User works as a nurse" in summaries(a, Scope.global_memory(include_inactive=True))
    b.delete(recs["s2_tea"].id)
    b.delete(recs["s1_tea"].id, hard=True)
    _assert_view_consistent(a, SCOPES)
    assert recs["s1_tea"].id not in [r.id for r in a.view(ALL_SCOPES).records]
    b.put(MemoryRecord(id=recs["s2_tea"].id, memory_scope="GLOBAL_MEMORY", summary="undeleted", created_at=5.0))
    _assert_view_consistent(a, SCOPES)
    # and the other way round, interleaved
    a.put(rec("from a"))
    assert "from a" in summaries(b, G)
    assert a._changes.stats["reloads"] == reloads, "refreshed incrementally, never reloaded whole"
    assert a._changes.stats["refreshed_ids"] >= 8


def test_unchanged_store_costs_one_head_read(pair) -> None:  # noqa: ANN001
    a, b = pair
    seed(b)
    a.view(G)
    calls: list[str] = []
    real_get = a._changes.collection.get
    a._changes.collection = _Spy(a._changes.collection, calls)
    for _ in range(5):
        a.view(G)
        a.search("tea", scope=G, k=2)
    assert calls == ["get"] * 10 and real_get is not None
    calls.clear()
    both = a.views(G, S1)  # several scopes from one check
    assert calls == ["get"] and both[G.key] is a.view(G) and both[S1.key].ids == [r.id for r in a.scan(scope=S1)]


class _Spy:
    def __init__(self, inner: Any, calls: list[str]) -> None:
        self._inner, self._calls = inner, calls

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if callable(attr):
            def spy(*args: Any, **kw: Any) -> Any:
                self._calls.append(name)
                return attr(*args, **kw)
            return spy
        return attr


def test_exact_index_off_queries_chroma_and_is_fresh(chroma_server) -> None:  # noqa: ANN001
    host, port = chroma_server
    name = f"h-{uuid.uuid4().hex[:10]}"
    a = ChromaWorkspace(host=host, port=port, collection=name, embedder=DeterministicEmbedder(), exact_index=False)
    b = ChromaWorkspace(host=host, port=port, collection=name, embedder=DeterministicEmbedder())
    seed(b)
    assert a.search("green tea", scope=G, k=1)[0].record.summary == "User prefers green tea"
    b.put(rec("User drinks mint tea daily"))
    assert "User drinks mint tea daily" in [h.record.summary for h in a.search("mint tea", scope=G, k=3)]
    a.close()
    b.close()


def _bad_head(ws: ChromaWorkspace, meta: dict[str, Any]) -> None:
    ws._changes.collection.upsert(ids=[changelog.HEAD_ID], embeddings=[[1.0, 1.0]], metadatas=[meta], documents=[""])


def test_marker_of_another_version_or_corrupted_reloads_with_a_warning(pair, caplog) -> None:  # noqa: ANN001
    a, b = pair
    seed(b)
    a.view(G)
    # a write that left no marker of this version (an older writer of this schema), then a head of another version
    old = rec("written by an old version", id="old1", user_id="default")
    b._dirs.record_writes([old])  # listed in its scope's directory first, as every writer of this schema does
    b._io.collection.upsert(ids=["old1"], embeddings=b.embedder.embed_documents(["written by an old version"]),
                            metadatas=[old.to_chroma()], documents=["written by an old version"])
    _bad_head(b, {"v": 0, "token": "legacy", "ts": time.time()})
    with caplog.at_level(logging.WARNING, logger="agently_vecmem.workspace.changelog"):
        assert "written by an old version" in summaries(a, G)
    assert any("not version" in r.getMessage() for r in caplog.records)
    _assert_view_consistent(a, SCOPES)
    caplog.clear()
    # a corrupted commit entry (its ids are not a JSON list) behind a fresh head
    b._changes.collection.add(ids=["junk.commit"], embeddings=[[0.5, 0.5]], documents=[""],
                              metadatas=[{"v": 1, "kind": "commit", "op": "junk", "writer": "w", "ts": time.time(),
                                          "ids": "{not json", "all": False}])
    b.put(rec("after the junk entry"))
    with caplog.at_level(logging.WARNING, logger="agently_vecmem.workspace.changelog"):
        assert "after the junk entry" in summaries(a, G)
    assert any("junk.commit" in r.getMessage() for r in caplog.records)
    _assert_view_consistent(a, SCOPES)


def test_writer_dying_between_records_and_commit_is_recovered(pair) -> None:  # noqa: ANN001
    a, b = pair
    seed(b)
    a.view(G)
    # b "crashes" after its intent and its records, before the commit marker and the head
    orphan = rec("written by a writer that died", id="orphan1", user_id="default")
    b._changes.begin([orphan.id])
    b._dirs.record_writes([orphan])
    b._io.collection.upsert(ids=[orphan.id], embeddings=b.embedder.embed_documents([orphan.document()]),
                         metadatas=[orphan.to_chroma()], documents=[orphan.document()])
    assert "written by a writer that died" not in summaries(a, G)  # never acknowledged: not yet required
    later = changelog.INTENT_TIMEOUT + changelog.RECHECK_SECONDS + 1
    a._changes._clock = lambda: time.time() + later
    assert "written by a writer that died" in summaries(a, G)
    _assert_view_consistent(a, SCOPES)


class _FailingCollection:
    """Wraps a Chroma collection; the ``fail_on``-th upsert raises (an injected server failure)."""

    def __init__(self, inner: Any, fail_on: int) -> None:
        self._inner, self.fail_on, self.upserts = inner, fail_on, 0

    def upsert(self, **kw: Any) -> Any:
        self.upserts += 1
        if self.upserts == self.fail_on:
            raise RuntimeError("injected failure of this batch")
        return self._inner.upsert(**kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_put_is_all_or_nothing_across_batches(workspace_factory, monkeypatch) -> None:  # noqa: ANN001
    import agently_vecmem.workspace.chroma as chroma_mod

    monkeypatch.setattr(chroma_mod, "MAX_BATCH", 3)
    ws = workspace_factory()
    other = workspace_factory() if workspace_factory.backend == "server" else None
    recs = seed(ws)
    _assert_view_consistent(ws, SCOPES)
    if other is not None:
        _assert_view_consistent(other, SCOPES)
    before = {r.id: r for r in ws.scan(scope=ALL_SCOPES)}
    vectors_before = ws.get_vectors(sorted(before))
    changed = [
        MemoryRecord(id=recs["g_tea"].id, memory_scope="SESSION_MEMORY", session_id="s1", summary="moved",
                     tags=["new-tag"], superseded_by="x"),
        MemoryRecord(id=recs["s1_trip"].id, memory_scope="SESSION_MEMORY", session_id="s1", summary="rewritten"),
    ]
    new = [rec(f"new note {i}") for i in range(8)]
    ws._io.collection = _FailingCollection(ws._io.collection, fail_on=3)  # batches 1 and 2 land, batch 3 fails
    with pytest.raises(WorkspaceError, match="injected failure"):
        ws.put(changed + new)
    ws._io.collection = ws._io.collection._inner
    after = {r.id: r for r in ws.scan(scope=ALL_SCOPES)}
    assert after == before, "no new or changed record is left behind"
    np.testing.assert_allclose(ws.get_vectors(sorted(before)), vectors_before, atol=1e-6)
    raw = ws._io.collection.get(ids=[recs["g_tea"].id], include=["metadatas"])["metadatas"][0]
    assert "superseded_by" not in raw and raw.get("tags") == recs["g_tea"].to_chroma().get("tags")
    _assert_view_consistent(ws, SCOPES)
    if other is not None:
        _assert_view_consistent(other, SCOPES)
    # the same put succeeds afterwards
    ws.put(changed + new)
    assert ws.count() == len(before) + 8
    _assert_view_consistent(ws, SCOPES)
    if other is not None:
        _assert_view_consistent(other, SCOPES)


def test_server_down_gives_a_clear_error_and_recovers_without_reopening(own_chroma_server) -> None:  # noqa: ANN001
    server = own_chroma_server
    ws = ChromaWorkspace(host=server.host, port=server.port, collection="down", embedder=DeterministicEmbedder(), timeout=5)
    ws.put(rec("survives a restart"))
    ws.view(G)
    server.kill()
    for call in (lambda: ws.view(G), lambda: ws.search("x", scope=G, k=1), lambda: ws.put(rec("lost")),
                 lambda: ws.scan(scope=G), lambda: ws.count()):
        start = time.monotonic()
        with pytest.raises(WorkspaceError) as err:
            call()
        assert time.monotonic() - start < 6
        msg = str(err.value)
        assert f"{server.host}:{server.port}" in msg and f"chroma run --path DIR --host {server.host} --port {server.port}" in msg
    server.start()
    assert summaries(ws, G) == ["survives a restart"]
    ws.put(rec("written after the restart"))
    assert ws.search("after the restart", scope=G, k=1)[0].record.summary == "written after the restart"
    with pytest.raises(WorkspaceError, match="chroma run"):
        ChromaWorkspace(host=server.host, port=server.port + 1 if server.port < 65535 else 1, embedder=DeterministicEmbedder())
    ws.close()


def test_bulk_write_reloads_once_then_refreshes_incrementally(pair, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(changelog, "MAX_IDS_PER_ENTRY", 3)
    a, b = pair
    seed(b)
    a.view(G)
    b.put([rec(f"bulk {i}") for i in range(5)])  # more ids than an entry names: readers reload whole
    assert sum(s.startswith("bulk") for s in summaries(a, G)) == 5
    reloads = a._changes.stats["reloads"]
    assert reloads >= 1
    for i in range(3):  # the bulk entry stays in the log window but is not acted on twice
        b.put(rec(f"small {i}"))
        assert f"small {i}" in summaries(a, G)
    assert a._changes.stats["reloads"] == reloads
    _assert_view_consistent(a, SCOPES)


def test_one_transient_internal_error_is_retried(pair) -> None:  # noqa: ANN001
    from chromadb.errors import InternalError

    a, b = pair
    seed(b)

    class Flaky:
        def __init__(self, inner: Any, failures: int) -> None:
            self._inner, self.failures = inner, failures

        def get(self, **kw: Any) -> Any:
            if self.failures:
                self.failures -= 1
                raise InternalError("Error executing plan: injected")
            return self._inner.get(**kw)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

    inner = a._io.collection
    a._io.collection = Flaky(inner, failures=1)
    assert len(a.scan(scope=G)) == 2
    a._io.collection = Flaky(inner, failures=2)
    with pytest.raises(WorkspaceError, match="injected"):
        a.scan(scope=G)


def test_scopes_larger_than_sqlites_variable_limit_are_read_in_chunks(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """Chroma (embedded and server) fails ``get(where=...)`` with fields above ~32k matches ("too many SQL
    variables"), after materializing them; views, scans and exports read at most a batch with a filter, then
    the ids and the records by id. VECMEM_FULL=1: 40k real records; quick: Chroma's refusal is injected on a
    small scope, and no unbounded read is asked."""
    import os

    import agently_vecmem.workspace.chroma as chroma_mod

    full = os.environ.get("VECMEM_FULL") == "1"
    n = 40_000 if full else 12
    if not full:
        monkeypatch.setattr(chroma_mod, "MAX_BATCH", 5)
    ws = ChromaWorkspace(tmp_path / "big", embedder=DeterministicEmbedder(dim=8))
    rng = np.random.default_rng(0)
    for start in range(0, n, 5_000):
        k = min(5_000, n - start)
        ws.put([rec(f"r{i}", id=f"r{i:06d}", created_at=float(i)) for i in range(start, start + k)],
               vectors=rng.random((k, 8)).astype(np.float32) + 0.1)
    if not full:
        from chromadb.errors import InternalError

        inner = ws._io.collection

        class Limited:
            def get(self, **kw: Any) -> Any:
                if kw.get("where") is not None and kw.get("include") and (kw.get("limit") or n + 1) > 6:
                    refused.append(kw)
                    raise InternalError("error returned from database: (code: 1) too many SQL variables")
                return inner.get(**kw)

            def __getattr__(self, name: str) -> Any:
                return getattr(inner, name)

        ws._io.collection = Limited()
    refused: list[dict[str, Any]] = []
    view = ws.view(G)
    assert view.ids == [f"r{i:06d}" for i in range(n)]
    assert [r.id for r in ws.scan(scope=G)] == view.ids
    np.testing.assert_allclose(view.vectors[-3:], ws.get_vectors(view.ids[-3:]), atol=1e-6)
    assert ws.export_jsonl(tmp_path / "all.jsonl") == n
    assert refused == [], "no read of a scope's fields asks Chroma for more than a batch with a filter"
    ws.close()


def test_consistent_block_reads_every_scope_from_one_check(pair) -> None:  # noqa: ANN001
    a, b = pair
    seed(b)
    a.view(G)
    calls: list[str] = []
    a._changes.collection = _Spy(a._changes.collection, calls)
    with a.consistent():
        a.view(G)
        b.put(rec("written during the block"))  # another process, after this block's check
        a.view(S1)
        a.search("tea", scope=S2, k=1)
        with a.consistent():  # nested blocks share the outer check
            assert "written during the block" not in summaries(a, G)
        a.put(rec("own write inside the block"))
        assert "own write inside the block" in summaries(a, G), "own writes are seen at once"
    assert calls.count("get") == 1
    assert "written during the block" in summaries(a, G), "the next read outside the block checks again"
    assert calls.count("get") >= 2


def test_consistent_block_holds_with_a_budget_smaller_than_any_scope(pair) -> None:  # noqa: ANN001
    """A scope the cache cannot keep is read once per block, not again (newer) on each use, and still follows
    this thread's own writes inside the block."""
    a, b = pair
    seed(b)
    host, port = a.client.get_settings().chroma_server_host, int(a.client.get_settings().chroma_server_http_port)
    tiny = ChromaWorkspace(host=host, port=port, collection=a.collection_name, embedder=DeterministicEmbedder(),
                           cache_bytes=1)
    try:
        with tiny.consistent():
            first = tiny.view(G)
            b.put(rec("written during the block"))
            assert tiny.view(G) is first and "written during the block" not in summaries(tiny, G)
            tiny.put(rec("own write inside the block"))
            assert "own write inside the block" in summaries(tiny, G)
            gone = tiny.view(G).records[0].id
            tiny.delete(gone, hard=True)
            assert gone not in tiny.view(G).ids
        assert "written during the block" in summaries(tiny, G)
        assert tiny.cache_stats()["scopes"] == 0
    finally:
        tiny.close()


def test_marker_failing_after_the_records_keeps_own_views_in_step(pair, monkeypatch) -> None:  # noqa: ANN001
    a, b = pair
    seed(a)
    a.view(G)
    b.view(G)

    def down(op: str, ids: Any) -> None:
        raise WorkspaceError("the Chroma server went away before the commit marker")

    monkeypatch.setattr(a._changes, "commit", down)
    with pytest.raises(WorkspaceError, match="went away"):
        a.put(rec("written, not acknowledged"))
    assert "written, not acknowledged" in summaries(a, G), "the records are in Chroma, so in a's snapshot too"
    assert "written, not acknowledged" not in summaries(b, G)  # never acknowledged: not yet required
    b._changes._clock = lambda: time.time() + changelog.INTENT_TIMEOUT + changelog.RECHECK_SECONDS + 1
    assert "written, not acknowledged" in summaries(b, G), "others get it when the intent times out"
    _assert_view_consistent(a, SCOPES)

"""Scope directories: a process's first read of a scope goes by id (no filtered read of the collection), every
acknowledged record is listed even when several writers race for the same entry number, stores written
before directories are listed by their migration, and an over-long directory falls back to a filtered read."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from agently_vecmem import MemoryRecord, Scope
from agently_vecmem.testing import DeterministicEmbedder
from agently_vecmem.workspace import ChromaWorkspace
from agently_vecmem.workspace import directory as directory_module

G = Scope.global_memory()


def _spy_filtered_reads(ws: ChromaWorkspace, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Record every ``get`` with a ``where`` the workspace makes from now on."""
    seen: list[Any] = []
    collection = ws._io.collection
    real = collection.get

    def get(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("where") is not None:
            seen.append(kwargs["where"])
        return real(*args, **kwargs)

    monkeypatch.setattr(collection, "get", get)
    return seen


def test_first_reads_go_by_id(workspace_factory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    writer = workspace_factory()
    alice = writer.for_user("alice")
    alice.put([MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f"alice fact {i}") for i in range(3)])
    alice.put(MemoryRecord(memory_scope="SESSION_MEMORY", session_id="c1", summary="alice in c1"))
    old = alice.put(MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="to be replaced"))[0]
    alice.update(old.id, summary="replaced")  # a replace lists nothing new; the record stays in its scope
    alice.delete(alice.scan(scope=G)[0].id, hard=True)
    writer.for_user("bob").put(MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="bob fact"))

    reader = workspace_factory()  # a fresh workspace: nothing cached
    seen = _spy_filtered_reads(reader, monkeypatch)
    views = reader.for_user("alice").views(G, Scope.session_memory("c1"), Scope.session_memory("never"))
    assert seen == []  # no pass over the collection
    g, c1, never = views.values()
    assert sorted(r.summary for r in g.records) == sorted(r.summary for r in alice.scan(scope=G))
    assert len(g) == 3 and "replaced" in {r.summary for r in g.records}
    assert [r.summary for r in c1.records] == ["alice in c1"] and len(never) == 0
    assert [r.summary for r in reader.for_user("bob").view(G).records] == ["bob fact"]


def test_unseen_scopes_of_one_request_load_at_once(workspace_factory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scopes of one ``views`` call that no cache holds load in threads, each once (one's snapshot while
    another's Chroma read runs), and hold what a read of each alone holds."""
    writer = workspace_factory()
    writer.put([MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f"fact {i}") for i in range(3)])
    writer.put(MemoryRecord(memory_scope="SESSION_MEMORY", session_id="c1", summary="in c1"))
    reader = workspace_factory()
    both_running = threading.Barrier(2, timeout=20)  # broken unless the two loads overlap
    real, loaded = reader._load_view, []

    def load(scope: Scope, **kwargs: Any) -> Any:
        loaded.append(scope.key)
        both_running.wait()
        return real(scope, **kwargs)

    monkeypatch.setattr(reader, "_load_view", load)
    views = reader.views(G, Scope.session_memory("c1"), G)
    assert len(loaded) == 2 and len(set(loaded)) == 2
    g, c1 = views[G.key], views[Scope.session_memory("c1").key]
    alone = workspace_factory()
    assert [r.id for r in g.records] == [r.id for r in alone.view(G).records] and len(g) == 3
    assert [r.summary for r in c1.records] == ["in c1"]
    assert reader.views(G, Scope.session_memory("c1"))[G.key] is g and len(loaded) == 2  # cached now


def test_racing_writers_never_lose_an_entry(workspace_factory: Any) -> None:
    a, b = workspace_factory(), workspace_factory()
    a.put(MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="first"))
    b.put(MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="second"))  # b learns the next free number
    a._dirs._tail.clear()  # a believes it is at 1: its next entry collides with b's and moves on
    a._dirs._tail[next(iter(b._dirs._tail))] = 1
    a.put(MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="third"))
    b.update(b.scan(scope=G)[0].id, memory_scope="SESSION_MEMORY", session_id="s9")  # moved: listed in s9
    fresh = workspace_factory()
    assert sorted(r.summary for r in fresh.view(G).records) == ["second", "third"]
    assert [r.summary for r in fresh.view(Scope.session_memory("s9")).records] == ["first"]


def test_a_store_written_before_directories_is_listed_by_its_migration(tmp_path: Any,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import chromadb

    emb = DeterministicEmbedder()
    path = str(tmp_path / "old")
    records = [MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f"old {i}") for i in range(4)] + [
        MemoryRecord(memory_scope="SESSION_MEMORY", session_id="s1", summary="old session")]
    col = chromadb.PersistentClient(path=path).create_collection(
        "vecmem_memory", embedding_function=None, configuration={"hnsw": {"space": "cosine"}},
        metadata={"vecmem_schema": 1, "vecmem_embedder_model": emb.model_id, "vecmem_embedder_dim": emb.dim})
    col.add(ids=[r.id for r in records], embeddings=emb.embed_documents([r.document() for r in records]),
            metadatas=[r.to_chroma() for r in records], documents=[r.search_text() for r in records])
    with ChromaWorkspace(path, embedder=emb) as ws:  # writable: migrated, directories listed
        assert ws.user_counts() == {"default": 5}
    with ChromaWorkspace(path, embedder=emb, read_only=True) as ro:
        seen = _spy_filtered_reads(ro, monkeypatch)
        assert sorted(r.summary for r in ro.view(G).records) == [f"old {i}" for i in range(4)]
        assert [r.summary for r in ro.view(Scope.session_memory("s1")).records] == ["old session"]
        assert seen == []


def test_an_over_long_directory_falls_back_to_a_filtered_read(ws: ChromaWorkspace,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(5):
        ws.put(MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f"note {i}"))  # five entries
    monkeypatch.setattr(directory_module, "MAX_ENTRIES", 2)
    monkeypatch.setattr(directory_module, "PAGE", 2)
    fresh = ChromaWorkspace(ws.path, collection=ws.collection_name, embedder=ws.embedder, read_only=True)
    seen = _spy_filtered_reads(fresh, monkeypatch)
    assert sorted(r.summary for r in fresh.view(G).records) == [f"note {i}" for i in range(5)]
    assert len(seen) == 1
    fresh.close()


def test_a_put_with_more_directory_entries_than_one_chroma_call_takes(tmp_path: Any) -> None:
    """Records and their entries stay within Chroma's batch limit (5,461 rows): 5,000 records over 1,250
    sessions (6,250 rows together) and 5,200 records each in its own session (5,200 entries on their own)."""
    ws = ChromaWorkspace(tmp_path / "s", embedder=DeterministicEmbedder(dim=8))
    spread = [MemoryRecord(memory_scope="SESSION_MEMORY", session_id=f"s{i % 1250}", summary=f"fact {i}")
              for i in range(5000)]
    ws.put(spread)
    alone = [MemoryRecord(memory_scope="SESSION_MEMORY", session_id=f"own{i}", summary=f"own {i}")
             for i in range(5200)]
    ws.put(alone)
    fresh = ChromaWorkspace(tmp_path / "s", embedder=DeterministicEmbedder(dim=8))
    assert [r.summary for r in fresh.view(Scope.session_memory("s7")).records] == [
        f"fact {i}" for i in range(7, 5000, 1250)]
    assert [r.summary for r in fresh.view(Scope.session_memory("own5199")).records] == ["own 5199"]
    assert fresh.count(scope=Scope.session_memory("s7")) == 4

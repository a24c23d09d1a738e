"""Persisted scope snapshots (:mod:`agently_vecmem.workspace.snapshots`): a fresh process loads a big scope
from its local file instead of reading it from Chroma, and answers exactly what a read from Chroma answers —
after writes of other processes (caught up from the change log on a server; refused when an embedded store
changed), with corrupt, partial, foreign or unwritable files (rebuilt with a WARNING, or skipped), with two
writers of one file, and after an erasure (no snapshot keeps erased text)."""

from __future__ import annotations

import gc
import hashlib
import logging
import os
import pickle
import threading
import uuid
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agently_vecmem import MemoryRecord, Scope
from agently_vecmem.search.candidates import retrieve_candidates, warm_view
from agently_vecmem.search.params import DEFAULT_PARAMS, RetrievalParams
from agently_vecmem.search.sketch import from_bfloat16
from agently_vecmem.testing import DeterministicEmbedder
from agently_vecmem.workspace import ChromaWorkspace, snapshots
from agently_vecmem.workspace import chroma as chroma_module
from agently_vecmem.workspace.snapshots import SnapshotFiles

G = Scope.global_memory()
MIN = 20  # scopes of at least this many records are snapshotted in these tests


def _records(n: int, start: int = 0, session: str | None = None) -> list[MemoryRecord]:
    words = ["tea", "hiking", "Paris", "violin", "garden", "python", "coffee", "river"]
    return [MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f"note {i} about {words[i % 8]} and {words[i % 5]}",
                         provenance={"session_id": session or f"c{i // 10}", "position": i % 10})
            for i in range(start, start + n)]


def _embedded(path: Path, **kw: Any) -> ChromaWorkspace:
    # An explicit budget: close() saves the scopes it keeps, also when a test run forces eviction for the rest
    return ChromaWorkspace(path, embedder=DeterministicEmbedder(dim=32), snapshot_min_records=MIN,
                           cache_bytes=1 << 30, **kw)


def _state(ws: ChromaWorkspace, scope: Scope = G) -> tuple[Any, ...]:
    view = ws.view(scope)
    qvec = ws.embed_query("tea in Paris")
    top = [c.record.id for c in retrieve_candidates(view, "tea in Paris", qvec, k=8)]
    # (vectors to 5 decimals: a vector held since its put and the same one read back from Chroma differ in the
    # last bits)
    return ([r.model_dump() for r in view.records], list(view.documents), np.round(view.vectors, 5).tolist(), top)


def _truth(path: Path | None = None, **server: Any) -> tuple[Any, ...]:
    """What a read from Chroma answers (a workspace without snapshots)."""
    ws = (ChromaWorkspace(path, embedder=DeterministicEmbedder(dim=32), snapshots=False, read_only=True)
          if path is not None else ChromaWorkspace(embedder=DeterministicEmbedder(dim=32), snapshots=False, **server))
    try:
        return _state(ws)
    finally:
        ws.close()


def _spy_scope_reads(ws: ChromaWorkspace, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many rows each whole-scope read (by directory or filter) fetched from now on."""
    sizes: list[int] = []
    for name in ("_listed_rows", "_scope_rows"):
        real = getattr(ws, name)

        def spy(*args: Any, _real: Any = real) -> Any:
            rows = _real(*args)
            if rows is not None:
                sizes.append(len(rows))
            return rows

        monkeypatch.setattr(ws, name, spy)
    return sizes


def test_embedded_fresh_process_loads_the_snapshot_and_answers_the_same(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    ws = _embedded(tmp_path / "s")
    ws.put(_records(60))
    ws.view(G)  # read from Chroma, then written to its snapshot (with its BM25 index and neighbours)
    ws.put(_records(5, start=60))  # the store changed: the snapshot is saved again at close
    ws.close()
    files = SnapshotFiles(tmp_path / "s" / "vecmem_snapshots", {}).directory
    assert any(p.suffix == ".snap" for p in files.rglob("*")), "close() saved the changed scope"
    fresh = _embedded(tmp_path / "s", read_only=True)
    reads = _spy_scope_reads(fresh, monkeypatch)
    got = _state(fresh)
    assert reads == [], "the scope came from its snapshot, not from Chroma"
    assert fresh.info()["snapshots"]["loaded"] == 1
    assert ("bm25", DEFAULT_PARAMS.k1, DEFAULT_PARAMS.b) in fresh.view(G).derived  # loaded with the snapshot, not rebuilt
    fresh.close()
    assert got == _truth(tmp_path / "s")
    assert len(got[0]) == 65
    small = _embedded(tmp_path / "s", read_only=True)
    assert small.view(Scope.session_memory("nothing")).records == ()  # small scopes: no snapshot, no file
    small.close()


def test_a_loaded_snapshot_keeps_its_records_encoded_and_its_sketch(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh process reads the records of a loaded snapshot only when it needs them (the memory-mapped
    ``.rows`` file: nothing decoded at load), and adopts the sketch the saving process built for the pool
    instead of building it, with the rows at half width the pool scores (not the full rows' pages); both
    answer as a read from Chroma does (the same records; scores within bfloat16's rounding)."""
    pooled = RetrievalParams(pool_min_records=1, pool_size=30)
    monkeypatch.setattr(chroma_module, "warm_view", lambda view: warm_view(view, pooled))  # a "large" scope
    ws = _embedded(tmp_path / "s")
    ws.put(_records(80))
    built = ws.view(G)
    assert built._cols.rows.sketch is not None  # built before the snapshot was saved
    ws.close()
    decoded: list[bytes] = []
    real = snapshots._decode_record
    monkeypatch.setattr(snapshots, "_decode_record", lambda data: decoded.append(data) or real(data))
    fresh = _embedded(tmp_path / "s", read_only=True)
    view = fresh.view(G)
    assert fresh.info()["snapshots"]["loaded"] == 1 and view.encoded
    assert decoded == [] and view.ids == built.ids, "nothing decoded at load; the ids came with the snapshot"
    sketch = view._cols.rows.sketch
    assert sketch is not None and sketch.size == 80 and sketch.private_from == 80  # mapped, not built
    np.testing.assert_allclose(sketch.codes[:80], built._cols.rows.sketch.codes[:80], atol=1e-6)
    assert sketch.half is not None and sketch.half.dtype == np.uint16 and isinstance(sketch.half, np.memmap)
    np.testing.assert_allclose(from_bfloat16(sketch.half[:80]), built.vectors, rtol=2.0 ** -8)
    qvec = fresh.embed_query("tea in Paris")
    hits = retrieve_candidates(view, "tea in Paris", qvec, k=8, params=pooled)
    assert 0 < len(decoded) < 80, "only the records a query reads are decoded"
    truth = ChromaWorkspace(tmp_path / "s", embedder=DeterministicEmbedder(dim=32), snapshots=False, read_only=True)
    expected = retrieve_candidates(truth.view(G), "tea in Paris", qvec, k=8, params=pooled)
    assert [c.record for c in hits] == [c.record for c in expected]
    np.testing.assert_allclose([c.score for c in hits], [c.score for c in expected], atol=2e-3)
    truth.close()
    # the first write to the loaded scope: its rows and the sketch's codes are extended in place, in the
    # files' spare rows (copy-on-write: the files do not change)
    files_before = {p.name: p.read_bytes() for p in (tmp_path / "s" / "vecmem_snapshots").rglob("*.npy")}
    writer = _embedded(tmp_path / "s")
    loaded_rows = writer.view(G)._cols.rows
    writer.put(_records(3, start=80))
    grown = writer.view(G)
    rows = grown._cols.rows
    assert rows is loaded_rows and rows.private_from == 80 and isinstance(rows.vectors, np.memmap)
    assert grown.encoded and len(grown) == 83 and rows.sketch.size == 83 and rows.sketch.private_from == 80
    assert isinstance(rows.sketch.half, np.memmap)  # the half rows too
    np.testing.assert_allclose(from_bfloat16(rows.sketch.half[:83]), grown.vectors, rtol=2.0 ** -8)
    assert grown.records[-1].summary == _records(1, start=82)[0].summary
    np.testing.assert_allclose(grown.vectors[80:], writer.embedder.embed_documents(
        [r.search_text() for r in _records(3, start=80)]), atol=1e-6)
    assert {p.name: p.read_bytes() for p in (tmp_path / "s" / "vecmem_snapshots").rglob("*.npy")
            if p.name in files_before} == files_before
    writer.close()
    again = _embedded(tmp_path / "s", read_only=True)
    assert again.view(G).ids == grown.ids and _state(again) == _truth(tmp_path / "s")
    again.close()


def test_records_are_read_not_mapped_and_a_snapshot_without_half_rows_scores_the_full_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A loaded snapshot's records are read from its ``.rows`` file where a query needs them (``pread``: the
    file is not mapped into the process); a file written before the sketch carried half-width rows still
    loads, and its pool scores the full rows, exactly as a read from Chroma."""
    pooled = RetrievalParams(pool_min_records=1, pool_size=30)
    monkeypatch.setattr(chroma_module, "warm_view", lambda view: warm_view(view, pooled))
    ws = _embedded(tmp_path / "s")
    ws.put(_records(80))
    ws.close()
    fresh = _embedded(tmp_path / "s", read_only=True)
    view = fresh.view(G)
    assert isinstance(view._cols.records._buffer, snapshots._FileBytes)
    rows_file = next((tmp_path / "s" / "vecmem_snapshots").rglob("*.rows"))
    if Path("/proc/self/maps").exists():
        assert rows_file.name not in Path("/proc/self/maps").read_text()
    assert [r.summary for r in view.records] == [r.summary for r in _records(80)]
    fresh.close()
    snap = next((tmp_path / "s" / "vecmem_snapshots").rglob("*.snap"))
    blob = snap.read_bytes()
    state = pickle.loads(blob[len(snapshots._MAGIC) + 32:])
    state["sketch"] = state["sketch"][:3]  # (basis, sample, codes file): as written before the half rows
    payload = pickle.dumps(state)
    snap.write_bytes(snapshots._MAGIC + hashlib.sha256(payload).digest() + payload)
    old = _embedded(tmp_path / "s", read_only=True)
    view = old.view(G)
    assert old.info()["snapshots"]["loaded"] == 1 and view._cols.rows.sketch.half is None
    qvec = old.embed_query("tea in Paris")
    truth = ChromaWorkspace(tmp_path / "s", embedder=DeterministicEmbedder(dim=32), snapshots=False, read_only=True)
    expected = retrieve_candidates(truth.view(G), "tea in Paris", qvec, k=8, params=pooled)
    hits = retrieve_candidates(view, "tea in Paris", qvec, k=8, params=pooled)
    assert [(c.record, round(c.score, 5)) for c in hits] == [(c.record, round(c.score, 5)) for c in expected]
    truth.close()
    old.close()


def test_a_scope_read_from_chroma_is_served_from_the_snapshot_it_wrote(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The first process to read a big scope reads it from Chroma, saves its snapshot, and from then on holds it
    as a later process would: records encoded, rows mapped (the decoded read freed, and the C heap's free pages
    returned to the OS)."""
    trims: list[None] = []
    monkeypatch.setattr(chroma_module, "release_freed_memory", lambda: trims.append(None))
    ws = _embedded(tmp_path / "s")
    ws.put(_records(40))
    view = ws.view(G)
    assert ws.info()["snapshots"]["saved"] == 1 and ws.info()["snapshots"]["loaded"] == 1 and len(trims) == 1
    assert view.encoded and isinstance(view._cols.rows.vectors, np.memmap) and view.vector_bytes == 0
    ws.put(_records(2, start=40))
    assert ws.view(G)._cols.rows.private_from == 40  # its writes go into the file's spare rows
    got = _state(ws)
    ws.close()
    assert got == _truth(tmp_path / "s")


def test_loading_a_big_snapshot_returns_its_bytes_to_the_os(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A snapshot file past ``_TRIM_AFTER`` is followed, once loaded, by a collection and a trim of the C heap
    (the file's bytes and the unpickling's garbage); what was loaded is unharmed."""
    ws = _embedded(tmp_path / "s")
    ws.put(_records(40))
    ws.view(G)
    ws.close()
    trims: list[None] = []
    monkeypatch.setattr(snapshots, "release_freed_memory", lambda: trims.append(None))
    monkeypatch.setattr(snapshots, "_TRIM_AFTER", 1 << 40)
    small = _embedded(tmp_path / "s", read_only=True)
    small.view(G)
    assert small.info()["snapshots"]["loaded"] == 1 and trims == []
    small.close()
    monkeypatch.setattr(snapshots, "_TRIM_AFTER", 1)
    reader = _embedded(tmp_path / "s", read_only=True)
    reader.view(G)
    assert reader.info()["snapshots"]["loaded"] == 1 and len(trims) == 1
    assert _state(reader) == _truth(tmp_path / "s")
    reader.close()


def test_a_big_read_without_a_snapshot_returns_its_garbage_to_the_os(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A scope read from Chroma in more than one chunk and kept without a snapshot (too small for one, or
    snapshots off) is followed by a trim of the C heap; a read of one chunk is not."""
    ws = _embedded(tmp_path / "s", snapshots=False)
    ws.put(_records(12))
    ws.close()
    trims: list[None] = []
    monkeypatch.setattr(chroma_module, "release_freed_memory", lambda: trims.append(None))
    one_chunk = _embedded(tmp_path / "s", snapshots=False)
    assert len(one_chunk.view(G)) == 12 and trims == []
    one_chunk.close()
    monkeypatch.setattr(chroma_module, "MAX_BATCH", 5)
    chunked = _embedded(tmp_path / "s", snapshots=False)
    assert len(chunked.view(G)) == 12 and len(trims) == 1
    assert _state(chunked) == _truth(tmp_path / "s")
    chunked.close()


def test_release_freed_memory_collects_reference_cycles() -> None:
    """What a big read leaves in reference cycles is freed before the heap is trimmed, not at the cyclic GC's
    next full pass."""

    class Node:
        pass

    was = gc.isenabled()
    gc.disable()
    try:
        node = Node()
        node.me = node  # type: ignore[attr-defined]
        ref = weakref.ref(node)
        del node
        assert ref() is not None
        snapshots.release_freed_memory()
        assert ref() is None
    finally:
        if was:
            gc.enable()


def test_vector_files_without_spare_rows_still_load_and_take_writes(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Files written before vector files had spare rows (or by a process that sets none) load as before; the
    first write to the loaded scope copies its rows, and the answers are Chroma's."""
    monkeypatch.setattr(snapshots, "MIN_SPARE_ROWS", 0)
    monkeypatch.setattr(snapshots, "SPARE_DIVISOR", 0)
    ws = _embedded(tmp_path / "s")
    ws.put(_records(40))
    ws.view(G)
    ws.close()
    assert all(np.load(p, mmap_mode="r").shape[0] == 40 for p in (tmp_path / "s" / "vecmem_snapshots").rglob("*.npy"))
    writer = _embedded(tmp_path / "s")
    assert writer.view(G)._cols.rows.private_from is None and writer.info()["snapshots"]["loaded"] == 1
    writer.put(_records(2, start=40))
    assert not isinstance(writer.view(G)._cols.rows.vectors, np.memmap)  # copied
    assert _state(writer) == _truth(tmp_path / "s")
    writer.close()


def test_a_refused_copy_on_write_mapping_falls_back_to_read_only(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the OS refuses writable private mappings of the files (strict overcommit accounting), a load maps
    them read-only: the same answers, and the first write copies the rows."""
    ws = _embedded(tmp_path / "s")
    ws.put(_records(40))
    ws.close()
    real = np.load

    def no_private_mappings(file: Any, mmap_mode: str | None = None, **kw: Any) -> Any:
        if mmap_mode == "c":
            raise OSError(12, "Cannot allocate memory")
        return real(file, mmap_mode=mmap_mode, **kw)

    monkeypatch.setattr(np, "load", no_private_mappings)
    writer = _embedded(tmp_path / "s")
    view = writer.view(G)
    assert writer.info()["snapshots"] == {**writer.info()["snapshots"], "loaded": 1, "rejected": 0}
    assert view._cols.rows.private_from is None and not view._cols.rows.vectors.flags.writeable
    writer.put(_records(2, start=40))
    got = _state(writer)
    writer.close()
    assert got == _truth(tmp_path / "s")


def test_a_loaded_snapshot_is_saved_again_only_when_the_scope_changed(tmp_path: Path) -> None:
    ws = _embedded(tmp_path / "s")
    ws.put(_records(40))
    ws.view(G)
    ws.close()
    files = SnapshotFiles(tmp_path / "s" / "vecmem_snapshots", {}).directory

    def written() -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in files.rglob("*") if p.is_file()}

    first = written()
    worker = _embedded(tmp_path / "s")  # a writable worker that only reads: its exit rewrites nothing
    _state(worker)
    assert worker.info()["snapshots"]["loaded"] == 1
    worker.close()
    assert written() == first
    writer = _embedded(tmp_path / "s")
    _state(writer)
    writer.put(_records(2, start=40))
    writer.close()
    assert written() != first, "the changed scope was saved at close"
    fresh = _embedded(tmp_path / "s", read_only=True)
    got = _state(fresh)
    assert fresh.info()["snapshots"]["loaded"] == 1
    fresh.close()
    assert len(got[0]) == 42 and got == _truth(tmp_path / "s")


def test_embedded_snapshot_of_a_store_changed_since_is_not_used(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    ws = _embedded(tmp_path / "s")
    ws.put(_records(40))
    ws.view(G)
    ws.close()
    other = _embedded(tmp_path / "s", snapshots=False)  # a process that keeps no snapshots writes
    victim = other.scan(scope=G)[3]
    other.put(_records(3, start=100))
    other.update(victim.id, summary="changed after the snapshot")
    other.delete(other.scan(scope=G)[5].id)
    other.close()
    fresh = _embedded(tmp_path / "s", read_only=True)
    reads = _spy_scope_reads(fresh, monkeypatch)
    got = _state(fresh)
    fresh.close()
    assert reads == [42], "the stale snapshot was refused: the scope was read from Chroma"
    assert got == _truth(tmp_path / "s")
    assert "changed after the snapshot" in [r["summary"] for r in got[0]]


@pytest.mark.parametrize("damage", ["truncate", "flip", "foreign", "garbage", "vectors", "rows"])
def test_a_damaged_snapshot_is_rebuilt_with_a_warning(tmp_path: Path, damage: str,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    ws = _embedded(tmp_path / "s")
    ws.put(_records(30))
    ws.view(G)
    ws.close()
    snap = next((tmp_path / "s" / "vecmem_snapshots").rglob("*.snap"))
    blob = snap.read_bytes()
    if damage == "truncate":
        snap.write_bytes(blob[: len(blob) // 2])
    elif damage == "flip":
        snap.write_bytes(blob[:-10] + bytes([blob[-10] ^ 0xFF]) + blob[-9:])
    elif damage == "foreign":
        snap.write_bytes(b"VECMEMSNAP9\n" + blob[12:])
    elif damage == "garbage":
        snap.write_bytes(os.urandom(200))
    elif damage == "vectors":
        vec = next(snap.parent.glob("*.npy"))
        np.save(vec, np.zeros((3, 32), dtype=np.float32))
    else:  # one byte of a record in the memory-mapped records file
        rows = next(snap.parent.glob("*.rows"))
        data = bytearray(rows.read_bytes())
        data[len(data) // 3] ^= 0x01
        rows.write_bytes(bytes(data))
    fresh = _embedded(tmp_path / "s")
    with caplog.at_level(logging.WARNING):
        got = _state(fresh)
    assert any("unusable" in r.getMessage() for r in caplog.records)
    assert fresh.info()["snapshots"]["rejected"] == 1 and fresh.info()["snapshots"]["saved"] == 1  # rewritten
    fresh.close()
    assert got == _truth(tmp_path / "s")
    again = _embedded(tmp_path / "s", read_only=True)
    assert _state(again) == got and again.info()["snapshots"]["loaded"] == 1
    again.close()


def test_a_snapshot_that_cannot_be_written_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    def disk_full(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(snapshots, "_save_with_spare_rows", disk_full)
    ws = _embedded(tmp_path / "s")
    ws.put(_records(30))
    with caplog.at_level(logging.WARNING):
        got = _state(ws)
    assert ws.info()["snapshots"]["save_failures"] == 1
    assert sum("could not write a scope snapshot" in r.getMessage() for r in caplog.records) == 1
    assert not [p for p in (tmp_path / "s" / "vecmem_snapshots").rglob("*") if p.is_file()]  # no leftovers
    ws.close()
    assert got == _truth(tmp_path / "s")


def test_two_writers_of_one_snapshot_never_tear_a_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Saves race each other while loads run: a load returns a whole snapshot (of one save or the other), never
    a mix, and the vector files of replaced snapshots do not pile up."""
    files = SnapshotFiles(tmp_path / "snaps", {"collection": "c", "model": "m", "dim": 4})
    key = ("memory", "GLOBAL_MEMORY", None, False, "default")
    recs = {w: tuple(MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f"{w} {i}") for i in range(50))
            for w in ("a", "b")}
    errors: list[str] = []

    def save(who: str) -> None:
        vecs = np.full((50, 4), 1.0 if who == "a" else 2.0, dtype=np.float32)
        for _ in range(15):
            assert files.save(key, recs[who], [r.summary for r in recs[who]], vecs, {}, {"kind": "seq", "w": who})

    done = threading.Event()

    def load() -> None:
        while not done.is_set():
            got = files.load(key)
            if got is None:
                continue
            who = got.token["w"]
            if tuple(got.records) != recs[who] or float(got.vectors[0, 0]) != (1.0 if who == "a" else 2.0):
                errors.append(f"torn read: token {who}, first record {got.records[0].summary}")

    savers = [threading.Thread(target=save, args=(w,)) for w in ("a", "b")]
    loader = threading.Thread(target=load)
    for t in [loader, *savers]:
        t.start()
    for t in savers:
        t.join()
    done.set()
    loader.join()
    assert errors == [] and files.stats["loaded"] > 0 and files.stats["rejected"] == 0
    assert len(list((tmp_path / "snaps").glob("*.npy"))) == 30  # replaced vector files wait out their grace
    assert len(list((tmp_path / "snaps").glob("*.rows"))) == 30  # and so do their records files
    monkeypatch.setattr(snapshots, "VECTOR_GRACE_SECONDS", 0.0)
    save("b")
    assert len(list((tmp_path / "snaps").glob("*.npy"))) == 1 and files.load(key).token["w"] == "b"  # type: ignore[union-attr]
    assert len(list((tmp_path / "snaps").glob("*.rows"))) == 1


def test_erasure_removes_the_snapshot_files(tmp_path: Path) -> None:
    ws = _embedded(tmp_path / "s")
    ws.put(_records(30, session="secret-session"))
    ws.view(G)
    assert list((tmp_path / "s" / "vecmem_snapshots").rglob("*.snap"))
    assert ws.forget(everything=True).erased == 30
    assert not [p for p in (tmp_path / "s" / "vecmem_snapshots").rglob("*") if p.is_file()]
    assert ws.view(G).records == ()
    ws.close()


def test_server_snapshot_catches_up_with_other_workers_writes(chroma_server: tuple[str, int], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    host, port = chroma_server
    name = f"snap-{uuid.uuid4().hex[:10]}"
    server = {"host": host, "port": port, "collection": name}

    def worker(**kw: Any) -> ChromaWorkspace:
        return ChromaWorkspace(embedder=DeterministicEmbedder(dim=32), **{
            "snapshots": tmp_path / "snaps", "snapshot_min_records": MIN, **server, **kw})

    a = worker()
    a.put(_records(50))
    a.view(G)  # written to the snapshot at this change-log position
    b = worker(snapshots=False)
    added = b.put(_records(4, start=200))
    old = b.scan(scope=G)
    b.update(old[2].id, summary="updated by another worker")
    b.delete(old[7].id)  # soft: leaves the scope
    b.delete(old[9].id, hard=True)
    fresh = worker()
    reads = _spy_scope_reads(fresh, monkeypatch)
    got = _state(fresh)
    assert reads == [], "loaded from the snapshot and caught up by id, not read whole"
    assert got == _truth(**server)
    ids = [r["id"] for r in got[0]]
    assert {r.id for r in added} <= set(ids) and old[7].id not in ids and old[9].id not in ids
    # The catch-up was saved: the next worker starts from it.
    nxt = worker()
    assert _state(nxt) == got and nxt.info()["snapshots"]["loaded"] == 1
    # A bulk write (more ids than a change entry names) cannot be caught up by id: read whole.
    b.put(_records(1100, start=1000))
    last = worker()
    reads = _spy_scope_reads(last, monkeypatch)
    assert _state(last) == _truth(**server) and reads == [54 - 2 + 1100]
    for ws in (a, b, fresh, nxt, last):
        ws.close()


def test_a_bulk_writer_that_never_read_the_scope_snapshots_it_at_close(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """An import writes a big scope without reading it: close() snapshots it, so the first reader after the
    import starts from the snapshot; a small scope written alongside is not snapshotted."""
    ws = _embedded(tmp_path / "s")
    ws.put(_records(45))
    ws.put(MemoryRecord(memory_scope="SESSION_MEMORY", session_id="small", summary="one"))
    ws.close()
    assert len(list((tmp_path / "s" / "vecmem_snapshots").rglob("*.snap"))) == 1
    fresh = _embedded(tmp_path / "s", read_only=True)
    reads = _spy_scope_reads(fresh, monkeypatch)
    got = _state(fresh)
    assert reads == [] and len(got[0]) == 45
    fresh.close()
    assert got == _truth(tmp_path / "s")


def test_a_process_that_exits_without_close_saves_its_snapshots_at_exit(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_snapshots import _embedded, _records
ws = _embedded({str(tmp_path / "s")!r})
ws.put(_records(45))
"""  # no close(): the interpreter's exit saves
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    assert len(list((tmp_path / "s" / "vecmem_snapshots").rglob("*.snap"))) == 1
    fresh = _embedded(tmp_path / "s", read_only=True)
    assert len(fresh.view(G)) == 45 and fresh.info()["snapshots"]["loaded"] == 1
    fresh.close()

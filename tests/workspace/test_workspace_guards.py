"""Workspace guards: embedder mismatch, the single-writer lock, bad input writes nothing, mandatory
scopes, and Chroma's default embedding function is never used."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from _fakes import embedder_of

from agently_vecmem.errors import (
    EmbedderMismatchError,
    RecordValidationError,
    ScopeError,
    WorkspaceError,
    WorkspaceLockedError,
)
from agently_vecmem.filters import ALL_SCOPES, Scope
from agently_vecmem.records import MAX_TAGS, MemoryRecord
from agently_vecmem.testing import DeterministicEmbedder
from agently_vecmem.workspace import ChromaWorkspace

G = Scope.global_memory()
D = DeterministicEmbedder().dim  # the dimension of conftest's ``ws``
ROOT = Path(__file__).resolve().parents[2]


def good(summary: str = "User likes tea", **kw: object) -> MemoryRecord:
    return MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=summary, **kw)


# ----------------------------------------------------------------------------- embedder mismatch
@pytest.mark.parametrize("other", [embedder_of("other-model"), DeterministicEmbedder(16)], ids=["model", "dim"])
def test_embedder_mismatch(tmp_path: Path, other: DeterministicEmbedder) -> None:
    own = DeterministicEmbedder()
    with ChromaWorkspace(tmp_path / "s", embedder=own) as w:
        w.put(good())
    with pytest.raises(EmbedderMismatchError) as e:
        ChromaWorkspace(tmp_path / "s", embedder=other)
    msg = str(e.value)
    assert own.model_id in msg and other.model_id in msg and f"dim {own.dim}" in msg and f"dim {other.dim}" in msg
    assert "reembed" in msg
    # the failed open released its lock: the right embedder opens again and the data is intact
    with ChromaWorkspace(tmp_path / "s", embedder=own) as w:
        assert w.count() == 1


def test_foreign_collection_is_refused(tmp_path: Path) -> None:
    import chromadb

    chromadb.PersistentClient(path=str(tmp_path / "s")).create_collection("foreign", embedding_function=None)
    with pytest.raises(EmbedderMismatchError, match="not created by agently-vecmem"):
        ChromaWorkspace(tmp_path / "s", embedder=DeterministicEmbedder(), collection="foreign")


# ----------------------------------------------------------------------------- single writer
_HOLDER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    from agently_vecmem.records import MemoryRecord
    from agently_vecmem.testing import DeterministicEmbedder
    from agently_vecmem.workspace import ChromaWorkspace
    ws = ChromaWorkspace({path!r}, embedder=DeterministicEmbedder())
    ws.put(MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="written by the holder"))
    print("ready", flush=True)
    sys.stdin.readline()
    """
)


def test_second_writer_process_is_locked_out(tmp_path: Path) -> None:
    path = tmp_path / "store"
    code = _HOLDER.format(root=str(ROOT), path=str(path))
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "ready", "holder process failed to start"
        with pytest.raises(WorkspaceLockedError) as e:
            ChromaWorkspace(path, embedder=DeterministicEmbedder())
        assert "server" in str(e.value) and "read_only" in str(e.value)
        with ChromaWorkspace(path, embedder=DeterministicEmbedder(), read_only=True) as reader:
            assert [r.summary for r in reader.scan(scope=G)] == ["written by the holder"]
            with pytest.raises(WorkspaceError, match="read_only"):
                reader.put(good())
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with ChromaWorkspace(path, embedder=DeterministicEmbedder()) as w:  # the exit released the lock
        w.put(good("after the holder"))
        assert w.count() == 2


def test_lock_is_shared_within_a_process(tmp_path: Path) -> None:
    a = ChromaWorkspace(tmp_path / "s", embedder=DeterministicEmbedder())
    b = ChromaWorkspace(tmp_path / "s", embedder=DeterministicEmbedder())
    a.put(good())
    a.close()
    b.put(good("still writable"))
    assert b.count() == 2
    b.close()


def test_closed_workspace_refuses_use(ws: ChromaWorkspace) -> None:
    ws.close()
    with pytest.raises(WorkspaceError, match="closed"):
        ws.put(good())
    with pytest.raises(WorkspaceError, match="closed"):
        ws.search("tea", scope=G)


# ----------------------------------------------------------------------------- bad input writes nothing
def _assert_nothing_written(ws: ChromaWorkspace, before: int = 1) -> None:
    assert ws.count() == before
    ws.put(good("the collection is still usable"))
    assert ws.count() == before + 1
    assert ws.search("usable", scope=G, k=1)[0].record.summary == "the collection is still usable"


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"tags": [f"t{i}" for i in range(MAX_TAGS + 1)]}, "tags"),
        ({"tags": [f"t{i}" for i in range(6_000)]}, "tags"),  # would brick a Chroma collection
        ({"tags": ["ok", 7]}, "tags"),
        ({"tags": [None]}, "tags"),
        ({"importance": math.nan}, "importance"),
        ({"importance": math.inf}, "importance"),
        ({"importance": None}, "importance"),
        ({"body": {"x": math.nan}}, "body"),
        ({"body": {"deep": [{"x": -math.inf}]}}, "body"),
        ({"body": {"blob": "x" * (20 * 2**20)}}, "body"),
        ({"summary": None}, "summary"),
        ({"provenance": {"score": math.nan}}, "provenance"),
        ({"memory_scope": "SESSION_MEMORY"}, "session_id"),
    ],
)
def test_invalid_record_writes_nothing(ws: ChromaWorkspace, bad: dict, field: str) -> None:
    ws.put(good("existing"))
    data = {"memory_scope": "GLOBAL_MEMORY", "summary": "bad one", **bad}
    with pytest.raises(RecordValidationError) as e:
        ws.put([good("valid neighbour"), data])
    assert field in str(e.value) and "records[1]" in str(e.value)
    _assert_nothing_written(ws)


def test_mutated_record_is_validated_again(ws: ChromaWorkspace) -> None:
    ws.put(good("existing"))
    r = good("mutated after validation", body={"x": 1})
    r.body["x"] = math.nan
    with pytest.raises(RecordValidationError, match="body"):
        ws.put(r)
    r2 = good("tags mutated", tags=["a"])
    r2.tags.append(5)  # type: ignore[arg-type]
    with pytest.raises(RecordValidationError, match="tags"):
        ws.put(r2)
    _assert_nothing_written(ws)


@pytest.mark.parametrize(
    "vectors, match",
    [
        (np.full((2, D), np.nan), "NaN"),
        (np.vstack([np.ones(D), np.full(D, np.inf)]), "row 1"),
        (np.ones((2, 16)), "expected shape"),
        (np.ones((3, D)), "expected shape"),
        (np.zeros((2, D)), "zeros"),
        ([[1.0] * D, [1.0] * (D - 1)], "vectors"),
        ([["a"] * D] * 2, "vectors"),
    ],
)
def test_bad_vectors_write_nothing(ws: ChromaWorkspace, vectors: object, match: str) -> None:
    ws.put(good("existing"))
    with pytest.raises(RecordValidationError, match=match):
        ws.put([good("a"), good("b")], vectors=vectors)
    _assert_nothing_written(ws)


def test_bad_query_vector(ws: ChromaWorkspace) -> None:
    ws.put(good())
    with pytest.raises(RecordValidationError):
        ws.search(np.full(D, np.nan), scope=G)
    with pytest.raises(RecordValidationError):
        ws.search(np.ones(8), scope=G)


def test_duplicate_ids_in_one_put(ws: ChromaWorkspace) -> None:
    r = good()
    with pytest.raises(RecordValidationError, match="duplicate"):
        ws.put([r, r])
    assert ws.count() == 0


def test_delete_with_repeated_ids(ws: ChromaWorkspace) -> None:
    a, b = ws.put([good("a"), good("b")])
    assert ws.delete([a.id, a.id, "missing", a.id]) == 1
    assert ws.delete([b.id, b.id], hard=True) == 1
    assert [r.id for r in ws.scan(scope=ALL_SCOPES)] == [a.id]


def test_update_guards(ws: ChromaWorkspace) -> None:
    [r] = ws.put(good())
    with pytest.raises(RecordValidationError, match="id"):
        ws.update(r.id, id="other")
    with pytest.raises(RecordValidationError, match="importance"):
        ws.update(r.id, importance=math.nan)
    with pytest.raises(RecordValidationError, match="nope"):
        ws.update(r.id, nope=1)
    assert ws.get(r.id) == r


def test_import_rejects_bad_lines(ws: ChromaWorkspace, tmp_path: Path) -> None:
    ws.put([good("a"), good("b")])
    path = tmp_path / "d.jsonl"
    ws.export_jsonl(path)
    lines = path.read_text().splitlines()
    lines[2] = lines[2].replace('"vector": [', '"vector": [NaN, ')
    path.write_text("\n".join(lines) + "\n")
    target = ChromaWorkspace(tmp_path / "t", embedder=DeterministicEmbedder())
    with pytest.raises(RecordValidationError, match="line 3"):
        target.import_jsonl(path)
    path.write_text("not json\n")
    with pytest.raises(RecordValidationError, match="line 1"):
        target.import_jsonl(path)
    assert target.count() == 0
    target.close()


# ----------------------------------------------------------------------------- scopes are mandatory
@pytest.mark.parametrize("name", ["GLOBAL", "global_memory", "SESSION", "", "LOCAL_MEMORY"])
def test_unknown_scope_names(name: str) -> None:
    with pytest.raises(ScopeError):
        Scope.of(name, "s1")


@pytest.mark.parametrize("scope", [None, "GLOBAL_MEMORY", {"memory_scope": "GLOBAL_MEMORY"}])
def test_reads_require_a_scope_object(ws: ChromaWorkspace, scope: object) -> None:
    ws.put(good())
    for call in (
        lambda: ws.scan(scope=scope),  # type: ignore[arg-type]
        lambda: ws.search("tea", scope=scope),  # type: ignore[arg-type]
        lambda: ws.count(scope=scope),  # type: ignore[arg-type]
        lambda: ws.view(scope),  # type: ignore[arg-type]
    ):
        with pytest.raises(ScopeError, match="scope is required"):
            call()


def test_reads_without_scope_argument_fail(ws: ChromaWorkspace) -> None:
    with pytest.raises(TypeError):
        ws.scan()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        ws.search("tea")  # type: ignore[call-arg]


def test_where_cannot_widen_scope(ws: ChromaWorkspace) -> None:
    ws.put([good(), MemoryRecord(memory_scope="SESSION_MEMORY", session_id="s2", summary="secret")])
    with pytest.raises(ScopeError):
        ws.scan(scope=Scope.session_memory("s1"), where={"session_id": "s2"})
    with pytest.raises(ScopeError):
        ws.search("secret", scope=G, where={"memory_scope": {"$in": ["SESSION_MEMORY"]}})


def test_bad_k(ws: ChromaWorkspace) -> None:
    for k in (0, -1, 1.5, True):
        with pytest.raises(ValueError):
            ws.search("tea", scope=G, k=k)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- no default embedding fn
def test_chroma_default_embedding_function_is_never_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chromadb.utils import embedding_functions as ef
    from chromadb.utils.embedding_functions.onnx_mini_lm_l6_v2 import ONNXMiniLM_L6_V2

    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("Chroma's default embedding function was called")

    monkeypatch.setattr(ONNXMiniLM_L6_V2, "__call__", boom)
    monkeypatch.setattr(ONNXMiniLM_L6_V2, "__init__", boom)
    monkeypatch.setattr(ef.DefaultEmbeddingFunction, "__call__", boom)
    with ChromaWorkspace(tmp_path / "s", embedder=DeterministicEmbedder()) as w:
        [r] = w.put(good())
        w.update(r.id, summary="User likes coffee")
        assert w.search("coffee", scope=G, k=1)[0].record.id == r.id
        assert w.search("coffee", scope=G, k=1, where={"importance": {"$gte": 0.1}})[0].record.id == r.id
        assert [x.id for x in w.scan(scope=ALL_SCOPES)] == [r.id]
        w.delete(r.id)
        w.export_jsonl(tmp_path / "x.jsonl")
    with ChromaWorkspace(tmp_path / "s", embedder=DeterministicEmbedder(), exact_index=False) as w:
        assert w.search("coffee", scope=Scope.global_memory(include_inactive=True), k=1)[0].record.id == r.id

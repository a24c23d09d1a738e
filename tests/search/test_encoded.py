"""Columns kept encoded until read (:mod:`agently_vecmem.search.encoded`): an :class:`EncodedList` behaves as
the list it stands for (reads, slices, replacements, appends, picks) without decoding what is not read, and a
scope view over encoded columns answers, appends, updates and removes exactly as one over lists."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from agently_vecmem.filters import Scope
from agently_vecmem.records import MemoryRecord
from agently_vecmem.search.candidates import retrieve_candidates
from agently_vecmem.search.encoded import EncodedList, encoded_items, mapping_with_room
from agently_vecmem.search.params import RetrievalParams
from agently_vecmem.search.view import ScopeView
from agently_vecmem.workspace import snapshots

T = TypeVar("T")


def _column(items: Sequence[T], encode: Callable[[T], bytes], decode: Callable[[bytes], T]) -> EncodedList[T]:
    """``items`` encoded one after another in one buffer, as a snapshot's ``.rows`` file holds them."""
    data = [encode(x) for x in items]
    lengths = np.array([len(d) for d in data], dtype=np.int64)
    ends = np.cumsum(lengths)
    return EncodedList(b"".join(data), ends - lengths, ends, decode)


def _encoded(words: list[str]) -> tuple[EncodedList[str], list[bytes]]:
    """``words`` encoded; the list also records every item it decodes."""
    decoded: list[bytes] = []

    def decode(raw: bytes) -> str:
        decoded.append(raw)
        return raw.decode()

    return _column(words, str.encode, decode), decoded


WORDS = ["zero", "one", "two", "three", "four", "five", "six"]


def test_reads_decode_only_the_item_read() -> None:
    items, decoded = _encoded(WORDS)
    assert len(items) == 7 and items[2] == "two" and items[-1] == "six"
    assert decoded == [b"two", b"six"]
    with pytest.raises(IndexError, match="out of range"):
        items[7]
    with pytest.raises(IndexError):
        items[-8]
    assert list(items) == WORDS


def test_replacements_and_appends_are_kept_beside_the_buffer() -> None:
    items, decoded = _encoded(WORDS)
    items[1] = "ONE"
    items[-2] = "FIVE"
    items.extend(["seven", "eight"])
    items.append("nine")
    items[8] = "EIGHT"
    expected = ["zero", "ONE", "two", "three", "four", "FIVE", "six", "seven", "EIGHT", "nine"]
    assert list(items) == expected and len(items) == 10
    assert [items.raw(i) for i in (0, 1, 6, 7)] == [b"zero", None, b"six", None]  # stored bytes, or None
    decoded.clear()
    assert list(encoded_items(items, str.encode)) == [w.encode() for w in expected]
    assert decoded == [], "stored items are copied as they are, replaced and appended ones encoded"
    assert list(encoded_items(expected, str.encode)) == [w.encode() for w in expected]  # a plain list too


def test_raw_items_reads_stored_runs_in_blocks_and_picked_items_one_by_one() -> None:
    items, decoded = _encoded(WORDS)
    items[2] = "TWO"
    items.append("seven")
    expected = [b"zero", b"one", None, b"three", b"four", b"five", b"six", None]
    for block in (1, 3, 4096):
        assert list(items.raw_items(block)) == expected
    picked = items.picked(np.array([0, 2, 5, 6, 7]))  # not one after another in the buffer
    assert list(picked.raw_items(2)) == [b"zero", None, b"five", b"six", None]
    assert decoded == []


def test_slices_and_picks_share_the_buffer() -> None:
    items, decoded = _encoded(WORDS)
    items[3] = "THREE"
    items.extend(["seven", "eight"])
    prefix = items[:5]
    assert isinstance(prefix, EncodedList) and list(prefix) == ["zero", "one", "two", "THREE", "four"]
    longer = items[:8]
    assert list(longer) == ["zero", "one", "two", "THREE", "four", "five", "six", "seven"]
    longer.append("x")  # a slice is a new list: the original is not changed
    assert len(items) == 9
    assert list(items[1:9:3]) == ["one", "four", "seven"]
    assert list(items[::-2]) == ["eight", "six", "four", "two", "zero"]
    decoded.clear()
    picked = items.picked(np.array([0, 3, 6, 8]))
    assert decoded == [], "picking decodes nothing"
    assert list(picked) == ["zero", "THREE", "six", "eight"]
    picked[0] = "Z"
    assert items[0] == "zero"
    assert list(items[:0]) == [] and list(items[:100]) == list(items)


def _records(n: int, start: int = 0) -> tuple[list[MemoryRecord], np.ndarray]:
    rng = np.random.default_rng(start)
    words = "dog cat tea coffee train plane river mountain guitar piano garden kitchen".split()
    records = [MemoryRecord(id=f"r{i:05d}", memory_scope="GLOBAL_MEMORY",
                            summary=" ".join(rng.choice(words, size=3, replace=False)),
                            created_at=1000.0 + i, updated_at=1000.0 + i,
                            provenance={"session_id": f"s{i // 10}", "position": i % 10})
               for i in range(start, start + n)]
    vectors = rng.normal(size=(n, 16)).astype(np.float32)
    return records, vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _both(n: int) -> tuple[ScopeView, ScopeView]:
    """The same scope as a view over lists and one over encoded columns (as a loaded snapshot holds them)."""
    records, vectors = _records(n)
    documents = [r.search_text() for r in records]
    plain = ScopeView(Scope.global_memory(), tuple(records), vectors, tuple(documents), 1)
    encoded = ScopeView(Scope.global_memory(), _column(records, snapshots._encode_record, snapshots._decode_record),
                        vectors, _column(documents, snapshots._encode_document, snapshots._decode_document), 1,
                        ids=[r.id for r in records])
    assert encoded.encoded and not plain.encoded
    return plain, encoded


def _answers(view: ScopeView, params: RetrievalParams) -> list[tuple[str, float]]:
    out = []
    for text, row in (("dog river", 3), ("piano garden", 40), ("coffee train", 77)):
        qvec = view.vectors[row] if row < len(view) else view.vectors[0]
        out += [(c.record.id, round(c.score, 5)) for c in retrieve_candidates(view, text, qvec, k=8, params=params)]
    return out


def _state(view: ScopeView) -> tuple[object, ...]:
    return ([r.model_dump() for r in view.records], list(view.documents), view.ids, np.asarray(view.vectors).tolist())


@pytest.mark.parametrize("params", [RetrievalParams(pool_min_records=0), RetrievalParams(pool_min_records=1,
                                                                                         pool_size=40)])
def test_a_view_over_encoded_columns_behaves_as_one_over_lists(params: RetrievalParams) -> None:
    plain, encoded = _both(120)
    assert _state(plain) == _state(encoded) and _answers(plain, params) == _answers(encoded, params)
    new, vecs = _records(15, start=120)
    docs = [r.search_text() for r in new]
    changed = plain.records[7].model_copy(update={"summary": "kitchen violin"})
    leaving = plain.records[9].model_copy(update={"memory_scope": "SESSION_MEMORY"})
    steps: list[Callable[[ScopeView], ScopeView | None]] = [
        lambda v: v.with_records(new, vecs, docs, version=2),  # appended in place
        lambda v: v.with_records([changed, leaving], vecs[:2], [changed.search_text(), leaving.search_text()],
                                 version=3),  # rewritten in place, one leaves the scope
        lambda v: v.without({"r00004", "r00125"}, version=4),
        lambda v: v.with_records(*_older(), version=5),  # sorts before the rest: rebuilt in order
    ]
    for step in steps:
        plain_next, encoded_next = step(plain), step(encoded)
        assert plain_next is not None and encoded_next is not None
        assert _state(plain_next) == _state(encoded_next)
        assert _answers(plain_next, params) == _answers(encoded_next, params)
        plain, encoded = plain_next, encoded_next
    records, documents = encoded.columns()
    assert [r.id for r in records] == encoded.ids and list(documents) == list(encoded.documents)


def _older() -> tuple[list[MemoryRecord], np.ndarray, list[str]]:
    records, vectors = _records(2, start=500)
    records = [r.model_copy(update={"created_at": 1.0, "updated_at": 1.0}) for r in records]
    return records, vectors, [r.search_text() for r in records]


def test_decoded_records_are_kept_once_read_and_counted_by_the_cache() -> None:
    from agently_vecmem.search.view import DECODED_RECORDS
    from agently_vecmem.workspace.view_cache import ViewCache, view_bytes

    plain, encoded = _both(60)
    assert plain.decoded_records() is plain.records
    cache = ViewCache(budget=1 << 30)
    cache.add(encoded.scope.key, encoded)
    before = cache.total
    assert DECODED_RECORDS not in encoded.derived
    records = encoded.decoded_records()
    assert isinstance(records, tuple) and list(records) == list(plain.records)
    assert encoded.decoded_records() is records  # decoded once
    assert cache.get(encoded.scope.key) is encoded  # re-counted on the next hit: as a decoded scope now
    assert cache.total == view_bytes(encoded) == view_bytes(plain) - plain.vector_bytes + encoded.vector_bytes > before
    new, vecs = _records(4, start=60)
    grown = encoded.with_records(new, vecs, [r.search_text() for r in new], version=2)
    assert grown is not None and list(grown.decoded_records()) == list(records) + new  # extended
    gone = grown.without({"r00003", "r00061"}, version=3)
    assert gone is not None and DECODED_RECORDS in gone.derived  # filtered, not decoded again
    assert [r.id for r in gone.decoded_records()] == gone.ids and len(gone.ids) == 62
    changed = gone.records[5].model_copy(update={"importance": 0.9})
    rewritten = gone.with_records([changed], gone.rows([5]), [gone.documents[5]], version=4)
    assert rewritten is not None and rewritten.decoded_records()[5].importance == 0.9  # rebuilt after a rewrite


def _mapped(path: Path, vectors: np.ndarray, monkeypatch: pytest.MonkeyPatch, spare: int) -> np.ndarray:
    """``vectors`` written as a snapshot's vector file with ``spare`` rows after them, mapped as a load maps it."""
    monkeypatch.setattr(snapshots, "MIN_SPARE_ROWS", spare)
    monkeypatch.setattr(snapshots, "SPARE_DIVISOR", 0)
    with open(path, "wb") as f:
        snapshots._save_with_spare_rows(f, vectors)
    full = np.load(path, mmap_mode="c")
    assert full.shape == (len(vectors) + spare, vectors.shape[1]) and not full[len(vectors):].any()
    return full[:len(vectors)]


@pytest.mark.parametrize("params", [RetrievalParams(pool_min_records=0), RetrievalParams(pool_min_records=1,
                                                                                         pool_size=40)])
def test_appends_to_mapped_rows_go_into_their_spare_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         params: RetrievalParams) -> None:
    """A loaded snapshot's rows (mapped copy-on-write, spare rows after them) take appends in place, without
    copying the scope's rows, until the spare rows are used up; the file never changes; the snapshot cache
    counts the appended rows; the answers are those of a view over lists all along."""
    records, vectors = _records(80)
    documents = [r.search_text() for r in records]
    plain = ScopeView(Scope.global_memory(), tuple(records), vectors, tuple(documents), 1)
    path = tmp_path / "rows.npy"
    mapped = ScopeView(Scope.global_memory(), tuple(records), _mapped(path, vectors, monkeypatch, spare=10),
                       tuple(documents), 1, in_place=True)
    on_disk = path.read_bytes()
    rows = mapped._cols.rows
    assert rows.private_from == 80 and isinstance(rows.vectors, np.memmap) and rows.vectors.shape[0] == 90
    assert mapped.vector_bytes == 0 and _answers(mapped, params) == _answers(plain, params)
    for step, (start, in_place) in enumerate(((80, True), (86, False))):  # 6 fit in the 10 spare rows, 12 do not
        new, vecs = _records(6, start=start)
        docs = [r.search_text() for r in new]
        plain = plain.with_records(new, vecs, docs, version=2 + step)  # type: ignore[assignment]
        mapped = mapped.with_records(new, vecs, docs, version=2 + step)  # type: ignore[assignment]
        assert mapped._cols.rows is rows
        if in_place:
            assert rows.private_from == 80 and isinstance(rows.vectors, np.memmap) and rows.vectors.shape[0] == 90
            assert mapped.vector_bytes == 6 * 16 * 4 + sketch_bytes(rows)  # the appended rows: this process's own
        else:  # copied once the spare rows ran out
            assert rows.private_from is None and not isinstance(rows.vectors, np.memmap)
            assert mapped.vector_bytes == 92 * 16 * 4 + sketch_bytes(rows)
        assert _state(mapped) == _state(plain) and _answers(mapped, params) == _answers(plain, params)
    assert path.read_bytes() == on_disk


def sketch_bytes(rows: Any) -> int:
    return 0 if rows.sketch is None else rows.sketch.nbytes  # (built in memory here: not from a snapshot)


def test_only_the_loaded_rows_own_their_spare_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records, vectors = _records(20)
    documents = tuple(r.search_text() for r in records)
    full_rows = _mapped(tmp_path / "rows.npy", vectors, monkeypatch, spare=8)
    loaded = ScopeView(Scope.global_memory(), tuple(records), full_rows, documents, 1, in_place=True)
    assert mapping_with_room(full_rows) is not None
    # another view made from the loaded one's rows (the workspace re-sorting a scope) copies on its first append
    other = ScopeView(Scope.global_memory(), tuple(records), loaded.vectors, documents, 1)
    assert other._cols.rows.private_from is None and other.vector_bytes == 0
    for not_room in (full_rows[1:], np.array(full_rows), np.load(tmp_path / "rows.npy", mmap_mode="r")[:20]):
        assert mapping_with_room(not_room) is None
    new, vecs = _records(2, start=20)
    after = other.with_records(new, vecs, [r.search_text() for r in new], version=2)
    assert after is not None and after._cols.rows is not loaded._cols.rows
    assert after.vector_bytes >= 22 * 16 * 4 and loaded.vectors.shape == (20, 16)
    assert not np.asarray(loaded._cols.rows.vectors[20:]).any()  # the loaded rows' spare rows untouched

"""Persisted scope snapshots: a fresh worker's first read of a big scope without reading it from Chroma.

Reading a 100k-record scope from Chroma costs ~20 s (per-row metadata reads and record decoding,
``benchmarks/RESULTS.md``, "Where the cold start goes"): every new worker, restart or deploy paid it before its
first answer. A process that has read a scope of at least ``min_records`` records writes it to a local file;
the next process on the machine loads that file (vectors memory-mapped, so every worker of the machine shares
them through the OS page cache) and catches up with what was written since, instead of reading the scope whole.
Chroma stays the store of record: a snapshot is only ever a faster way to the same answer.

Files, in one directory per Chroma collection (named by the collection's id, so a recreated collection or
another server never meets an old file)::

    <scope hash>.snap            header + sha256 + pickle: ids, derived structures, freshness token, the offsets
                                 of the records and documents in the ``.rows`` file and its sha256
    <scope hash>.<nonce>.rows    the records (as Chroma stores them: id and metadata) then the documents (UTF-8),
                                 read with ``pread`` when a record is (not mapped: the pages a process maps stay
                                 in its resident set; :class:`~agently_vecmem.search.encoded.EncodedList`
                                 decodes a record when it is read, not all at load)
    <scope hash>.<nonce>.npy     the primary vectors (``np.load(mmap_mode="c")``, spare rows after them)
    <scope hash>.<nonce>.<space>.npy   the vectors of each named space the scope has (:mod:`.vector_spaces`)
    <scope hash>.<nonce>.sketch.npy    the sketch codes of a scope large enough for the candidate pool
                                       (:mod:`agently_vecmem.search.sketch`), when it was built
    <scope hash>.<nonce>.sketch-half.npy  with the sketch: the primary vectors at half width (bfloat16 bits),
                                          what the pool's scoring reads (files written before it have none)

A snapshot is written to temporary files and published with ``os.replace`` (atomic: two processes saving the
same scope never leave a torn file; a reader sees the old or the new one). A file that is partial, corrupt, of
another format version, another collection, embedding model or dimension is ignored with a WARNING and the
scope is read from Chroma (and the snapshot rewritten). A file that cannot be written (disk full, read-only
directory) is logged and skipped: answers come from Chroma as before.

**Freshness.** Each snapshot carries the token of the state it holds:

* embedded stores (one writing process at a time, :mod:`.locking`): Chroma's write sequence number at the time
  the snapshot was current. The snapshot is used only while the store's sequence is unchanged (nothing was
  written since, by any process): the writing process saves its big scopes again when it closes (and at exit).
* servers: the change log (:mod:`.changelog`). The snapshot is used when the change head is the one it saw, or
  when every change since is still in the log (``RETENTION``): the records named since (commits and intents,
  from ``INTENT_TIMEOUT + LAG`` before the snapshot) are read again by id and applied, as a running worker
  applies other processes' writes. A bulk write or a log it cannot read means a whole read.

Snapshots hold record text: :meth:`SnapshotFiles.clear` runs with every erasure of this process, and a snapshot
that caught up with erased records is rewritten without them at once. The directory should be as private as
the store itself (it is created ``0o700``): a snapshot is unpickled on load.
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import logging
import mmap
import os
import pickle
import sys
import tempfile
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from .._paths import cache_root
from ..errors import WorkspaceError
from ..records import MemoryRecord
from ..search.encoded import EncodedList, encoded_items
from ..search.sketch import Sketch, to_bfloat16

__all__ = ["DEFAULT_MIN_RECORDS", "FORMAT", "Loaded", "SnapshotFiles", "default_snapshot_root", "release_freed_memory",
           "store_sequence"]

logger = logging.getLogger(__name__)

#: Scopes smaller than this are read from Chroma directly (a first read costs milliseconds through their
#: scope directory); larger ones are snapshotted.
DEFAULT_MIN_RECORDS = 2_000
#: Version of the file layout; a file of another version is ignored (and rewritten).
FORMAT = 4  # 2: named vector spaces; 3: the BM25 index in segments; 4: records memory-mapped, the sketch
_MAGIC = b"VECMEMSNAP1\n"
#: A replaced snapshot's vector file is removed once it is this old (seconds): a younger one may belong to a
#: snapshot another process is publishing.
VECTOR_GRACE_SECONDS = 600.0
#: Rows of room after the data of every vector file (a hole: zeros that take no disk where the file system has
#: sparse files): a process maps the files copy-on-write and appends its writes there, in place, instead of
#: first copying every row of a big scope into its own memory (``search.encoded.mapping_with_room``).
#: ``max(MIN_SPARE_ROWS, rows // SPARE_DIVISOR)``; 0 and 0: none (files as format 4 wrote them first).
MIN_SPARE_ROWS = 1_024
SPARE_DIVISOR = 8
#: A snapshot file this big is followed by :func:`release_freed_memory` once loaded (at 1M records the file is
#: ~185 MB, and unpickling it leaves more free in the C heap).
_TRIM_AFTER = 16 << 20
#: The half-precision rows' file suffix (a space's name has no ``-``).
_HALF = "sketch-half.npy"
#: Rows converted and written at a time (bounds the temporary memory of a save).
_WRITE_ROWS = 65_536
#: ``view.derived`` entries saved with a snapshot (what a first retrieval would otherwise rebuild): key names,
#: or the first item of tuple keys.
_DERIVED = ("bm25", "order_columns", "occurred_at", "neighbors", "session_groups")


def default_snapshot_root() -> Path:
    """Where snapshots of server stores go: ``$AGENTLY_VECMEM_SNAPSHOTS``, else
    ``$XDG_CACHE_HOME/agently-vecmem/snapshots`` (``~/.cache/...``)."""
    explicit = os.environ.get("AGENTLY_VECMEM_SNAPSHOTS", "").strip()
    if explicit:
        return Path(explicit)
    return cache_root() / "snapshots"


def store_sequence(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """An embedded store's write position: Chroma's sequence numbers (every write of any collection of the
    store advances them), read from its SQLite file without a lock. None when they cannot be read (another
    Chroma layout): then no snapshot of the store is trusted."""
    import sqlite3

    db = Path(path) / "chroma.sqlite3"
    try:
        con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=2.0)
        try:
            queued = con.execute("SELECT max(seq_id) FROM embeddings_queue").fetchone()[0]
            applied = con.execute("SELECT max(seq_id) FROM max_seq_id").fetchone()[0]
        finally:
            con.close()
    except Exception as e:  # noqa: BLE001 - unknown layout: no snapshot is trusted
        logger.debug("cannot read the write sequence of %s: %s", db, e)
        return None
    return {"kind": "seq", "queued": queued, "applied": applied}


@dataclass(frozen=True)
class Loaded:
    """A snapshot read back: rows in snapshot order, its derived structures and its freshness token."""

    #: decoded when read (:class:`~agently_vecmem.search.encoded.EncodedList` over the mapped ``.rows`` file)
    records: EncodedList[MemoryRecord]
    documents: EncodedList[str]
    ids: list[str]
    vectors: np.ndarray
    derived: dict[Any, Any]
    token: dict[str, Any]
    #: space name -> (model id, vectors) of the scope's named spaces
    spaces: dict[str, tuple[str, np.ndarray]]
    #: the primary space's sketch, when the saving process had built it
    sketch: Sketch | None = None


def _encode_record(record: MemoryRecord) -> bytes:
    """A record as Chroma stores it (id and flat metadata: :meth:`MemoryRecord.to_chroma`, lossless)."""
    return pickle.dumps((record.id, record.to_chroma()), protocol=pickle.HIGHEST_PROTOCOL)


def _decode_record(data: bytes) -> MemoryRecord:
    """The record :func:`_encode_record` wrote, as a read from Chroma makes it, not validated again: the
    file is this library's, checked by its digest (~2x cheaper: a query decodes its candidates)."""
    return MemoryRecord.from_trusted(*pickle.loads(data))  # noqa: S301 - our own file (see the module docstring)


def _encode_document(document: str) -> bytes:
    return document.encode("utf-8", "surrogatepass")


def _decode_document(data: bytes) -> str:
    return data.decode("utf-8", "surrogatepass")


def _offsets(lengths: list[int], at: int) -> np.ndarray:
    """``(n + 1,)`` int64 offsets of items of ``lengths`` written one after another from ``at``."""
    out = np.empty(len(lengths) + 1, dtype=np.int64)
    out[0] = at
    np.cumsum(lengths, out=out[1:])
    out[1:] += at
    return out


def _encoded(buffer: Any, offsets: np.ndarray, n: int, decode: Any) -> EncodedList[Any]:
    if offsets.shape != (n + 1,) or (n and (int(offsets[0]) < 0 or int(offsets[-1]) > len(buffer)
                                            or bool((np.diff(offsets) < 0).any()))):
        raise WorkspaceError(f"item offsets {offsets.shape} do not fit {n} records in {len(buffer)} bytes")
    return EncodedList(buffer, offsets[:-1], offsets[1:], decode)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Unpickling 100k records allocates millions of objects: with the cyclic GC running, it takes 3-4x longer
    (measured: 3.8 s against 0.9 s)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class SnapshotFiles:
    """The snapshot files of one collection (see the module docstring).

    Args:
        directory: this collection's directory (created on first save, mode ``0o700``).
        identity: what a file must match to be used: collection id, embedding model id and dimension.
        min_records: scopes smaller than this are never snapshotted.
    """

    def __init__(self, directory: str | os.PathLike[str], identity: Mapping[str, Any],
                 min_records: int = DEFAULT_MIN_RECORDS) -> None:
        self.directory = Path(directory)
        self.identity = dict(identity)
        self.min_records = int(min_records)
        self._warned: set[str] = set()
        #: loads / saves / rejected files / failed saves so far (``info()["snapshots"]``)
        self.stats = {"loaded": 0, "saved": 0, "rejected": 0, "save_failures": 0}

    def _name(self, scope_key: tuple[Any, ...]) -> str:
        return hashlib.sha256(repr(scope_key).encode()).hexdigest()[:32]

    def _warn(self, what: str, message: str, *args: Any) -> None:
        if what not in self._warned:
            self._warned.add(what)
            logger.warning(message, *args)
        else:
            logger.debug(message, *args)

    # ------------------------------------------------------------------ read
    def load(self, scope_key: tuple[Any, ...]) -> Loaded | None:
        """The snapshot of a scope, or None when there is none usable (missing, or rejected with a WARNING)."""
        try:
            return self._load(scope_key)
        except FileNotFoundError:  # its vector file was replaced between our two opens: read the new one
            try:
                return self._load(scope_key)
            except FileNotFoundError as e:
                self._reject(self.directory / f"{self._name(scope_key)}.snap", f"its vectors are gone ({e})")
                return None

    def _load(self, scope_key: tuple[Any, ...]) -> Loaded | None:
        name = self._name(scope_key)
        path = self.directory / f"{name}.snap"
        try:
            with open(path, "rb") as f:
                blob = f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            self._reject(path, f"cannot be read ({e})")
            return None
        try:
            if not blob.startswith(_MAGIC):
                raise WorkspaceError("not a snapshot file of this format")
            digest, payload = blob[len(_MAGIC):len(_MAGIC) + 32], memoryview(blob)[len(_MAGIC) + 32:]  # no copy
            if hashlib.sha256(payload).digest() != digest:
                raise WorkspaceError("checksum mismatch (partial or corrupt)")
            with _gc_paused():
                state = pickle.loads(payload)  # noqa: S301 - our own file, in a directory as private as the store
            if state.get("format") != FORMAT or state.get("identity") != self.identity \
                    or state.get("scope_key") != scope_key:
                raise WorkspaceError(f"written for {state.get('identity')!r} format {state.get('format')!r}")
            ids = state["ids"]
            n = len(ids)
            buffer = self._rows_file(state["rows"], state["rows_sha256"])
            records = _encoded(buffer, state["record_offsets"], n, _decode_record)
            documents = _encoded(buffer, state["document_offsets"], n, _decode_document)
            vectors = self._vectors(state["vectors"], n, int(self.identity["dim"]))
            spaces = {space: (model, self._vectors(file, n, dim))
                      for space, (model, dim, file) in state["spaces"].items()}
            sketch = None
            if state["sketch"] is not None:
                basis, sample, file, *half_file = state["sketch"]  # (no half rows in files written before them)
                half = self._vectors(half_file[0], n, int(basis.shape[0]), np.uint16) if half_file else None
                sketch = Sketch.restored(basis, sample, self._vectors(file, n, int(basis.shape[1]) + 1), half=half,
                                         in_place=True)
        except FileNotFoundError:
            raise
        except Exception as e:  # noqa: BLE001 - any unreadable file means: read the scope from Chroma
            self._reject(path, str(e) or type(e).__name__)
            return None
        self.stats["loaded"] += 1
        loaded = Loaded(records, documents, list(ids), vectors, dict(state["derived"]), dict(state["token"]), spaces,
                        sketch)
        if len(blob) >= _TRIM_AFTER:  # the file's bytes and the unpickling's garbage: back to the OS
            del blob, payload, state
            release_freed_memory()
        return loaded

    def _rows_file(self, file: str, digest: bytes) -> Any:
        """A snapshot's ``.rows`` file, checked against its sha256, read where sliced (:class:`_FileBytes`;
        memory-mapped where ``os.pread`` is missing; ``b""`` when empty)."""
        f = open(self.directory / file, "rb")  # noqa: SIM115 - kept open by _FileBytes
        try:
            sha = hashlib.sha256()
            while chunk := f.read(1 << 23):
                sha.update(chunk)
            if sha.digest() != digest:
                raise WorkspaceError(f"{file}: checksum mismatch (partial or corrupt)")
            if f.tell() and hasattr(os, "pread"):
                return _FileBytes(f)
            with f:
                return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if f.tell() else b""
        except BaseException:
            f.close()
            raise

    def _vectors(self, file: str, n: int, dim: int, dtype: type = np.float32) -> np.ndarray:
        """The ``n`` rows of one of a snapshot's vector files, memory-mapped copy-on-write (the file's spare
        rows after them are where this process appends: :data:`MIN_SPARE_ROWS`), checked against its record
        count and ``dtype``."""
        try:
            try:
                vectors = np.load(self.directory / file, mmap_mode="c")
            except FileNotFoundError:
                raise
            except OSError:  # a writable private mapping refused (strict overcommit): read-only, a write copies
                vectors = np.load(self.directory / file, mmap_mode="r")
        except FileNotFoundError:
            raise
        except Exception as e:
            raise WorkspaceError(f"vectors unreadable: {e}") from e
        if vectors.dtype != dtype or vectors.ndim != 2 or vectors.shape[0] < n or vectors.shape[1] != dim:
            raise WorkspaceError(f"vectors {vectors.shape} {vectors.dtype} do not match {n} records of dim {dim}")
        return vectors[:n]

    def _reject(self, path: Path, why: str) -> None:
        self.stats["rejected"] += 1
        self._warn(f"reject:{path.name}", "scope snapshot %s is unusable (%s): reading the scope from Chroma and "
                   "writing the snapshot again", path, why)

    # ------------------------------------------------------------------ write
    def save(self, scope_key: tuple[Any, ...], records: Sequence[MemoryRecord], documents: Sequence[str],
             vectors: np.ndarray, derived: Mapping[Any, Any], token: Mapping[str, Any],
             spaces: Mapping[str, tuple[str, np.ndarray]] | None = None, *, ids: Sequence[str] | None = None,
             sketch: Sketch | None = None) -> bool:
        """Write (atomically replace) a scope's snapshot (``spaces``: name -> (model id, vectors) of its named
        spaces; ``ids``: the records' ids when known, so an encoded record list is not decoded for them;
        ``sketch``: the primary space's, of these rows). Records and documents of an
        :class:`~agently_vecmem.search.encoded.EncodedList` are copied as stored, not decoded. Returns False
        when it could not be written (logged once per problem; the caller goes on without it)."""
        name = self._name(scope_key)
        nonce = uuid.uuid4().hex[:12]
        vec_name, rows_name = f"{name}.{nonce}.npy", f"{name}.{nonce}.rows"
        files: dict[str, tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]] = {  # name -> (rows, encoder)
            vec_name: (vectors, _float32),
            **{f"{name}.{nonce}.{space}.npy": (vecs, _float32) for space, (_, vecs) in (spaces or {}).items()}}
        if sketch is not None:
            files[f"{name}.{nonce}.sketch.npy"] = (sketch.codes_of(slice(None)), _float32)
            files[f"{name}.{nonce}.{_HALF}"] = (vectors, to_bfloat16)
        keep = {k: v for k, v in derived.items() if (k[0] if isinstance(k, tuple) else k) in _DERIVED}
        state = {"format": FORMAT, "identity": self.identity, "scope_key": scope_key, "token": dict(token),
                 "ids": [r.id for r in records] if ids is None else list(ids), "rows": rows_name,
                 "vectors": vec_name, "derived": keep,
                 "spaces": {space: (model, int(vecs.shape[1]), f"{name}.{nonce}.{space}.npy")
                            for space, (model, vecs) in (spaces or {}).items()},
                 "sketch": None if sketch is None else (sketch.basis, sketch.sample, f"{name}.{nonce}.sketch.npy",
                                                        f"{name}.{nonce}.{_HALF}")}
        tmp_vec = tmp_snap = None
        written: list[Path] = []
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp_vec = self._temp(".rows")
            with open(tmp_vec, "wb") as f:
                state.update(self._write_rows(f, records, documents))
            os.replace(tmp_vec, self.directory / rows_name)
            written.append(self.directory / rows_name)
            tmp_vec = None
            payload = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
            for file, (array, encode) in files.items():
                tmp_vec = self._temp(".npy")
                with open(tmp_vec, "wb") as f:
                    _save_with_spare_rows(f, array, encode)
                os.replace(tmp_vec, self.directory / file)
                written.append(self.directory / file)
                tmp_vec = None
            tmp_snap = self._temp(".snap")
            with open(tmp_snap, "wb") as f:
                f.write(_MAGIC + hashlib.sha256(payload).digest() + payload)
            os.replace(tmp_snap, self.directory / f"{name}.snap")  # publish: readers see old or new, never torn
            tmp_snap = None
        except Exception as e:  # noqa: BLE001 - disk full, permissions, ...: answers come from Chroma
            self.stats["save_failures"] += 1
            self._warn(f"save:{type(e).__name__}", "could not write a scope snapshot in %s (%s: %s); fresh "
                       "processes read the scope from Chroma", self.directory, type(e).__name__, e)
            for leftover in (tmp_vec, tmp_snap, *written):
                if leftover is not None:
                    with _ignoring_os_errors():
                        os.unlink(leftover)
            return False
        self.stats["saved"] += 1
        self._drop_old_vectors(name, keep=vec_name)
        return True

    @staticmethod
    def _write_rows(f: Any, records: Sequence[MemoryRecord], documents: Sequence[str]) -> dict[str, Any]:
        """Write the records then the documents to ``f``; their offsets and the file's sha256."""
        sha = hashlib.sha256()

        def write(encoded: Iterator[bytes], at: int) -> np.ndarray:
            lengths: list[int] = []
            for chunk in _batched(encoded, 4096):
                data = b"".join(chunk)
                f.write(data)
                sha.update(data)
                lengths += map(len, chunk)
            return _offsets(lengths, at)

        record_offsets = write(encoded_items(records, _encode_record), 0)
        document_offsets = write(encoded_items(documents, _encode_document), int(record_offsets[-1]))
        if len(record_offsets) != len(document_offsets):
            raise WorkspaceError(f"{len(document_offsets) - 1} documents do not match {len(record_offsets) - 1} "
                                 "records")
        return {"record_offsets": record_offsets, "document_offsets": document_offsets, "rows_sha256": sha.digest()}

    def _temp(self, suffix: str) -> str:
        fd, path = tempfile.mkstemp(prefix=".tmp-", suffix=suffix, dir=self.directory)
        os.close(fd)
        return path

    def _drop_old_vectors(self, name: str, keep: str) -> None:
        """Remove this scope's vector files other than ``keep`` older than :data:`VECTOR_GRACE_SECONDS`: one
        younger may belong to a snapshot another process is about to publish. (A process that mapped a removed
        file keeps reading it: an unlinked file lives until it is unmapped; a process that read the snapshot
        but not yet its vectors reads the snapshot again.)"""
        now = time.time()
        nonce = keep.split(".")[1]
        for old in (*self.directory.glob(f"{name}.*.npy"), *self.directory.glob(f"{name}.*.rows")):
            with _ignoring_os_errors():
                if old.name.split(".")[1] != nonce and now - old.stat().st_mtime >= VECTOR_GRACE_SECONDS:
                    old.unlink()

    def clear(self) -> None:
        """Remove every snapshot of the collection (after an erasure: no file keeps erased text)."""
        if not self.directory.is_dir():
            return
        for path in self.directory.iterdir():
            if path.suffix in (".snap", ".npy", ".rows"):
                with _ignoring_os_errors():
                    path.unlink()


def release_freed_memory() -> None:
    """Collect the garbage in reference cycles, then return the free pages of the C heap to the OS (glibc's
    ``malloc_trim``), after a big scope read whole from Chroma was freed or a big snapshot unpickled: glibc
    keeps most of such memory mapped for the process, so a worker that read 1M records and then served them
    from their snapshot held ~3 GB more than one that loaded the snapshot (``benchmarks/bench_scale.py``); of
    a read of 100k records, 60 MB more stayed in use until the cyclic GC's next full pass. The trim is a no-op
    where the C library has no ``malloc_trim`` (macOS, musl)."""
    gc.collect()
    if not sys.platform.startswith("linux"):
        return
    try:
        trimmed = ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        return
    logger.debug("malloc_trim: %s", "memory returned to the OS" if trimmed else "nothing to return")


def _float32(rows: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(rows, dtype=np.float32)


def _save_with_spare_rows(f: Any, array: np.ndarray,
                          encode: Callable[[np.ndarray], np.ndarray] = _float32) -> None:
    """``array`` (2-d) as a ``.npy`` file of its rows as ``encode`` gives them (float32 by default) then
    :data:`MIN_SPARE_ROWS` (or more) zero rows, left as a hole (``truncate``): a process that maps it
    copy-on-write appends into them."""
    n = int(array.shape[0])
    spare = max(MIN_SPARE_ROWS, n // SPARE_DIVISOR) if SPARE_DIVISOR else MIN_SPARE_ROWS
    empty = encode(np.asarray(array[:0]))
    header = np.lib.format.header_data_from_array_1_0(empty)
    header["shape"] = (n + spare, *array.shape[1:])
    np.lib.format.write_array_header_1_0(f, header)
    for start in range(0, n, _WRITE_ROWS):  # encoded a part at a time (bounds the temporary memory)
        f.write(np.ascontiguousarray(encode(np.asarray(array[start:start + _WRITE_ROWS]))).data)
    f.truncate(f.tell() + spare * empty.itemsize * int(np.prod(array.shape[1:])))


class _FileBytes:
    """A snapshot's ``.rows`` file as the buffer of an :class:`~agently_vecmem.search.encoded.EncodedList`: a
    slice is one ``os.pread`` (thread-safe: no shared file position). A query reads a few dozen records; mapped,
    every page it touched (a 2 MB folio of the page cache at a time) stayed in the worker's resident set, ~270 MB
    after 50 queries over 1M records. Read this way they are the OS page cache's, shared and reclaimable, as any
    file read. The file stays open (readable if a newer snapshot replaces it) until the list is dropped."""

    __slots__ = ("_file", "_size", "__weakref__")

    def __init__(self, f: Any) -> None:
        self._file = f
        self._size = os.fstat(f.fileno()).st_size
        weakref.finalize(self, f.close)

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, part: slice) -> bytes:
        start, stop, _ = part.indices(self._size)
        size = max(stop - start, 0)
        data = b""
        while len(data) < size:  # (a read may return less than asked: large reads, signals)
            more = os.pread(self._file.fileno(), size - len(data), start + len(data))
            if not more:
                raise WorkspaceError(f"{self._file.name}: ends at {start + len(data)}, before {stop}")
            data += more
        return data


def _batched(items: Iterable[bytes], size: int) -> Iterator[list[bytes]]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


@contextmanager
def _ignoring_os_errors() -> Iterator[None]:
    try:
        yield
    except OSError:
        pass

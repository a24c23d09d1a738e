"""Erasure: forgetting records so that no file of the store still holds what they said.

Deleting a record through Chroma's client API removes it from every read, but not from the disk: the
record's document and metadata stay in Chroma's write-ahead log (the SQLite table ``embeddings_queue``) until
the vector segment has consumed the log past it, and after that in SQLite's free space (Chroma does not set
``secure_delete``). :func:`forget` (what :meth:`ChromaWorkspace.forget` runs) therefore does three things:

1. **Chooses** the records (always the workspace's own user's): by id, by session, or everything, plus the
   versions of each memory (the ``supersedes`` / ``superseded_by`` chain links inside one scope).
2. **Deletes** them through the client API, with the cross-process change markers of every hard delete
   (:mod:`.changelog`): once it returns, no process reads them. Before that, an entry in the append-only
   **erasure audit** (the companion collection ``<collection>__vecmem_audit``: operation, user, ids, counts,
   times; never content) names the ids, and it is marked done at the end. A forget killed half way leaves a
   ``started`` entry, which the next forget of that user completes.
3. **Purges** (embedded stores, whose SQLite file this process owns): removes from ``embeddings_queue`` the
   log rows of the forgotten ids that precede their delete (never the delete row itself, which the vector
   index may still have to replay, and never a row of a record written again after its delete), merges the
   full-text index (``optimize``: a deleted document's terms leave the index only on a merge) and runs
   ``VACUUM``, which rewrites the file without free pages. For a Chroma server the client cannot reach the
   server's files: :func:`purge_store_files` does the same against the server's ``--path`` directory on the
   server host (``agently-vecmem gc --server-path DIR``), for every id the audit names.

The HNSW files get one more pass (:func:`scrub_index_files`): Chroma persists an index that holds no element
yet with its whole allocated capacity uninitialized, i.e. bytes of the writing process's heap, which can hold
any text the process handled; the unused capacity is zeroed.

What stays: the **vectors** of forgotten records in the HNSW files (``<segment uuid>/data_level0.bin``).
hnswlib marks a deleted element and keeps its vector (and graph links) until its slot is reused; the files
hold no text, and ``index_metadata.pickle`` holds ids and labels only. See ``docs/forget.md``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sqlite3
import struct
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..errors import ConfigurationError, WorkspaceError
from ..filters import ALL_SCOPES, Scope
from ..records import MemoryRecord

__all__ = [
    "ForgetReport",
    "AuditEntry",
    "PurgeReport",
    "ErasureAudit",
    "audit_collection_name",
    "chain_closure",
    "forget",
    "apply_retention",
    "purge_log",
    "compact_sqlite",
    "purge_store_files",
    "scrub_index_files",
    "AUDIT_IDS_PER_ENTRY",
    "PROGRESS_COLLECTION",
]

logger = logging.getLogger(__name__)

#: Record collection of the import progress records of :mod:`agently_vecmem.ingest` (one per session).
PROGRESS_COLLECTION = "vecmem_import"
#: An audit entry names at most this many ids (a larger operation writes several entries).
AUDIT_IDS_PER_ENTRY = 1000
_AUDIT_VERSION = 1
_DELETE_OP = 3  # chromadb's operation code of a delete in ``embeddings_queue``
_SQL_CHUNK = 500
_DAY = 86_400.0

By = Literal["ids", "session", "everything", "retention"]


def audit_collection_name(collection: str) -> str:
    """The companion collection holding the erasure audit of ``collection``."""
    return f"{collection}__vecmem_audit"


def _session_digest(session_id: str) -> str:
    """The audit names a session by a digest: an operator who knows the session id can match it."""
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------------------------- values
class ForgetReport(BaseModel):
    """What one forget erased: ids and counts, never content.

    Attributes:
        op: the operation id (its entries in the erasure audit carry it).
        user_id: the user whose records were erased.
        by: ``ids``, ``session``, ``everything`` or ``retention``.
        erased: records deleted by this call (versions and progress records included).
        ids: their ids, sorted.
        counts: erased records per kind: ``session_memory``, ``global_memory``, ``raw_turn``,
            ``import_progress``, ``superseded`` (older versions), ``other``.
        resumed: records of an earlier forget of this user that was interrupted and is completed now.
        log_rows_purged: write-ahead log rows removed from the store's files (embedded stores); None on a
            server, whose files only ``agently-vecmem gc --server-path DIR`` on its host can reach.
        vacuumed: the SQLite file was rewritten without free pages (embedded stores).
        seconds: wall time.
        dry_run: nothing was erased: ``ids`` and ``counts`` say what would be.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    op: str
    user_id: str
    by: By
    erased: int = 0
    ids: tuple[str, ...] = ()
    counts: dict[str, int] = Field(default_factory=dict)
    resumed: int = 0
    log_rows_purged: int | None = None
    vacuumed: bool = False
    seconds: float = 0.0
    dry_run: bool = False

    @property
    def files_erased(self) -> bool:
        """Whether the store's files were cleaned by this call (False on a server: run its ``gc``)."""
        return self.log_rows_purged is not None and self.vacuumed


class AuditEntry(BaseModel):
    """One entry of the erasure audit (content-free, append-only: only ``state`` and the result counts of
    an entry change, from ``started`` to ``done``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    op: str
    user_id: str
    by: str
    state: Literal["started", "done"]
    started_at: float
    finished_at: float | None = None
    ids: tuple[str, ...] = ()
    chunk: int = 0
    chunks: int = 1
    session_sha256: str | None = None
    erased: int | None = None
    files_purged: bool = False


class PurgeReport(BaseModel):
    """What :func:`purge_store_files` removed from a store's files."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    collections: tuple[str, ...]
    ids: int
    log_rows_purged: int
    vacuumed: bool
    index_bytes_zeroed: int = 0
    seconds: float


# ---------------------------------------------------------------------------------------------- audit
class ErasureAudit:
    """The erasure audit of one collection: a companion Chroma collection of content-free entries.

    Args:
        collection: the companion collection (:func:`audit_collection_name`).
        call: ``call(what, fn, *args, **kw)`` runs a Chroma call and translates its errors.
    """

    def __init__(self, collection: Any, call: Callable[..., Any]) -> None:
        self.collection = collection  # None: a read-only store without an audit yet (reads are empty)
        self._call = call

    def start(self, op: str, *, user_id: str, by: By, ids: Sequence[str], session_id: str | None = None) -> None:
        """Record an operation about to erase ``ids`` (before anything is deleted)."""
        chunks = [list(ids[i:i + AUDIT_IDS_PER_ENTRY]) for i in range(0, len(ids), AUDIT_IDS_PER_ENTRY)] or [[]]
        now = time.time()
        metas = []
        for n, chunk in enumerate(chunks):
            meta: dict[str, Any] = {"v": _AUDIT_VERSION, "op": op, "user_id": user_id, "by": by, "state": "started",
                                    "started_at": now, "ids": json.dumps(chunk), "chunk": n, "chunks": len(chunks)}
            if session_id is not None:
                meta["session_sha256"] = _session_digest(session_id)
            metas.append(meta)
        entry_ids = [f"erase.{op}.{n}" for n in range(len(chunks))]
        self._call("write of its erasure audit", self.collection.add, ids=entry_ids,
                   embeddings=np.ones((len(chunks), 2), dtype=np.float32), metadatas=metas,
                   documents=[""] * len(chunks))

    def finish(self, entries: Iterable[str], *, erased: int, files_purged: bool) -> None:
        """Mark entries done (``upsert`` merges: the rest of each entry is kept as written)."""
        entry_ids = list(entries)
        if not entry_ids:
            return
        now = time.time()
        self._call("update of its erasure audit", self.collection.update, ids=entry_ids,
                   metadatas=[{"state": "done", "finished_at": now, "erased": erased, "files_purged": files_purged}
                              for _ in entry_ids])

    def entries(self, *, user_id: str | None = None, state: str | None = None) -> list[AuditEntry]:
        """Entries (oldest first), optionally of one user and/or in one state."""
        if self.collection is None:
            return []
        conds = [{k: v} for k, v in (("user_id", user_id), ("state", state)) if v is not None]
        where = None if not conds else conds[0] if len(conds) == 1 else {"$and": conds}
        res = self._call("read of its erasure audit", self.collection.get, where=where, include=["metadatas"])
        out = [_entry(eid, meta or {}) for eid, meta in zip(res["ids"], res["metadatas"], strict=True)]
        return sorted(out, key=lambda e: (e.started_at, e.op, e.chunk))


def _entry(entry_id: str, meta: Mapping[str, Any]) -> AuditEntry:
    try:
        ids = tuple(json.loads(meta.get("ids") or "[]"))
    except ValueError:
        ids = ()
    return AuditEntry(
        id=entry_id, op=str(meta.get("op", "")), user_id=str(meta.get("user_id", "")), by=str(meta.get("by", "")),
        state="done" if meta.get("state") == "done" else "started", started_at=float(meta.get("started_at", 0.0)),
        finished_at=meta.get("finished_at"), ids=ids, chunk=int(meta.get("chunk", 0)),
        chunks=int(meta.get("chunks", 1)), session_sha256=meta.get("session_sha256"), erased=meta.get("erased"),
        files_purged=bool(meta.get("files_purged", False)),
    )


# ---------------------------------------------------------------------------------------------- choosing
def _same_scope(a: MemoryRecord, b: MemoryRecord) -> bool:
    return (a.user_id, a.collection, a.memory_scope, a.session_id) == (b.user_id, b.collection, b.memory_scope,
                                                                       b.session_id)


def chain_closure(start: Iterable[MemoryRecord], fetch: Callable[[list[str]], list[MemoryRecord]]) -> list[MemoryRecord]:
    """``start`` plus every version of each record: the records reached over ``supersedes`` /
    ``superseded_by`` links that stay inside the record's scope (consolidation only links records of one
    scope; a raw turn's link to what was extracted from it leaves the scope and is not followed).

    Args:
        start: the chosen records.
        fetch: reads records by id (any status; ids not found are skipped).
    """
    found: dict[str, MemoryRecord] = {r.id: r for r in start}
    frontier = list(found.values())
    while frontier:
        wanted: dict[str, MemoryRecord] = {}
        for record in frontier:
            for link in (record.supersedes, record.superseded_by):
                if link and link not in found:
                    wanted.setdefault(link, record)
        frontier = []
        if not wanted:
            break
        for record in fetch(list(wanted)):
            origin = wanted.get(record.id)
            if origin is not None and record.id not in found and _same_scope(record, origin):
                found[record.id] = record
                frontier.append(record)
    return list(found.values())


def _kind_of(record: MemoryRecord) -> str:
    if record.collection == PROGRESS_COLLECTION:
        return "import_progress"
    if record.collection != "memory":
        return "other"
    if record.status != "active":
        return "superseded"
    if not record.extracted:
        return "raw_turn"
    return "global_memory" if record.memory_scope == "GLOBAL_MEMORY" else "session_memory"


class ErasableStore(Protocol):
    """What :func:`forget` needs of a store (a :class:`~agently_vecmem.workspace.ChromaWorkspace`, whose
    ``forget`` calls it): its user's reads, and the erasing primitives it keeps to itself."""

    user_id: str
    _io: Any

    def scan(self, *, scope: Scope, where: Mapping[str, Any] | None = None, limit: int | None = None,
             offset: int = 0) -> list[MemoryRecord]: ...

    def get_many(self, ids: Sequence[str], *, include_inactive: bool = False) -> list[MemoryRecord]: ...

    def _check_open(self) -> None: ...

    def _check_writable(self) -> None: ...

    def _erasure_audit(self) -> ErasureAudit: ...

    def _erase(self, ids: Sequence[str]) -> int: ...

    def _sqlite_path(self) -> str | None: ...


def _session_records(ws: ErasableStore, session_id: str) -> list[MemoryRecord]:
    """Every record of a session: those carrying its id (any scope, status and collection), its raw turns
    kept in GLOBAL_MEMORY (their session is in the provenance) and its import progress."""
    out = ws.scan(scope=ALL_SCOPES, where={"session_id": session_id})
    raw = ws.scan(scope=Scope.global_memory(include_inactive=True), where={"extracted": False})
    out += [r for r in raw if r.provenance.session_id == session_id]
    progress = ws.scan(scope=Scope(None, None, PROGRESS_COLLECTION, include_inactive=True))
    out += [r for r in progress if r.body.get("session_id") == session_id]
    return out


def _choose(ws: ErasableStore, ids: Sequence[str] | None, session: str | None,
            everything: bool) -> tuple[By, list[MemoryRecord]]:
    chosen = [x for x in (ids is not None, session is not None, everything) if x]
    if len(chosen) != 1:
        raise ConfigurationError("forget needs exactly one of ids=..., session=... or everything=True")
    if everything:
        return "everything", ws.scan(scope=ALL_SCOPES)
    if session is not None:
        if not isinstance(session, str) or not session:
            raise ConfigurationError("session must be a non-empty session id")
        start = _session_records(ws, session)
        by: By = "session"
    else:
        if isinstance(ids, str):
            ids = [ids]
        if not all(isinstance(i, str) and i for i in ids or ()):
            raise ConfigurationError("ids must be non-empty record id strings")
        start = ws.get_many(list(dict.fromkeys(ids or ())), include_inactive=True)
        by = "ids"
    return by, chain_closure(start, lambda wanted: ws.get_many(wanted, include_inactive=True))


# ---------------------------------------------------------------------------------------------- SQLite files
@contextlib.contextmanager
def _sqlite(db_path: str | os.PathLike[str], busy_seconds: float) -> Iterator[sqlite3.Connection]:
    if not os.path.isfile(db_path):
        raise WorkspaceError(f"no Chroma database at {str(db_path)!r}; pass the store's directory")
    try:
        con = sqlite3.connect(str(db_path), timeout=busy_seconds, isolation_level=None)
    except sqlite3.Error as e:
        raise WorkspaceError(f"cannot open {str(db_path)!r}: {e}") from e
    try:
        yield con
    finally:
        con.close()


def _collection_ids(con: sqlite3.Connection, names: Sequence[str]) -> dict[str, str]:
    marks = ",".join("?" * len(names))
    return {cid: name for cid, name in con.execute(f"SELECT id, name FROM collections WHERE name IN ({marks})",
                                                    list(names))}


def purge_log(db_path: str | os.PathLike[str], collection_id: str, ids: Sequence[str], *,
              busy_seconds: float = 30.0) -> int:
    """Remove from Chroma's write-ahead log the rows of ``ids`` that precede their delete.

    Only rows that are dead are removed: a row is removed when the same collection's log holds a later
    delete of the same id and the collection's metadata segment has consumed the row. The delete rows stay
    (the vector segment replays them after a restart; a replayed delete of an id it never received is a
    no-op), and so does anything written under the id again after its delete.

    Returns:
        How many rows were removed.

    Raises:
        WorkspaceError: the database cannot be opened or is locked longer than ``busy_seconds``.
    """
    if not ids:
        return 0
    removed = 0
    with _sqlite(db_path, busy_seconds) as con:
        try:
            topic = _topic_of(con, collection_id)
            consumed = con.execute(
                "SELECT m.seq_id FROM max_seq_id m JOIN segments s ON s.id = m.segment_id "
                "WHERE s.collection = ? AND s.scope = 'METADATA'", (collection_id,)).fetchone()
            if topic is None or consumed is None or not isinstance(consumed[0], int):
                logger.debug("collection %s has no log rows to purge", collection_id)
                return 0
            for start in range(0, len(ids), _SQL_CHUNK):
                chunk = list(ids[start:start + _SQL_CHUNK])
                marks = ",".join("?" * len(chunk))
                cur = con.execute(
                    f"DELETE FROM embeddings_queue WHERE topic = ? AND operation != {_DELETE_OP} AND seq_id <= ? "
                    f"AND id IN ({marks}) AND seq_id < (SELECT MAX(d.seq_id) FROM embeddings_queue d "
                    f"WHERE d.topic = embeddings_queue.topic AND d.id = embeddings_queue.id "
                    f"AND d.operation = {_DELETE_OP})",
                    [topic, consumed[0], *chunk])
                removed += max(cur.rowcount, 0)
        except sqlite3.Error as e:
            raise WorkspaceError(f"purging the write-ahead log of {str(db_path)!r} failed: {e}") from e
    return removed


def _topic_of(con: sqlite3.Connection, collection_id: str) -> str | None:
    row = con.execute("SELECT topic FROM embeddings_queue WHERE topic LIKE ? LIMIT 1",
                      (f"%/{collection_id}",)).fetchone()
    return None if row is None else str(row[0])


def compact_sqlite(db_path: str | os.PathLike[str], *, busy_seconds: float = 30.0) -> None:
    """Merge Chroma's full-text index (a deleted document's terms leave it only on a merge) and ``VACUUM``
    the database (rewritten without free pages: nothing deleted stays in the file).

    Raises:
        WorkspaceError: the database is locked longer than ``busy_seconds`` (another process is in a
            transaction) or SQLite failed.
    """
    with _sqlite(db_path, busy_seconds) as con:
        try:
            con.execute("PRAGMA secure_delete = ON")
            if con.execute("SELECT 1 FROM sqlite_master WHERE name = 'embedding_fulltext_search'").fetchone():
                con.execute("INSERT INTO embedding_fulltext_search(embedding_fulltext_search) VALUES ('optimize')")
            con.execute("VACUUM")
        except sqlite3.Error as e:
            raise WorkspaceError(f"compacting {str(db_path)!r} failed ({e}); nothing was lost: run it again "
                                 "(`agently-vecmem gc`) when no other process is writing") from e


_HNSW_HEADER = struct.Struct("<iQQQQQQ")  # version, offsetLevel0, max_elements, count, size per element, ...


def scrub_index_files(path: str | os.PathLike[str]) -> int:
    """Zero the unused capacity of the HNSW files of a store: the slots past the element count of every
    ``<segment>/data_level0.bin`` (and their entries in ``length.bin``).

    Chroma persists an index that holds no element yet with its whole allocated capacity, uninitialized: those
    bytes are whatever the writing process's heap held (texts it handled included). No reader uses them (an
    index loads its elements only), so zeroing them changes nothing but the bytes. Only for files no process
    is writing: an embedded store from its one writer process, a server's directory while it is stopped.

    Returns:
        How many bytes were zeroed.
    """
    zeroed = 0
    for header in Path(path).glob("*/header.bin"):
        try:
            raw = header.read_bytes()
            version, _, capacity, count, size = _HNSW_HEADER.unpack_from(raw)[:5]
        except (OSError, struct.error):
            continue
        if version != 1 or size <= 0 or count > capacity:
            logger.debug("%s: not an index layout this version knows; left alone", header)
            continue
        for name, unit in (("data_level0.bin", size), ("length.bin", 4)):
            target = header.with_name(name)
            with contextlib.suppress(FileNotFoundError):
                end = target.stat().st_size
                start = count * unit
                if end > start:
                    with open(target, "r+b") as f:
                        f.seek(start)
                        f.write(bytes(end - start))
                    zeroed += end - start
    return zeroed


def _audit_ids(con: sqlite3.Connection, audit_collection: str) -> set[str]:
    """Every id the erasure audit of a collection names, read from the SQLite file itself."""
    rows = con.execute(
        "SELECT em.string_value FROM embedding_metadata em JOIN embeddings e ON e.id = em.id "
        "JOIN segments s ON s.id = e.segment_id JOIN collections c ON c.id = s.collection "
        "WHERE c.name = ? AND em.key = 'ids'", (audit_collection,)).fetchall()
    out: set[str] = set()
    for (text,) in rows:
        with contextlib.suppress(TypeError, ValueError):
            out.update(i for i in json.loads(text or "[]") if isinstance(i, str))
    return out


def purge_store_files(path: str | os.PathLike[str], *, collection: str = "vecmem_memory",
                      busy_seconds: float = 30.0, scrub_index: bool = False) -> PurgeReport:
    """Erase from a store's files what its erasure audit names: the dead log rows of every id in the audit
    (as :func:`purge_log`), then the full-text merge and ``VACUUM`` (as :func:`compact_sqlite`).

    For a ``chroma run`` server: run it on the server's host against its ``--path`` directory (the CLI's
    ``agently-vecmem gc --server-path DIR``). It is safe while the server runs (SQLite's own locking; the rows
    removed are dead) and after it stopped; never open a server's directory with an embedded client while the
    server runs. ``scrub_index`` also zeroes the unused capacity of the HNSW files (:func:`scrub_index_files`):
    only while the server is stopped.

    Raises:
        WorkspaceError: no Chroma database in ``path``, or it stayed locked longer than ``busy_seconds``.
    """
    started = time.perf_counter()
    db = Path(path) / "chroma.sqlite3"
    names = [collection, audit_collection_name(collection)]
    with _sqlite(db, busy_seconds) as con:
        try:
            found = _collection_ids(con, names)
            ids = _audit_ids(con, audit_collection_name(collection))
        except sqlite3.Error as e:
            raise WorkspaceError(f"{str(db)!r} is not a Chroma database this version can read: {e}") from e
    if collection not in found.values():
        raise WorkspaceError(f"no collection {collection!r} in {str(db)!r}; check --collection and the path")
    removed = sum(purge_log(db, cid, sorted(ids), busy_seconds=busy_seconds)
                  for cid, name in found.items() if name == collection)
    compact_sqlite(db, busy_seconds=busy_seconds)
    scrubbed = scrub_index_files(path) if scrub_index else 0
    report = PurgeReport(path=str(path), collections=tuple(sorted(found.values())), ids=len(ids),
                         log_rows_purged=removed, vacuumed=True, index_bytes_zeroed=scrubbed,
                         seconds=time.perf_counter() - started)
    logger.info("purged %d log rows of %d erased ids from %s", removed, len(ids), db)
    return report


# ---------------------------------------------------------------------------------------------- forget
def forget(ws: ErasableStore, *, ids: Sequence[str] | None = None, session: str | None = None,
           everything: bool = False, records: Sequence[MemoryRecord] | None = None,
           by: By | None = None, dry_run: bool = False) -> ForgetReport:
    """Erase records of the workspace's user (see the module docstring; :meth:`ChromaWorkspace.forget` is the
    public entry point). ``records`` + ``by`` erase records already chosen (retention); ``dry_run`` only
    chooses (what the CLI shows before asking).

    Raises:
        ConfigurationError: not exactly one of ``ids``, ``session``, ``everything``.
        WorkspaceError: the store failed (then nothing is reported erased; run the forget again).
    """
    started = time.perf_counter()
    if dry_run:
        ws._check_open()
    else:
        ws._check_writable()
    if records is None:
        by, chosen = _choose(ws, ids, session, everything)
    else:
        chosen = list(records)
    if by is None:
        raise ConfigurationError("records to erase need their reason (by=...)")
    chosen_ids = sorted({r.id for r in chosen})
    counts: dict[str, int] = {}
    for record in chosen:
        counts[_kind_of(record)] = counts.get(_kind_of(record), 0) + 1
    if dry_run:
        return ForgetReport(op="", user_id=ws.user_id, by=by, erased=len(chosen_ids), ids=tuple(chosen_ids),
                            counts=counts, seconds=time.perf_counter() - started, dry_run=True)
    audit = ws._erasure_audit()
    unfinished = audit.entries(user_id=ws.user_id, state="started")
    leftover = sorted({i for e in unfinished for i in e.ids} - set(chosen_ids))
    op = uuid.uuid4().hex
    if chosen_ids:
        audit.start(op, user_id=ws.user_id, by=by, ids=chosen_ids, session_id=session)
    resumed = ws.get_many(leftover, include_inactive=True) if leftover else []
    erased = ws._erase([r.id for r in chosen] + [r.id for r in resumed])
    purged: int | None = None
    vacuumed = False
    everything_ids = chosen_ids + leftover
    db = ws._sqlite_path()
    if db is not None and everything_ids:
        purged = purge_log(db, str(ws._io.collection.id), everything_ids)
        compact_sqlite(db)
        scrub_index_files(os.path.dirname(db))  # this process is the store's only writer
        vacuumed = True
    audit.finish([e.id for e in unfinished], erased=len(resumed), files_purged=vacuumed)
    if chosen_ids:
        n_chunks = -(-len(chosen_ids) // AUDIT_IDS_PER_ENTRY)
        audit.finish([f"erase.{op}.{n}" for n in range(n_chunks)], erased=erased - len(resumed),
                     files_purged=vacuumed)
    report = ForgetReport(op=op, user_id=ws.user_id, by=by, erased=len(chosen_ids), ids=tuple(chosen_ids),
                          counts=counts, resumed=len(resumed), log_rows_purged=purged, vacuumed=vacuumed,
                          seconds=time.perf_counter() - started)
    logger.info("forgot %d records of user %r by %s (%d resumed; log rows purged: %s)", report.erased,
                ws.user_id, by, report.resumed, purged)
    return report


def apply_retention(ws: ErasableStore, *, session_memory_days: float | None = None,
                    raw_turn_days: float | None = None, now: float | None = None) -> ForgetReport:
    """Erase (exactly as :func:`forget`) the workspace user's SESSION_MEMORY records written more than
    ``session_memory_days`` ago and raw turns (``extracted=False``, any scope) written more than
    ``raw_turn_days`` ago. None leaves a kind alone. Each record goes by its own age (``created_at``): a
    recent version of an old memory stays.

    Raises:
        ConfigurationError: a number of days is not positive.
    """
    now = time.time() if now is None else now
    chosen: dict[str, MemoryRecord] = {}
    for days, scope, where in (
        (session_memory_days, Scope(None, None, "memory", include_inactive=True), {"memory_scope": "SESSION_MEMORY"}),
        (raw_turn_days, Scope(None, None, "memory", include_inactive=True), {"extracted": False}),
    ):
        if days is None:
            continue
        if isinstance(days, bool) or not isinstance(days, (int, float)) or not days > 0:
            raise ConfigurationError(f"retention days must be a positive number, got {days!r}")
        cutoff = now - float(days) * _DAY
        for record in ws.scan(scope=scope, where={**where, "created_at": {"$lt": cutoff}}):
            chosen[record.id] = record
    return forget(ws, records=list(chosen.values()), by="retention")

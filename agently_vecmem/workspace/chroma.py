"""ChromaWorkspace: memory records in a Chroma collection, with hard scope filters.

Embedded ``PersistentClient(path)`` by default; a Chroma server (``HttpClient``) with ``host=``/``port=``;
or any already-built client with ``client=``. Chroma is the store of record. The Workspace also keeps
exact in-memory snapshots of the scopes it has searched (:class:`ScopeView`), maintained on every write,
so scoped search costs one matrix-vector product instead of a filtered HNSW query.

A server (or a client passed in) may have other writer processes. There every write also leaves change
markers in a companion collection and every :meth:`ChromaWorkspace.view` first checks them with one point
read, refreshing only the records other processes changed (see :mod:`.changelog` for the protocol and
exactly what is guaranteed): a write acknowledged in one process is seen by the next read in every other.

Helpers live beside it: :mod:`.transfer` (JSONL export/import), :mod:`.validation` (checks of scopes,
vectors, records and the collection's embedder) and :mod:`.remote` (server connection, reads of any size,
the rollback of a failed multi-batch put).
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..embedders.base import Embedder
from ..errors import (
    ConfigurationError,
    RecordNotFoundError,
    RecordValidationError,
    ScopeAccessError,
    WorkspaceError,
)
from ..filters import ALL_SCOPES, Scope, matches
from ..records import DEFAULT_USER, MemoryRecord, check_user_id, parse_record, scope_key, stored_form
from ..search.candidates import warm_view
from ..search.spaces import default_space_names, space_available
from ..search.view import Hit, ScopeView, record_order
from . import erasure, transfer
from .changelog import ChangeLog, Changes, log_collection_name
from .chroma_io import ChromaCalls, CollectionIO, Row, RowBuffer, connect_server, decode_rows, permute_rows
from .directory import Directories, directory_key, is_directory_row
from .locking import acquire_writer_lock, release_writer_lock
from .snapshots import (
    DEFAULT_MIN_RECORDS,
    SnapshotFiles,
    default_snapshot_root,
    release_freed_memory,
    store_sequence,
)
from .transfer import progress_bar as _progress
from .validation import check_embedder, check_vectors, parse_records
from .validation import require_scope as _require_scope
from .vector_spaces import METADATA_KEY as SPACES_KEY
from .vector_spaces import DeclaredSpace, StoreSpaces
from .view_cache import ViewCache, default_budget

__all__ = ["ChromaWorkspace", "MAX_BATCH", "SCHEMA_VERSION"]

logger = logging.getLogger(__name__)

#: Chroma accepts at most 5,461 records per call; stay below it.
MAX_BATCH = 5_000
#: 2: every record carries ``user_id`` (a store of version 1 is migrated when opened for writing).
SCHEMA_VERSION = 2
#: On a shared store (a server), how often (seconds) a process re-reads the vector spaces the store declares,
#: on its next write or read: a space another process added (``agently-vecmem reindex``) is carried by this
#: process's writes from then on. The reindex waits this long after declaring a space before it may call the
#: space complete (:mod:`.reindex`).
SPACES_REFRESH_SECONDS = 5.0


@dataclass
class _Shared:
    """State shared by a workspace and the per-user workspaces bound from it (:meth:`ChromaWorkspace.for_user`)."""

    version: int = 0
    closed: bool = False
    lock_key: str | None = None
    #: a version-1 store opened read-only: its records carry no user id (they are all the default user's)
    legacy: bool = False
    #: the erasure audit (:mod:`.erasure`), opened on first use
    audit: Any = None
    #: scope key -> the version of the snapshot view last saved to its persisted file (:mod:`.snapshots`)
    snapshot_saved: Any = None
    #: scope key -> (scope, records this process wrote into it): big scopes written but never read are
    #: snapshotted at close (the first reader after a bulk import starts from the snapshot)
    written: Any = None


#: What a read of whole rows includes.
_ROW_FIELDS = ["metadatas", "documents", "embeddings"]
_OPTIONAL_KEYS = ("session_id", "tags", "superseded_by", "supersedes", "occurred_at")
#: Scopes one ``views`` call loads at once (a request reads the GLOBAL scope and a session's, a user's few more).
_LOAD_THREADS = 4


@dataclass(frozen=True)
class _Batch:
    """Rows read from Chroma, decoded: records, their documents, primary vectors and named spaces."""

    records: list[MemoryRecord]
    documents: list[str]
    vectors: np.ndarray
    spaces: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.records)

    def applied_to(self, view: ScopeView, version: int) -> ScopeView | None:
        """``view`` after these rows were written (None when they do not touch its scope). A space of the view
        that some of the rows lack (written by an older version) leaves the new snapshot: never mixed."""
        dropped = [name for name in view.spaces if name not in self.spaces]
        if dropped:
            logger.debug("%r: written records lack vector space(s) %s; the scope goes without them", view.scope,
                         dropped)
            view = ScopeView(view.scope, tuple(view.records), view.vectors, tuple(view.documents), view.version,
                             spaces={k: v for k, v in view.spaces.items() if k not in dropped})
        return view.with_records(self.records, self.vectors, self.documents, version, self.spaces)


class ChromaWorkspace:
    """Durable memory storage on Chroma.

    Args:
        path: directory of the embedded store (default ``./.vecmem/chroma``). Ignored with ``host`` or
            ``client``.
        embedder: turns record text into vectors; default: the offline all-MiniLM-L6-v2 model.
        host, port, ssl, headers: connect to a Chroma server (``chroma run``) instead.
        client: an already-built ``chromadb`` client.
        collection: the Chroma collection name.
        read_only: do not take the single-writer lock; writes raise.
        exact_index: answer unfiltered searches from exact in-memory scope snapshots (default on). Off:
            Chroma's filtered HNSW query (always fresh, slower on large scopes); ``view()`` then reads the
            scope whole from Chroma on every call.
        timeout: seconds a request to a Chroma server may take before it fails with a
            :class:`WorkspaceError` (never a hang).
        cache_bytes: the most memory the scope snapshots of this store may hold in this process (default
            :data:`~agently_vecmem.workspace.view_cache.DEFAULT_CACHE_BYTES`, 1 GiB, or the environment variable
            ``AGENTLY_VECMEM_CACHE_BYTES``); the least recently used
            scopes are evicted whole and read again on their next use. ``info()["cache"]`` and the plugin's
            diagnostics report hits, misses, evictions and bytes.
        snapshots: persist big scopes (``snapshot_min_records`` records or more) to local files so a fresh
            process loads them in a fraction of a Chroma read (:mod:`.snapshots`). None (default): on for
            embedded stores (under ``<path>/vecmem_snapshots``) and servers (under
            :func:`~agently_vecmem.workspace.snapshots.default_snapshot_root`), off for a client passed in;
            False: off; a path: that directory.
        snapshot_min_records: the smallest scope that is snapshotted.
        spaces: the named vector spaces a NEW store keeps beside the embedder's vectors
            (:mod:`agently_vecmem.search.spaces`), computed at write time. None (default): the best
            multilingual model installed (``e5``, else ``use``: the ``multilingual`` extra) when the embedder is
            English-only (MiniLM), else none. An existing store keeps the spaces it declares; a space it lacks that is given here (or
            is the default) is declared as being added: every write carries it from then on, and
            ``agently-vecmem reindex --add-space NAME`` fills the records written before.

    Raises:
        EmbedderMismatchError: the collection was created with another embedding model or dimension.
        WorkspaceLockedError: another process writes this embedded path.

    Example:
        >>> ws = ChromaWorkspace("./mem", embedder=my_embedder)            # doctest: +SKIP
        >>> ws.put(MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="User likes tea"))  # doctest: +SKIP
        >>> ws.search("what drink?", scope=Scope.global_memory(), k=3)       # doctest: +SKIP
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        embedder: Embedder | None = None,
        host: str | None = None,
        port: int = 8000,
        ssl: bool = False,
        headers: Mapping[str, str] | None = None,
        client: Any | None = None,
        collection: str = "vecmem_memory",
        read_only: bool = False,
        exact_index: bool | None = None,
        timeout: float = 30.0,
        cache_bytes: int | None = None,
        snapshots: bool | str | os.PathLike[str] | None = None,
        snapshot_min_records: int = DEFAULT_MIN_RECORDS,
        spaces: Sequence[str] | None = None,
    ) -> None:
        import chromadb

        if embedder is None:
            from ..embedders import default_embedder

            embedder = default_embedder()
        self.embedder = embedder
        self.read_only = read_only
        #: The user whose memory this workspace reads and writes (:meth:`for_user`).
        self.user_id = DEFAULT_USER
        self._shared = _Shared()
        self._lock = threading.RLock()
        self._views = ViewCache(default_budget() if cache_bytes is None else cache_bytes)
        self._block = threading.local()  # per thread: inside consistent(), and whether it checked already
        self._chroma = ChromaCalls(f"{host}:{port}" if host is not None else None)
        if client is not None:
            self.mode = "client"
            self.path = None
        elif host is not None:
            self.mode = "server"
            self.path = None
            client = connect_server(host, port, ssl=ssl, headers=headers, timeout=timeout)
        else:
            self.mode = "embedded"
            self.path = str(Path(path or ".vecmem/chroma"))
            if not read_only:
                self._shared.lock_key = acquire_writer_lock(self.path)
            try:
                client = chromadb.PersistentClient(path=self.path)
            except Exception:
                self._release()
                raise
        self.client = client
        self.exact_index = True if exact_index is None else bool(exact_index)
        self.collection_name = collection
        self._changes: ChangeLog | None = None
        self._dirs: Directories | None = None
        self._snaps: SnapshotFiles | None = None
        try:
            self._io = CollectionIO(self._open_collection(collection), self._chroma, MAX_BATCH)
            self._dirs = Directories(self._io.collection, self._chroma, int(self.embedder.dim))
            self._upgrade_schema()
            self._open_spaces(spaces)
            if self.mode != "embedded":  # other processes may write: leave and check change markers
                self._changes = ChangeLog(self._open_log(collection), self._chroma)
            self._snaps = self._snapshot_files(snapshots, snapshot_min_records)
        except Exception:
            self._release()
            raise

    # ------------------------------------------------------------------ lifecycle
    def _open_collection(self, name: str) -> Any:
        want = {
            "vecmem_schema": SCHEMA_VERSION,
            "vecmem_embedder_model": self.embedder.model_id,
            "vecmem_embedder_dim": int(self.embedder.dim),
        }
        try:
            col = self.client.get_or_create_collection(
                name, metadata=want, configuration={"hnsw": {"space": "cosine"}}, embedding_function=None
            )
        except Exception as e:
            raise WorkspaceError(f"cannot open Chroma collection {name!r}: {e}") from e
        check_embedder(name, dict(col.metadata or {}), want)
        return col

    def _upgrade_schema(self) -> None:
        """Bring a store written before users and scope directories existed to the current schema: every
        record gets the default user, every scope its directory (one pass over the collection, once;
        idempotent; a store opened read-only is read as it is, with filters)."""
        have = dict(self._io.collection.metadata or {})
        if int(have.get("vecmem_schema", 1)) >= SCHEMA_VERSION:
            return
        if self.read_only:
            self._shared.legacy = True
            self._dirs = None
            return
        res = self._io.get_where("read of the records to migrate", None, ["metadatas"])
        todo = {rid: meta for rid, meta in zip(res["ids"], res["metadatas"], strict=True)
                if "vecmem_scope" not in (meta or {}) and not is_directory_row(meta)}
        ids = list(todo)
        for start in range(0, len(ids), MAX_BATCH):
            chunk = ids[start:start + MAX_BATCH]
            metas = []
            for rid in chunk:
                meta = todo[rid] or {}
                user = meta.get("user_id", DEFAULT_USER)
                metas.append({"user_id": user, "vecmem_scope": scope_key(
                    user, meta.get("collection", "memory"), meta.get("memory_scope", ""), meta.get("session_id"),
                    meta.get("status", "active"))})
            self._chroma("migration to users", self._io.collection.update, ids=chunk, metadatas=metas)
            for rid, meta in zip(chunk, metas, strict=True):
                todo[rid] = {**(todo[rid] or {}), **meta}
        if self._dirs is not None:
            every = {rid: meta or {} for rid, meta in zip(res["ids"], res["metadatas"], strict=True)}
            every.update(todo)
            scopes = self._dirs.backfill(every.items(), MAX_BATCH)
            logger.info("%s: listed %d scopes in their directories", self.collection_name, scopes)
        self._chroma("migration to users", self._io.collection.modify,
                     metadata={**have, "vecmem_schema": SCHEMA_VERSION})
        logger.info("%s: %d records written before users existed now belong to user %r", self.collection_name,
                    len(ids), DEFAULT_USER)

    def _open_spaces(self, requested: Sequence[str] | None) -> None:
        """The store's vector spaces (:mod:`.vector_spaces`): declared ones, plus the requested (or default) ones
        it lacks (:meth:`_add_spaces`; a default one only when it can be computed here)."""
        self._spaces = StoreSpaces.resolve(self.collection_name, StoreSpaces.read(self._io.collection.metadata or {}),
                                           read_only=self.read_only)
        wanted = tuple(requested) if requested is not None else default_space_names(self.embedder.model_id)
        missing = [name for name in wanted if name not in self._spaces.declared]
        if requested is not None:
            _check_computable(missing)
        missing = [name for name in missing if space_available(name)]
        if missing and not self.read_only:
            self._add_spaces(missing)

    def _add_spaces(self, names: Sequence[str]) -> None:
        """Declare spaces the store lacks: complete on an empty store, as being added on one with records (every
        write carries them from now on; ``agently-vecmem reindex`` fills the records written before).

        Raises:
            ConfigurationError: a space is unknown or its model is not installed.
        """
        _check_computable(names)
        empty = self._chroma("count of records", self._io.collection.count) == 0
        self._declare_spaces({name: StoreSpaces.declare(name, complete=empty) for name in names})
        if not empty:
            logger.info("%s: vector space(s) %s added; records written before lack them until `agently-vecmem "
                        "reindex STORE --add-space NAME`", self.collection_name, list(names))

    def _declare_spaces(self, changes: Mapping[str, DeclaredSpace]) -> None:
        """Write ``changes`` into the declarations in the collection's metadata, and use them (in place: every
        workspace bound from this one shares its spaces)."""
        have = self._store_metadata()  # as the store has it now: another process may have declared meanwhile
        declared = {**StoreSpaces.read(have), **changes}
        self._chroma("declaration of vector spaces", self._io.collection.modify,
                     metadata={**have, SPACES_KEY: StoreSpaces.dump(declared)})
        self._spaces.adopt(self.collection_name, changes)

    def _store_metadata(self) -> dict[str, Any]:
        """The collection's metadata read from the store now (the opened collection keeps what it read then)."""
        if self.mode == "embedded":  # one process writes an embedded store: what it holds is current
            return dict(self._io.collection.metadata or {})
        col = self._chroma("read of the store's metadata", self.client.get_collection, self.collection_name,
                           embedding_function=None)
        return dict(col.metadata or {})

    def _refresh_spaces(self) -> None:
        """On a shared store, take the vector spaces other processes declared since the last read (at most every
        :data:`SPACES_REFRESH_SECONDS`); a space that became complete drops the cached scopes (read without it)."""
        if self._changes is None or not self._spaces.due(SPACES_REFRESH_SECONDS):
            return
        if self._spaces.refresh(self.collection_name, StoreSpaces.read(self._store_metadata())):
            with self._lock:
                self._views.clear()

    @property
    def vector_spaces(self) -> dict[str, str]:
        """The store's named vector spaces: ``name -> model id`` (:mod:`agently_vecmem.search.spaces`)."""
        return self._spaces.models()

    def space_status(self) -> dict[str, dict[str, Any]]:
        """Each declared space's model, dimension, whether every record has it (``complete``) and whether this
        process computes it (``computed``)."""
        return {name: {"model": d.model, "dim": d.dim, "complete": d.complete,
                       "computed": name in self._spaces.embedders}
                for name, d in self._spaces.declared.items()}

    def _open_log(self, name: str) -> Any:
        log_name = log_collection_name(name)
        return self._chroma(f"opening of {log_name!r}", self.client.get_or_create_collection, log_name,
                            metadata={"vecmem_change_log": 1}, embedding_function=None)

    def _release(self) -> None:
        if self._shared.lock_key is not None:
            release_writer_lock(self._shared.lock_key)
            self._shared.lock_key = None

    def close(self) -> None:
        """Save the big scopes this process changed to their persisted snapshots (:mod:`.snapshots`), release
        the writer lock and drop the in-memory snapshots. The Workspace is unusable after."""
        with self._lock:
            if self._shared.closed:
                return
            self._save_changed_snapshots()
            self._shared.closed = True
            self._views.clear()
            self._release()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (on this workspace or one bound to the same store)."""
        return self._shared.closed

    def __enter__(self) -> ChromaWorkspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self.path if self.mode == "embedded" else self.mode
        user = "" if self.user_id == DEFAULT_USER else f", user={self.user_id!r}"
        return f"ChromaWorkspace({where!r}, collection={self.collection_name!r}, embedder={self.embedder!r}{user})"

    def info(self) -> dict[str, Any]:
        """Mode, location, collection, embedder, the bound user and its record count."""
        return {
            "mode": self.mode,
            "path": self.path,
            "collection": self.collection_name,
            "embedder_model": self.embedder.model_id,
            "dim": self.embedder.dim,
            "user_id": self.user_id,
            "count": self.count(scope=ALL_SCOPES),
            "cache": self.cache_stats(),
            "spaces": self.space_status(),
            "snapshots": None if self._snaps is None else {"directory": str(self._snaps.directory),
                                                          "min_records": self._snaps.min_records,
                                                          **self._snaps.stats},
        }

    def cache_stats(self) -> dict[str, int]:
        """The scope snapshots this process keeps for this store (shared by every user bound from it):
        ``scopes``, ``bytes``, ``budget_bytes``, ``hits``, ``misses``, ``evictions``."""
        with self._lock:
            return self._views.stats()

    # ------------------------------------------------------------------ users
    def for_user(self, user_id: str) -> ChromaWorkspace:
        """This store bound to one user: its reads, searches, views, counts and exports see that user's
        records only, and everything it writes belongs to that user. Use it wherever a workspace is used
        (VecMemory, Session, ingest, export, the Agently adapters).

        The bound workspace shares this one's connection, lock and cached snapshots (one process serves
        many users from one store); closing either closes both. A workspace not bound to a user serves
        :data:`~agently_vecmem.records.DEFAULT_USER`, the user of every record written before users existed.

        Raises:
            ConfigurationError: ``user_id`` is empty, too long or not a string, or this workspace is
                already bound to another user (bind users from the unbound workspace).
        """
        user_id = check_user_id(user_id)
        if self.user_id != DEFAULT_USER and user_id != self.user_id:
            raise ConfigurationError(
                f"this workspace is bound to user {self.user_id!r}; bind user {user_id!r} from the unbound "
                "workspace instead"
            )
        bound = copy.copy(self)
        bound.user_id = user_id
        return bound

    def user_counts(self) -> dict[str, int]:
        """Records per user in the whole collection, every scope and status (an administrator's read)."""
        self._check_open()
        metas = self._io.get_where("count per user", None, ["metadatas"])["metadatas"]
        counts: dict[str, int] = {}
        for meta in metas:
            if is_directory_row(meta):
                continue
            user = (meta or {}).get("user_id") or DEFAULT_USER
            counts[user] = counts.get(user, 0) + 1
        return dict(sorted(counts.items()))

    def _bind(self, scope: Scope) -> Scope:
        """``scope`` restricted to this workspace's user (the hard user filter of every read)."""
        _require_scope(scope)
        if scope.user_id is not None and scope.user_id != self.user_id:
            raise ScopeAccessError(
                f"this workspace serves user {self.user_id!r}; it cannot read a scope of user {scope.user_id!r}"
            )
        return scope.for_user(None if self._unfiltered() else self.user_id)

    def _unfiltered(self) -> bool:
        """A store written before users existed, opened read-only (not migrated): every record is the
        default user's, and none carries a user id to filter on."""
        return self._shared.legacy and self.user_id == DEFAULT_USER

    def _owns(self, meta: Mapping[str, Any] | None) -> bool:
        """Whether the record with Chroma metadata ``meta`` belongs to this workspace's user."""
        return self._unfiltered() or ((meta or {}).get("user_id") or DEFAULT_USER) == self.user_id

    # ------------------------------------------------------------------ writes
    def _check_open(self) -> None:
        if self._shared.closed:
            raise WorkspaceError("this Workspace is closed; open a new ChromaWorkspace")

    def _check_writable(self) -> None:
        self._check_open()
        if self.read_only:
            raise WorkspaceError("this Workspace was opened read_only=True; open it without to write")

    def _vector_fields(self) -> dict[str, Any]:
        return {"backend": "chroma", "model": self.embedder.model_id, "dim": self.embedder.dim,
                "space": "cosine", "available": True}

    def _check_vectors(self, vectors: Any, n: int, what: str = "vectors") -> np.ndarray:
        return check_vectors(vectors, n, self.embedder.dim, self.embedder.model_id, what)

    def put(
        self,
        records: MemoryRecord | Mapping[str, Any] | Sequence[MemoryRecord | Mapping[str, Any]],
        *,
        vectors: Any | None = None,
        space_vectors: Mapping[str, Any] | None = None,
        progress: bool = False,
    ) -> list[MemoryRecord]:
        """Insert or fully replace records (upsert by id). Every record is validated and embedded before
        anything is written, so bad input writes nothing.

        Args:
            records: one record or a sequence (records or dicts of the record contract).
            vectors: optional precomputed vectors, shape ``(n, dim)``; otherwise the embedder is used.
                Given vectors mean the records' text was embedded before (a rewrite): their stored vectors in
                the store's named spaces are kept when the text is the same, the others are computed.
            space_vectors: optional precomputed vectors of named spaces (``name -> (n, dim)``, e.g. from an
                export); a space not given is computed.
            progress: show a progress bar over batches.

        Returns:
            The stored records (with ``vector_index`` filled in).

        Raises:
            RecordValidationError: a record or vector is invalid (nothing was written).
            WorkspaceError: Chroma failed a write. A put is all-or-nothing at any size: when a batch after
                the first fails, what the earlier batches wrote is rolled back (previous versions restored,
                new records deleted) before this is raised.
        """
        self._check_writable()
        items = [records] if isinstance(records, (MemoryRecord, Mapping)) else list(records)
        # (in their stored form: what a read gives, and small in a cached scope)
        parsed = [stored_form(self._stamp(r)) for r in parse_records(items, self._vector_fields())]
        ids = [r.id for r in parsed]
        if len(set(ids)) != len(ids):
            raise RecordValidationError("records: duplicate ids in one put")
        if not parsed:
            return []
        docs = [r.search_text() for r in parsed]  # stored and searched lexically (with the date, if any)
        texts = [r.document() for r in parsed]
        self._refresh_spaces()
        if vectors is None:
            vecs = self._check_vectors(self.embedder.embed_documents(texts), len(parsed), "embedder output")
        else:
            vecs = self._check_vectors(vectors, len(parsed))
        # Every space of the store, in the same rows: records whose text has vectors already (given vectors: a
        # rewrite) keep their stored ones; the others are embedded now, before anything is written.
        reuse: list[Any] = []
        if vectors is not None and self._spaces.embedders:
            stored = self._io.get_by_ids("read of stored vector spaces", ids, ["metadatas"])
            by_id = dict(zip(stored["ids"], stored["metadatas"], strict=True))
            reuse = [by_id.get(i) for i in ids]
        space_metas, space_vecs = self._spaces.encode(docs, reuse, space_vectors or {})  # (the date line too)
        metas = []
        for r, extra in zip(parsed, space_metas, strict=True):
            meta = {**r.to_chroma(), **extra}
            for key in _OPTIONAL_KEYS:  # upsert merges metadata; None removes a key that went away
                meta.setdefault(key, None)
            metas.append(meta)
        batches = range(0, len(parsed), MAX_BATCH)
        with self._lock:
            self._check_writable()
            existing = self._check_owner(ids)
            # Scope directories (.directory) list every record no later than it is written. New records (the
            # common write) go in one `add` with their entries; replacing records lists them first.
            entries = self._dirs.entries_for(parsed, existing) if self._dirs is not None else []
            # (together only while one call stays within Chroma's batch limit)
            together = bool(entries) and not existing and len(parsed) + len(entries) <= MAX_BATCH
            if entries and not together:
                self._dirs.add(entries)  # type: ignore[union-attr]
            op = self._changes.begin(ids) if self._changes is not None else None
            # One Chroma call is atomic; over several, keep what they replace to roll back on a failure.
            previous = self._io.rows_by_id(ids) if len(batches) > 1 else {}
            start = 0
            try:
                if together:
                    e_ids, e_vecs, e_metas, e_docs = self._dirs.rows(entries)  # type: ignore[union-attr]
                    self._io.collection.add(
                        ids=ids + e_ids, embeddings=np.vstack([vecs, np.asarray(e_vecs, dtype=np.float32)]),
                        metadatas=[{k: v for k, v in m.items() if v is not None} for m in metas] + e_metas,
                        documents=docs + e_docs,
                    )
                else:
                    for start in _progress(batches, len(batches), "storing records", progress):
                        end = start + MAX_BATCH
                        self._io.collection.upsert(
                            ids=ids[start:end], embeddings=vecs[start:end], metadatas=metas[start:end],
                            documents=docs[start:end],
                        )
            except Exception as e:
                error = self._chroma.translate(f"write of records {start}..{min(start + MAX_BATCH, len(ids))}", e)
                if start > 0:
                    self._roll_back(ids[: start + MAX_BATCH], metas, previous, error)
                self._commit_quietly(op, ids)
                raise error from e
            try:
                if together:  # an entry whose number another writer took is appended again
                    self._dirs.verify(entries)  # type: ignore[union-attr]
                if op is not None:
                    self._changes.commit(op, ids)  # type: ignore[union-attr]
            finally:  # the records are in Chroma even if the marker could not be written
                self._update_views(_Batch(parsed, docs, vecs, space_vecs),
                                   old_sessions={meta.get("session_id") for meta in existing.values()})
                if self._shared.written is not None:
                    self._count_written(parsed)
        logger.debug("stored %d records in %s", len(parsed), self.collection_name)
        return parsed

    def _stamp(self, record: MemoryRecord) -> MemoryRecord:
        """``record`` as this workspace's user's (a record naming another user is refused)."""
        if record.user_id is None:
            return record.model_copy(update={"user_id": self.user_id})
        if record.user_id != self.user_id:
            raise RecordValidationError(
                f"record {record.id!r} belongs to user {record.user_id!r}, but this workspace is bound to user "
                f"{self.user_id!r}; nothing was written (write it through ws.for_user({record.user_id!r}))"
            )
        return record

    def _check_owner(self, ids: list[str]) -> dict[str, dict[str, Any]]:
        """The stored metadata of the ids that exist (what the put replaces); refuses a put that would replace
        records of another user (ids are global to the collection)."""
        res = self._io.get_by_ids("read of the owners of the records to replace", ids, ["metadatas"])
        found = {rid: dict(meta or {}) for rid, meta in zip(res["ids"], res["metadatas"], strict=True)}
        foreign = [rid for rid, meta in found.items() if not self._owns(meta) or is_directory_row(meta)]
        if foreign:
            raise RecordValidationError(
                f"records {foreign[:5]} exist and belong to another user than {self.user_id!r}; nothing was "
                "written (use new ids)"
            )
        return found

    def update(self, record_id: str, **changes: Any) -> MemoryRecord:
        """Change fields of one record (validated); the vector is recomputed when the text changes.

        Raises:
            RecordNotFoundError: no record has this id.
            RecordValidationError: the changed record is invalid, or ``id`` is changed.
        """
        self._check_writable()
        if "id" in changes and changes["id"] != record_id:
            raise RecordValidationError("id: cannot be changed by update; put a new record instead")
        old = self.get(record_id)
        data = old.model_dump()
        if "memory_scope" in changes and "kind" not in changes and old.collection == "memory":
            data.pop("kind")  # recomputed from the new scope
        data.update(changes)
        data["updated_at"] = time.time()
        new = parse_record(data)
        if new.document() == old.document():
            return self.put(new, vectors=self.get_vectors([record_id]))[0]
        return self.put(new)[0]

    def delete(self, ids: str | Sequence[str], *, hard: bool = False) -> int:
        """Delete records. Soft (default): status becomes ``deleted`` and the record leaves every read
        except explicit history reads. Hard: erased as :meth:`forget` erases (removed from Chroma, from the
        store's files when embedded, and named in the erasure audit), without following version chains.
        Returns how many existed."""
        self._check_writable()
        ids = [ids] if isinstance(ids, str) else list(dict.fromkeys(ids))
        existing = self.get_many(ids, include_inactive=True)
        if not existing:
            return 0
        if hard:
            erasure.forget(self, records=existing, by="ids")
        else:
            now = time.time()
            changed = [r.model_copy(update={"status": "deleted", "updated_at": now}) for r in existing]
            self.put(changed, vectors=self.get_vectors([r.id for r in existing]))
        return len(existing)

    def forget(self, *, ids: str | Sequence[str] | None = None, session: str | None = None,
               everything: bool = False, dry_run: bool = False) -> erasure.ForgetReport:
        """Erase records of this workspace's user for good: no read of any process returns them once this
        returns, and on an embedded store no file of the store holds their text any more (see
        :mod:`.erasure`). Exactly one of:

        Args:
            ids: these records, with the other versions of each (``supersedes``/``superseded_by`` links
                inside the record's scope). Ids of other users' records are ignored.
            session: every record of the session: its SESSION_MEMORY (any status), its raw turns (also those
                kept in GLOBAL_MEMORY), its import progress, and their versions. An unknown session erases
                nothing.
            everything: every record of the user.
            dry_run: erase nothing; the report says what would be erased (also on a read-only workspace).

        Returns:
            Ids and counts of what was erased (never content). Each forget is recorded in the erasure audit
            (:meth:`erasure_audit`); one interrupted earlier (a killed process) is completed by the next.

        Raises:
            ConfigurationError: not exactly one of the three.
            WorkspaceError: the store failed or is unreachable (nothing is reported erased; call it again),
                or this workspace is read-only.

        On a Chroma server the records are gone from every read, but the server's files can only be cleaned
        on its host: ``agently-vecmem gc --server-path DIR`` (:func:`.erasure.purge_store_files`).
        """
        return erasure.forget(self, ids=[ids] if isinstance(ids, str) else ids, session=session,
                              everything=everything, dry_run=dry_run)

    def apply_retention(self, *, session_memory_days: float | None = None, raw_turn_days: float | None = None,
                        now: float | None = None) -> erasure.ForgetReport:
        """Erase (as :meth:`forget`) this user's SESSION_MEMORY records and raw turns older than the given
        number of days (by ``created_at``; None keeps that kind). See :func:`.erasure.apply_retention`."""
        return erasure.apply_retention(self, session_memory_days=session_memory_days, raw_turn_days=raw_turn_days,
                                       now=now)

    def erasure_audit(self, *, all_users: bool = False) -> list[erasure.AuditEntry]:
        """The erasure audit (oldest first): every forget, hard delete and retention run of this user (of
        every user with ``all_users``), with ids, counts, times and state; never content."""
        self._check_open()
        return self._erasure_audit().entries(user_id=None if all_users else self.user_id)

    def _erasure_audit(self) -> erasure.ErasureAudit:
        if self._shared.audit is None:
            name = erasure.audit_collection_name(self.collection_name)
            if self.read_only:  # never create anything in a store opened read-only
                names = {getattr(c, "name", c) for c in self._chroma("listing of collections",
                                                                     self.client.list_collections)}
                if name not in names:
                    return erasure.ErasureAudit(None, self._chroma)
                col = self._chroma(f"opening of {name!r}", self.client.get_collection, name, embedding_function=None)
            else:
                col = self._chroma(f"opening of {name!r}", self.client.get_or_create_collection, name,
                                   metadata={"vecmem_erasure_audit": 1}, embedding_function=None)
            self._shared.audit = erasure.ErasureAudit(col, self._chroma)
        return self._shared.audit

    def _sqlite_path(self) -> str | None:
        """The SQLite file of an embedded store (this process is its only writer); None otherwise."""
        return os.path.join(self.path, "chroma.sqlite3") if self.mode == "embedded" and self.path else None

    def _erase(self, ids: Sequence[str]) -> int:
        """Remove records from Chroma with the change markers of a write (the hard delete). Returns how many
        ids were given (missing ones are no-ops)."""
        self._check_writable()
        gone = list(dict.fromkeys(ids))
        if not gone:
            return 0
        with self._lock:
            self._check_writable()
            op = self._changes.begin(gone) if self._changes is not None else None
            try:
                for start in range(0, len(gone), MAX_BATCH):
                    self._io.collection.delete(ids=gone[start:start + MAX_BATCH])
            except Exception as e:
                self._commit_quietly(op, gone)
                self._views.clear()  # some may be gone: reload from Chroma on the next read
                raise self._chroma.translate("delete", e) from e
            try:
                if op is not None:
                    self._changes.commit(op, gone)  # type: ignore[union-attr]
            finally:
                self._drop_from_views(set(gone))
                if self._snaps is not None:  # no file of this process keeps erased text
                    self._snaps.clear()
                    self._shared.snapshot_saved.clear()
        return len(gone)

    def _roll_back(self, touched: Sequence[str], metas: Sequence[Mapping[str, Any]],
                   previous: Mapping[str, Row], error: WorkspaceError) -> None:
        """Undo the earlier batches of a failed put. If that fails too, the cached views are dropped (the
        next read reloads them from Chroma) and ``error`` says so."""
        try:
            self._io.roll_back(touched, metas, previous)
        except Exception as e:  # noqa: BLE001 - reported through the original error
            self._views.clear()
            logger.error("rolling back a failed put of %d records failed: %s", len(touched), e)
            error.args = (f"{error.args[0]} Rolling back the earlier batches failed too ({type(e).__name__}: "
                          f"{e}); up to {len(touched)} records of this put may remain.",)

    def _commit_quietly(self, op: str | None, ids: Sequence[str]) -> None:
        """After a failed write: tell other processes to re-read ``ids`` if the server still answers (if not,
        they re-read them when the intent times out)."""
        if op is None:
            return
        try:
            self._changes.commit(op, ids)  # type: ignore[union-attr]
        except WorkspaceError as e:
            logger.warning("could not write the change marker after a failed write: %s", e)

    # ------------------------------------------------------------------ reads
    def get(self, record_id: str) -> MemoryRecord:
        """One record by id (any status). Raises :class:`RecordNotFoundError`."""
        found = self.get_many([record_id], include_inactive=True)
        if not found:
            raise RecordNotFoundError(f"no memory record with id {record_id!r} in {self.collection_name!r}")
        return found[0]

    def get_many(self, ids: Sequence[str], *, include_inactive: bool = False) -> list[MemoryRecord]:
        """Records by id, in the order asked; missing ids are skipped."""
        self._check_open()
        if isinstance(ids, str):
            ids = [ids]
        if not ids:
            return []
        # Chroma rejects duplicate ids in one get.
        res = self._io.get_by_ids("read of records", list(dict.fromkeys(ids)), ["metadatas", "documents"])
        by_id = {r.id: r for r, _, _ in decode_rows(res) if self._owns({"user_id": r.user_id})}
        out = [by_id[i] for i in ids if i in by_id]
        return out if include_inactive else [r for r in out if r.status == "active"]

    def get_vectors(self, ids: Sequence[str]) -> np.ndarray:
        """Stored vectors for ids (all must exist), shape ``(len(ids), dim)``."""
        self._check_open()
        res = self._io.get_by_ids("read of vectors", list(dict.fromkeys(ids)), ["metadatas", "embeddings"])
        by_id = {rid: vec for rid, meta, vec in zip(res["ids"], res["metadatas"], res["embeddings"], strict=True)
                 if self._owns(meta)}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise RecordNotFoundError(f"no vectors for ids {missing[:5]}")
        return np.asarray([by_id[i] for i in ids], dtype=np.float32)

    def scan(
        self,
        *,
        scope: Scope,
        where: Mapping[str, Any] | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[MemoryRecord]:
        """All records of a scope (plus optional narrowing conditions), oldest first.

        Args:
            scope: the hard scope (mandatory; pass :data:`ALL_SCOPES` to deliberately span all).
            where: extra conditions in the :mod:`agently_vecmem.filters` grammar.
            limit, offset: paging over the oldest-first order.
        """
        scope = self._bind(scope)
        self._check_open()
        res = self._io.get_where("scan", scope.where(where), ["metadatas", "documents"])
        records = sorted((r for r, _, _ in decode_rows(res)), key=record_order)
        end = None if limit is None else offset + limit
        return records[offset:end]

    def count(self, *, scope: Scope = ALL_SCOPES, where: Mapping[str, Any] | None = None) -> int:
        """Number of records in a scope (plus optional narrowing conditions)."""
        scope = self._bind(scope)
        self._check_open()
        clause = scope.where(where)
        if clause is None:
            return int(self._chroma("count", self._io.collection.count))
        return len(self._chroma("count", self._io.collection.get, where=clause, include=[])["ids"])

    def page(self, *, scope: Scope = ALL_SCOPES, where: Mapping[str, Any] | None = None, limit: int = 50,
             offset: int = 0) -> list[MemoryRecord]:
        """One page of a scope's records in storage order (the order they were first written), read with
        Chroma's own ``limit``/``offset``: a page costs the page, not the scope (unlike :meth:`scan`, which
        sorts the whole scope by creation time). For browsing large stores.

        Raises:
            ConfigurationError: ``limit`` is not positive or ``offset`` is negative.
        """
        scope = self._bind(scope)
        self._check_open()
        if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
            raise ConfigurationError("limit must be a positive integer")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ConfigurationError("offset must be a non-negative integer")
        res = self._chroma("page of records", self._io.collection.get, where=scope.where(where), limit=limit,
                           offset=offset, include=["metadatas", "documents"])
        return [r for r, _, _ in decode_rows(res)]

    def embed_query(self, query: str | np.ndarray) -> np.ndarray:
        """A query as a unit vector (text is embedded; a vector is checked and normalized)."""
        if isinstance(query, str):
            return self.embedder.embed_query(query)
        if type(query) is np.ndarray and query.dtype == np.float32 and query.shape == (self.embedder.dim,):
            # Fast path for the common case (several times cheaper): a NaN/inf entry makes the
            # squared norm NaN/inf and a zero vector makes it 0, so those fall through to the full
            # checks below with their precise error messages.
            sq = float(query.dot(query))
            if abs(sq - 1.0) < 1e-6:  # already unit length (the embedder's output): use it as is
                return query
            if 0.0 < sq < math.inf:
                return query / np.float32(math.sqrt(sq))
        return self._check_vectors(np.asarray(query)[None, :], 1)[0]

    def search(
        self,
        query: str | np.ndarray,
        *,
        scope: Scope,
        k: int = 10,
        where: Mapping[str, Any] | None = None,
    ) -> list[Hit]:
        """Dense top-``k`` inside a scope, by cosine similarity.

        With ``exact_index`` (the default, embedded and server alike) and no ``where``, the answer comes from
        the exact in-memory snapshot of the scope (kept fresh across processes on a server); with a ``where``
        or ``exact_index=False``, from Chroma's filtered HNSW query.
        """
        scope = self._bind(scope)
        self._check_open()
        if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
            raise ConfigurationError("k must be a positive integer")
        qvec = self.embed_query(query)
        if self.exact_index and not where:
            return self.view(scope).search(qvec, k)
        clause = scope.where(where)
        res = self._chroma("query", self._io.collection.query, query_embeddings=[qvec], n_results=k, where=clause,
                           include=["metadatas", "distances"])
        hits = []
        for rid, meta, dist in zip(res["ids"][0], res["metadatas"][0], res["distances"][0], strict=True):
            hits.append(Hit(MemoryRecord.from_chroma(rid, meta), 1.0 - float(dist)))
        return hits

    # ------------------------------------------------------------------ exact scope snapshots
    def view(self, scope: Scope) -> ScopeView:
        """An exact snapshot of a scope's records and vectors, cached and kept current.

        On a server (or a client passed in) this first checks the change markers other processes leave
        (one point read) and applies their changes incrementally, so it reflects every write acknowledged
        anywhere before the call. With ``exact_index=False`` it reads the scope whole from Chroma instead.
        """
        return self.views(scope)[scope.key]

    @contextlib.contextmanager
    def consistent(self) -> Iterator[ChromaWorkspace]:
        """Reads of this thread inside the block share ONE freshness check (the first ``view``/``search``):
        one change-head read per call instead of one per scope, and one consistent state of every scope.
        Writes made inside the block are still seen at once (they update the snapshots directly).

        Example:
            >>> with ws.consistent():                                   # doctest: +SKIP
            ...     g, s = ws.view(Scope.global_memory()), ws.view(Scope.session_memory("s1"))
        """
        block = self._block
        depth = getattr(block, "depth", 0)
        if depth == 0:
            block.checked = False
            # Scopes read in the block that the cache did not keep (a budget smaller than them, or evicted
            # meanwhile): reused for the rest of the block instead of read again (newer), kept current with
            # this thread's own writes.
            block.pinned = {}
        block.depth = depth + 1
        try:
            yield self
        finally:
            block.depth = depth
            if depth == 0:
                del block.checked, block.pinned

    def views(self, *scopes: Scope) -> dict[tuple[Any, ...], ScopeView]:
        """Snapshots of several scopes (``scope.key -> view``) from ONE freshness check: what a retrieval over
        the global and the session scope should use on a server (one change-head read, not one per scope)."""
        bound: list[tuple[tuple[Any, ...], Scope]] = []  # the caller's key, the scope bound to the user
        for scope in scopes:
            user_scope = self._bind(scope)  # validates first: a non-Scope is a ScopeError, not an AttributeError
            bound.append((scope.key, user_scope))
        self._check_open()
        unique = {scope.key: scope for _, scope in bound}  # each bound scope once
        if not self.exact_index:
            read = dict(zip(unique, self._load_views(list(unique.values())), strict=True))
            return {key: read[scope.key] for key, scope in bound}
        if scopes and not getattr(self._block, "checked", False):
            self._refresh_spaces()
        # Built under the lock: a write between Chroma's read and caching would leave a stale view.
        with self._lock:
            self._check_open()
            if self._changes is not None and scopes and not getattr(self._block, "checked", False):
                self._apply_changes(self._changes.poll())
                if getattr(self._block, "depth", 0):
                    self._block.checked = True
            pinned = getattr(self._block, "pinned", None)
            held: dict[tuple[Any, ...], ScopeView] = {}
            for key in unique:
                cached = self._views.get(key)
                if cached is None and pinned is not None:
                    cached = pinned.get(key)
                if cached is not None:
                    held[key] = cached
            missing = [scope for key, scope in unique.items() if key not in held]
            for scope, loaded in zip(missing, self._load_views(missing), strict=True):
                self._views.add(scope.key, loaded)
                held[scope.key] = loaded
            if pinned is not None:
                pinned.update(held)
            return {key: held[scope.key] for key, scope in bound}

    def _load_views(self, scopes: Sequence[Scope]) -> list[ScopeView]:
        """:meth:`_load_view` of each scope; of several at once, in threads (Chroma's clients, file reads,
        hashing and numpy release the GIL). A worker's first request reads the GLOBAL scope and a session's
        (``VecMemory`` asks for them in one :meth:`views` call): an embedded worker then loads GLOBAL's snapshot
        while Chroma's first read loads the collection's HNSW index (``benchmarks/RESULTS.md``, "A request's
        unseen scopes at once")."""
        if len(scopes) < 2:
            return [self._load_view(scope) for scope in scopes]
        with ThreadPoolExecutor(min(len(scopes), _LOAD_THREADS), thread_name_prefix="vecmem-load") as pool:
            return list(pool.map(self._load_view, scopes))

    def _apply_changes(self, changes: Changes) -> None:
        """Bring the cached views up to date with what other processes wrote (under the lock)."""
        if not changes:
            return
        if changes.reload:
            if self._views:
                logger.debug("reloading %d cached scopes of %s: %s", len(self._views), self.collection_name,
                             changes.reason)
            self._views.clear()
            return
        if not self._views:
            return
        ids = sorted(changes.ids)
        found = self._batch(self._io.get_by_ids("read of changed records", ids, _ROW_FIELDS), "changed records")
        gone = set(ids) - {r.id for r in found.records}
        if found.records:
            self._update_views(found)
        if gone:
            self._drop_from_views(gone)

    def _batch(self, result: Mapping[str, Any], what: str, *, ordered: bool = False) -> _Batch:
        """Decode a ``collection.get`` result of whole rows (``_ROW_FIELDS``), in snapshot order when ``ordered``."""
        return self._decoded(iter([result]), what, ordered=ordered)

    def _decoded(self, chunks: Iterator[Mapping[str, Any]], what: str, *, ordered: bool = False,
                 clause: Mapping[str, Any] | None = None) -> _Batch:
        """Decode ``collection.get`` results of whole rows (``_ROW_FIELDS``) chunk by chunk, keeping the rows
        whose metadata match ``clause`` (all when None), in snapshot order when ``ordered``. Of a chunk's raw
        rows only the records and documents are kept, and the vectors of every space, written into one array
        per space as they come (:class:`RowBuffer`): a 1M-record scope read whole held ~8.5 GB of raw rows at
        once, and, read in chunks, its vectors twice until the last chunk."""
        records: list[MemoryRecord] = []
        documents: list[str] = []
        vectors = RowBuffer(self.embedder.dim)
        spaces = {name: RowBuffer(space.dim) for name, space in self._spaces.computed().items()}
        lacking = dict.fromkeys(spaces, 0)
        for res in chunks:
            if clause is not None:
                keep = [i for i, meta in enumerate(res["metadatas"]) if matches(clause, meta or {})]
                res = {key: [res[key][i] for i in keep] for key in ("ids", *_ROW_FIELDS)}
            rows = list(decode_rows(res))
            texts = [row[1] for row in rows]
            records += [row[0] for row in rows]
            documents += texts
            vectors.append(np.asarray([row[2] for row in rows], dtype=np.float32).reshape(len(rows), self.embedder.dim))
            del rows
            for name, (block, missing) in self._spaces.rows_of(res["metadatas"], texts).items():
                spaces[name].append(block)
                lacking[name] += missing
        vecs = vectors.done()
        space_rows = {name: (buffer.done(), lacking[name]) for name, buffer in spaces.items()}
        if ordered:
            order = sorted(range(len(records)), key=lambda i: record_order(records[i]))
            if any(i != j for i, j in enumerate(order)):
                records, documents = [records[i] for i in order], [documents[i] for i in order]
                for array in (vecs, *(rows for rows, _ in space_rows.values())):
                    permute_rows(array, order)
        return _Batch(records, documents, vecs, self._spaces.complete(space_rows, len(records), what))

    def _listed_rows(self, scope: Scope) -> _Batch | None:
        """The scope's rows read by id through its directory (:mod:`.directory`): a cost that does not grow
        with the collection. None when the scope has no usable directory (read it with a filter)."""
        if self._dirs is None or scope.user_id is None or scope.memory_scope is None or scope.collection is None:
            return None
        ids = self._dirs.ids(directory_key(scope.user_id, scope.collection, scope.memory_scope, scope.session_id))
        if ids is None:
            return None
        return self._decoded(self._io.chunks_by_ids("read of a scope", ids, _ROW_FIELDS), repr(scope), ordered=True,
                             clause=scope.where())

    def _scope_rows(self, scope: Scope, what: str) -> _Batch:
        """Every row of the scope from Chroma, in snapshot order."""
        return self._decoded(self._io.chunks_where(what, scope.where(), _ROW_FIELDS), repr(scope), ordered=True)

    def _load_view(self, scope: Scope, *, remap: bool = True) -> ScopeView:
        """The scope from its persisted snapshot, else read from Chroma (and then snapshotted when big enough,
        and, with ``remap``, served from the file just written: its records stay encoded and its rows mapped,
        shared with the machine's other workers, and the decoded read is freed: ~3 KB per record)."""
        snaps = self._snaps if self.exact_index else None
        if snaps is not None:
            view = self._snapshot_view(snaps, scope)
            if view is not None:
                return view
        rows = self._listed_rows(scope)
        if rows is None:
            rows = self._scope_rows(scope, "read of a scope")
        view = ScopeView(scope, tuple(rows.records), rows.vectors, tuple(rows.documents), self._shared.version,
                         spaces=rows.spaces)
        if snaps is not None and len(view) >= snaps.min_records and self._saves_snapshots():
            token = self._snapshot_token()
            if token is not None and self._save_snapshot(snaps, view, token) and remap:
                served = self._snapshot_view(snaps, scope)
                if served is not None:
                    del rows, view  # the decoded read, and the C heap's pages it leaves free
                    release_freed_memory()
                    return served
        if len(view) > MAX_BATCH:  # read in chunks: their freed pages stay with the process (~250 MB at 10k)
            del rows
            release_freed_memory()
        return view

    # ------------------------------------------------------------------ persisted snapshots
    def _snapshot_files(self, setting: bool | str | os.PathLike[str] | None, min_records: int) -> SnapshotFiles | None:
        if isinstance(min_records, bool) or not isinstance(min_records, int) or min_records < 1:
            raise ConfigurationError(f"snapshot_min_records must be a positive integer, got {min_records!r}")
        if setting is False or (setting is None and self.mode == "client"):
            return None
        col = self._io.collection
        if setting is None or setting is True:
            root = Path(self.path) / "vecmem_snapshots" if self.path is not None else default_snapshot_root()
        else:
            root = Path(setting)
        identity = {"collection": str(col.id), "model": self.embedder.model_id, "dim": int(self.embedder.dim)}
        snaps = SnapshotFiles(root / str(col.id), identity, min_records)
        self._shared.snapshot_saved = {}
        self._shared.written = {}
        atexit.register(_save_at_exit, weakref.ref(self))
        return snaps

    def _saves_snapshots(self) -> bool:
        """Whether this process may write snapshots: it can vouch that what it holds is current as of its token
        (under the lock). A server reader can: its token is its last change-log read, taken before any scope it
        holds was read. An embedded store opened read-only cannot: another process may write while it reads."""
        return self._snaps is not None and self.exact_index and not (self.mode == "embedded" and self.read_only)

    def _snapshot_token(self) -> dict[str, Any] | None:
        """The freshness token of what the cached views hold now (under the lock): the change-log position on
        a server, the store's write sequence when embedded (this process, holding the writer lock, is then
        its only writer)."""
        if self._changes is not None:
            return self._changes.position()
        return store_sequence(self.path) if self.mode == "embedded" and self.path else None

    def _snapshot_view(self, snaps: SnapshotFiles, scope: Scope) -> ScopeView | None:
        """The scope from its persisted snapshot, caught up with what was written since; None when there is
        no usable one (then it is read from Chroma)."""
        loaded = snaps.load(scope.key)
        if loaded is None:
            return None
        token = loaded.token
        if token.get("kind") == "seq":
            current = store_sequence(self.path) if self.mode == "embedded" and self.path else None
            changed: frozenset[str] | None = frozenset() if current is not None and current == token else None
        else:
            changed = self._changes.changed_since(token) if self._changes is not None else None
        if changed is None:
            logger.debug("the snapshot of %r is older than what can be caught up: reading it from Chroma", scope)
            return None
        spaces = self._spaces.declared
        if any(spaces[name].complete and name not in loaded.spaces for name in self._spaces.embedders) or any(
                name not in spaces or spaces[name].model != model for name, (model, _) in loaded.spaces.items()):
            logger.debug("the snapshot of %r has other vector spaces than the store: reading it from Chroma", scope)
            return None
        version = self._shared.version
        view = ScopeView(scope, loaded.records, loaded.vectors, loaded.documents, version,
                         spaces={name: vecs for name, (_, vecs) in loaded.spaces.items()}, ids=loaded.ids,
                         in_place=True)
        view.derived.update(loaded.derived)
        if loaded.sketch is not None:
            view.adopt_sketch(loaded.sketch)
        if changed:
            now = self._snapshot_token()
            ids = sorted(changed)
            found = self._batch(self._io.get_by_ids("read of records changed since a snapshot", ids, _ROW_FIELDS),
                                "records changed since a snapshot")
            gone = set(ids) - {r.id for r in found.records}
            if found.records:  # (a snapshot of no records is falsy: compare with None)
                new = found.applied_to(view, version)
                view = view if new is None else new
            if gone:
                new = view.without(gone, version)
                view = view if new is None else new
            if now is not None and self._saves_snapshots():
                self._save_snapshot(snaps, view, now)  # the next process catches up less (and erased text goes)
        else:  # the file holds exactly this view: nothing to save at close unless it changes
            self._shared.snapshot_saved[scope.key] = version
        logger.debug("%r loaded from its snapshot (%d records, %d re-read)", scope, len(view), len(changed))
        return view

    def _save_snapshot(self, snaps: SnapshotFiles, view: ScopeView, token: dict[str, Any]) -> bool:
        """Persist a big scope's snapshot (with what its first retrieval builds); whether it was written."""
        warm_view(view)  # what the first retrieval builds, saved with it
        models = self._spaces.models()
        everything = slice(None)  # the rows in record order, not kept on the view (after a removal: gathered)
        records, documents = view.columns()
        if snaps.save(view.scope.key, records, documents, view.rows(everything), view.derived, token,
                      {name: (models[name], view.rows(everything, name)) for name in view.spaces}, ids=view.ids,
                      sketch=view.built_sketch()):
            self._shared.snapshot_saved[view.scope.key] = view.version  # not the view: eviction must free it
            return True
        return False

    def _count_written(self, records: Sequence[MemoryRecord]) -> None:
        written = self._shared.written
        for r in records:
            scope = Scope(r.memory_scope, r.session_id if r.memory_scope == "SESSION_MEMORY" else None,
                          r.collection, user_id=r.user_id or DEFAULT_USER)
            entry = written.get(scope.key)
            written[scope.key] = (scope, 1 if entry is None else entry[1] + 1)

    def _save_changed_snapshots(self) -> None:
        """Save the big cached scopes whose snapshot is not what this process holds, and snapshot the big scopes
        it wrote without reading them (at close and exit)."""
        snaps = self._snaps
        if snaps is None or not self._saves_snapshots():
            return
        token = self._snapshot_token()
        if token is None:
            return
        saved = self._shared.snapshot_saved
        cached = set()
        for key, view in self._views.items():
            cached.add(key)
            if len(view) >= snaps.min_records and saved.get(key) != view.version:
                self._save_snapshot(snaps, view, token)
        for key, (scope, n) in list(self._shared.written.items()):
            if n >= snaps.min_records and key not in cached:
                self._load_view(scope, remap=False)  # read from Chroma (or an older snapshot caught up), saved
        self._shared.written.clear()

    def _update_views(self, rows: _Batch, old_sessions: Iterable[str | None] | None = None) -> None:
        """Bring the cached snapshots up to date with records just written.

        Only the snapshots the records can belong to are touched: their users' scopes that span sessions
        (GLOBAL_MEMORY, ...) and the scopes of the records' sessions, plus those of ``old_sessions`` (the
        sessions the records had before the write, which they may leave). Other processes' writes come
        without their previous session (``old_sessions=None``): then every cached session scope of the
        records' users that holds one of them is looked at too.
        """
        pinned = getattr(self._block, "pinned", None)
        if not self._views and not pinned:
            return
        self._shared.version += 1
        records = rows.records
        users = {r.user_id or DEFAULT_USER for r in records}
        sessions = {r.session_id for r in records}
        ids = [r.id for r in records]
        if old_sessions is not None:
            targets = self._views.routed(users, sessions | set(old_sessions))
        else:
            targets = [(key, view) for key, view in self._views.of_users(users)
                       if view.scope.session_id is None or view.scope.session_id in sessions
                       or self._holds(view, ids)]
        for key, view in targets:
            new = rows.applied_to(view, self._shared.version)
            if new is not None:
                self._views.replace(key, new)
        for key, view in list((pinned or {}).items()):  # this thread's consistent block (see consistent())
            if view.scope.user_id in users | {None} or self._holds(view, ids):
                new = rows.applied_to(view, self._shared.version)
                if new is not None:
                    pinned[key] = new  # type: ignore[index]

    def _drop_from_views(self, ids: set[str]) -> None:
        """Remove hard-deleted records from the cached snapshots that hold them (every snapshot is looked
        at: a hard delete names only ids; it is rare, unlike writes)."""
        self._shared.version += 1
        pinned = getattr(self._block, "pinned", None) or {}
        for key, view in [*self._views.items(), *pinned.items()]:
            if self._holds(view, ids):
                new = view.without(ids, self._shared.version)
                if new is not None:
                    if key in pinned:
                        pinned[key] = new
                    self._views.replace(key, new)

    @staticmethod
    def _holds(view: ScopeView, ids: Iterable[str]) -> bool:
        index = view.id_index()
        return any(i in index for i in ids)

    # ------------------------------------------------------------------ export / import
    def export_jsonl(self, path: str | os.PathLike[str], *, scope: Scope = ALL_SCOPES, progress: bool = False) -> int:
        """Write records with their vectors as JSON lines. The first line is a header naming the
        embedding model and dimension. Returns the number of records written."""
        scope = self._bind(scope)
        self._check_open()
        rows = self._scope_rows(scope, "export")
        models = self._spaces.models()
        return transfer.write_jsonl(path, rows.records, rows.vectors, embedder=self.embedder, version=SCHEMA_VERSION,
                                    spaces={name: (models[name], vecs) for name, vecs in rows.spaces.items()},
                                    progress=progress)

    def import_jsonl(
        self, path: str | os.PathLike[str], *, reembed: bool = False, progress: bool = False
    ) -> int:
        """Load records written by :meth:`export_jsonl`. The whole file is validated before anything
        is written.

        Args:
            reembed: embed the records with this Workspace's embedder instead of using the file's
                vectors; required when the file was made with another model.

        Raises:
            EmbedderMismatchError: the file's model differs and ``reembed`` is False.
            RecordValidationError: a line is not a valid record (its line number is given).
        """
        records, vectors, spaces = transfer.read_jsonl(path, embedder=self.embedder, reembed=reembed,
                                                       spaces=self._spaces.models())
        if not records:
            return 0
        if vectors is not None:
            return len(self.put(records, vectors=vectors, space_vectors=spaces, progress=progress))
        return sum(len(self.put(records[start:start + MAX_BATCH], progress=progress))
                   for start in range(0, len(records), MAX_BATCH))


def _check_computable(names: Iterable[str]) -> None:
    """Raise :class:`ConfigurationError` naming the spaces of ``names`` that cannot be computed here."""
    unknown = [name for name in names if not space_available(name)]
    if unknown:
        raise ConfigurationError(f"vector space(s) {unknown} cannot be computed here (unknown, or their model is "
                                 "not installed: pip install 'agently-vecmem[multilingual]')")


def _save_at_exit(ref: weakref.ref[ChromaWorkspace]) -> None:
    """At interpreter exit: save the big scopes an unclosed workspace changed (see :meth:`ChromaWorkspace.close`)."""
    ws = ref()
    if ws is None or ws.closed:
        return
    try:
        with ws._lock:
            ws._save_changed_snapshots()
    except Exception as e:  # noqa: BLE001 - never fail the interpreter's exit over a cache file
        logger.debug("saving snapshots at exit failed: %s", e)

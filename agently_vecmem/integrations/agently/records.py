"""Agently-shaped records on a :class:`~agently_vecmem.workspace.ChromaWorkspace` (shared by both host lines).

No ``agently`` import here. :class:`ChromaRecords` is the one storage layer behind the Agently adapters: the
``chroma`` Workspace provider of agently 4.1.3.9–4.1.4.1 and the ``chroma`` RecordStore backend provider of
4.1.4.2+. Every record lives in the ChromaWorkspace (its coherence, guards, locking and encoding apply):

* a ``put`` to collection ``"memory"`` with a memory payload (what AgentlyMemory writes) becomes a
  :class:`~agently_vecmem.records.MemoryRecord` — the very records VecMemory reads and writes. Scope keys
  other than ``memory_scope``/``session_id`` (an agent's default scope: ``agent_id``, ``project_id``, ...) are
  kept in ``provenance.workspace_scope`` and given back in ``ref.scope``.
* any other record (another collection, or a ``memory`` payload that is no valid memory) becomes a
  MemoryRecord of the internal collection ``agently_records`` (never retrieved as memory), id ``rec_<hex>``:
  the payload text in ``body.content`` (JSON text for dicts/lists), the Agently ref fields in
  ``provenance.agently_ref``. Payloads are limited like memory bodies (64,000 characters of JSON).

Filters follow Agently's local backend: ``id``/``path``/``collection``/``kind`` exact, ``scope.<k>`` and
``meta.<k>`` equality, other keys ignored — with one deliberate difference: a ``scope.session_id`` filter
does not hide ``GLOBAL_MEMORY`` records (global memory is global; 4.1.4.2+ adds the current session to every
search). A query is ranked with BM25 (any term matching), falling back to a case-insensitive substring match;
without a query the newest record comes first.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...embedders import resolve_embedder
from ...errors import (
    ConfigurationError,
    RecordContentNotFoundError,
    RecordNotFoundError,
    RecordValidationError,
    WorkspaceError,
)
from ...filters import Scope
from ...records import (
    KIND_BY_SCOPE,
    MEMORY_SCOPES,
    SCOPE_BY_KIND,
    MemoryRecord,
    iso_time,
    parse_record,
    path_slug,
    record_ref,
)

__all__ = [
    "GENERIC_COLLECTION",
    "ChromaRecords",
    "ChromaVectorIndex",
    "ChromaRecordsBackend",
    "record_from_put",
    "ref_matches",
    "shared_workspace",
    "close_shared",
    "chroma_store",
]

#: The ChromaWorkspace collection of non-memory Agently records (memory retrieval never reads it).
GENERIC_COLLECTION = "agently_records"
_EXACT_KEYS = ("id", "path", "collection", "kind")
_MEMORY_SCOPE_KEYS = ("memory_scope", "session_id")
_shared_lock = threading.Lock()
_shared: dict[tuple[Any, ...], Any] = {}


def _content_text(content: Any) -> tuple[str, str]:
    """(text, format) of a payload: strings stay text, bytes are decoded, anything else is JSON."""
    if isinstance(content, bytes):
        return content.decode("utf-8", errors="replace"), "text"
    if isinstance(content, str):
        return content, "text"
    return json.dumps(content, ensure_ascii=False, default=str), "json"


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


def ref_matches(ref: Mapping[str, Any], filters: Mapping[str, Any]) -> bool:
    """Agently's local-backend filter semantics over one ref (see the module docstring)."""
    for key in _EXACT_KEYS:
        want = filters.get(key)
        if want is not None and str(ref.get(key)) != str(want):
            return False
    scope = ref.get("scope") or {}
    is_global_memory = ref.get("collection") == "memory" and scope.get("memory_scope") == "GLOBAL_MEMORY"
    for key, want in filters.items():
        if key.startswith("scope."):
            name = key.split(".", 1)[1]
            if name == "session_id" and is_global_memory:
                continue
            # The local backend indexes no None scope values, so a None filter matches nothing.
            if want is None or name not in scope or scope[name] != want:
                return False
        elif key.startswith("meta."):
            if (ref.get("meta") or {}).get(key.split(".", 1)[1]) != want:
                return False
    return True


def record_from_put(
    content: Any, *, kind: str | None, summary: str | None, scope: Mapping[str, Any] | None,
    source: Mapping[str, Any] | None, meta: Mapping[str, Any] | None,
) -> MemoryRecord:
    """A memory ``put`` (AgentlyMemory's call) as a MemoryRecord.

    Raises:
        RecordValidationError: the payload is not a memory (the caller stores it as a generic record).
    """
    if not isinstance(content, Mapping):
        raise RecordValidationError("a memory payload must be a mapping")
    scope = dict(scope or {})
    meta = dict(meta or {})
    memory_scope = str(
        content.get("memory_scope") or scope.get("memory_scope") or SCOPE_BY_KIND.get(kind or "", "")
    ).strip().upper()
    if memory_scope not in MEMORY_SCOPES:
        raise RecordValidationError(f"unknown memory_scope {memory_scope!r}")
    if kind and kind != KIND_BY_SCOPE[memory_scope]:
        raise RecordValidationError(f"kind {kind!r} does not match {memory_scope}")
    provenance = dict(source or content.get("provenance") or {})
    session_id = scope.get("session_id") or meta.get("session_id") or provenance.get("session_id")
    extra_scope = {k: v for k, v in scope.items() if k not in _MEMORY_SCOPE_KEYS and v is not None}
    if extra_scope:
        provenance["workspace_scope"] = _jsonable(extra_scope)
    text = str(summary or content.get("summary") or "").strip()
    body = content.get("body", content.get("memory", content.get("content")))
    if isinstance(body, str):
        body = {"summary": body}
    if not text and isinstance(body, Mapping):
        text = str(next(iter(body.values()), ""))[:240]
    vector_index = content.get("vector_index") or meta.get("vector_index") or {}
    importance = content.get("importance", 0.5)
    try:
        importance = min(1.0, max(0.0, float(importance)))
    except (TypeError, ValueError):
        importance = 0.5
    return parse_record({
        "memory_scope": memory_scope,
        "session_id": str(session_id) if memory_scope == "SESSION_MEMORY" and session_id else None,
        "summary": text,
        "body": dict(body) if isinstance(body, Mapping) else {"summary": text},
        "tags": list(content.get("tags") or meta.get("tags") or []),
        "importance": importance,
        "provenance": provenance,
        "vector_index": {"requested": bool(vector_index.get("requested", True))}
        if isinstance(vector_index, Mapping) else {},
    })


def _generic_record(content: Any, *, collection: str, kind: str | None, summary: str | None,
                    scope: Mapping[str, Any] | None, source: Mapping[str, Any] | None,
                    meta: Mapping[str, Any] | None) -> MemoryRecord:
    """A non-memory Agently record as a MemoryRecord of :data:`GENERIC_COLLECTION`."""
    text, fmt = _content_text(content)
    record_id = f"rec_{uuid.uuid4().hex}"
    data = text.encode("utf-8")
    summary = (summary or text[:240].replace("\n", " ").strip())[:4000]
    suffix = ".json" if fmt == "json" else ".txt"
    ref = {
        "collection": collection, "kind": kind,
        "path": f"{collection}/{record_id}-{path_slug(kind or collection)}{suffix}",
        "sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "format": fmt,
        "scope": _jsonable(dict(scope or {})), "source": _jsonable(dict(source or {})),
        "meta": _jsonable(dict(meta or {})),
    }
    return parse_record({
        "id": record_id, "collection": GENERIC_COLLECTION, "kind": kind or "record",
        "memory_scope": "GLOBAL_MEMORY", "summary": summary, "body": {"content": text},
        "provenance": {"plugin": "agently", "agently_ref": ref},
    })


def _generic_ref(record: MemoryRecord) -> dict[str, Any]:
    ref = dict(getattr(record.provenance, "agently_ref", None) or {})
    return {
        "id": record.id, "collection": ref.get("collection"), "kind": ref.get("kind"), "path": ref.get("path"),
        "sha256": ref.get("sha256"), "size": int(ref.get("size") or 0), "summary": record.summary,
        "scope": dict(ref.get("scope") or {}), "source": dict(ref.get("source") or {}),
        "created_at": iso_time(record.created_at), "meta": dict(ref.get("meta") or {}),
    }


@dataclass(frozen=True)
class _Entry:
    """One record as the store searches it: its ref, searchable text, sort key and vector row."""

    ref: dict[str, Any]
    text: str
    created: float
    vector: np.ndarray


class ChromaRecords:
    """Agently records (memory and generic) on one ChromaWorkspace; synchronous, no ``agently`` import.

    Args:
        workspace: the :class:`~agently_vecmem.workspace.ChromaWorkspace` holding every record.
        read_only: refuse writes even when the workspace accepts them (a host's read-only binding).
    """

    def __init__(self, workspace: Any, *, read_only: bool = False) -> None:
        self.workspace = workspace
        self.read_only = bool(read_only or workspace.read_only)

    def check_writable(self) -> None:
        if self.read_only:
            raise WorkspaceError("this store was opened read_only; open it with mode='read_write' to write")

    # ------------------------------------------------------------------ writes
    def put(self, content: Any, *, collection: str, kind: str | None = None, summary: str | None = None,
            scope: Mapping[str, Any] | None = None, source: Mapping[str, Any] | None = None,
            meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Store one record; returns its Agently RecordRef."""
        self.check_writable()
        collection = str(collection or "artifacts").strip() or "artifacts"
        if collection == "memory":
            try:
                record = record_from_put(content, kind=kind, summary=summary, scope=scope, source=source, meta=meta)
            except RecordValidationError:
                record = None  # not a memory payload: kept as a generic record of collection "memory"
            if record is not None:
                return record_ref(self.workspace.put(record)[0])
        try:
            record = _generic_record(content, collection=collection, kind=kind, summary=summary, scope=scope,
                                     source=source, meta=meta)
        except RecordValidationError as e:
            raise RecordValidationError(f"cannot store this {collection!r} record in Chroma: {e}") from e
        return _generic_ref(self.workspace.put(record)[0])

    # ------------------------------------------------------------------ reads
    def _entries(self, filters: Mapping[str, Any]) -> list[_Entry]:
        """Matching records of both collections, from one consistent state (one freshness check on a server)."""
        entries: list[_Entry] = []
        collection = filters.get("collection")
        with self.workspace.consistent():
            if collection is None or str(collection) == "memory":
                view = self.workspace.view(Scope(None, None, "memory"))
                want_kind = filters.get("kind")
                for i, record in enumerate(view.records):
                    if want_kind is not None and record.kind != str(want_kind):
                        continue
                    ref = record_ref(record)
                    if ref_matches(ref, filters):
                        entries.append(_Entry(ref, f"{record.summary}\n{view.documents[i]}", record.created_at,
                                              view.rows(i)))
            view = self.workspace.view(Scope(None, None, GENERIC_COLLECTION))
            for i, record in enumerate(view.records):
                ref = _generic_ref(record)
                if ref_matches(ref, filters):
                    entries.append(_Entry(ref, view.documents[i], record.created_at, view.rows(i)))
        return entries

    def search(self, query: str | None = None, filters: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Deterministic search with Agently's filter semantics (see the module docstring)."""
        newest = sorted(self._entries(filters or {}), key=lambda e: -e.created)
        if not query or not str(query).strip():
            return [e.ref for e in newest]
        from ...search.lexical import BM25Index

        scores = BM25Index.build([e.text for e in newest]).scores(str(query)) if newest else np.zeros(0)
        ranked = [e for _, e in sorted(
            ((float(s), e) for s, e in zip(scores, newest, strict=True) if s > 0), key=lambda p: -p[0]
        )]
        if ranked:
            return [e.ref for e in ranked]
        needle = str(query).lower()
        return [e.ref for e in newest if needle in e.text.lower()]

    def vector_search(self, query: str, filters: Mapping[str, Any] | None, limit: int | None) -> list[dict[str, Any]]:
        """Cosine top-``limit`` over the records matching ``filters`` (refs with an extra ``score``)."""
        if not str(query or "").strip():
            return []
        entries = self._entries(filters or {})
        if not entries:
            return []
        scores = np.asarray([e.vector for e in entries], dtype=np.float32) @ self.workspace.embed_query(str(query))
        order = sorted(range(len(entries)), key=lambda i: (-float(scores[i]), -entries[i].created))
        if limit is not None:
            order = order[: max(0, int(limit))]
        return [{**entries[i].ref, "score": round(float(scores[i]), 6)} for i in order]

    def lookup(self, ref_or_path: Any) -> MemoryRecord:
        """The stored record behind a ref, id or content path (active records only).

        Raises:
            FileNotFoundError: no such record (Agently's "not found" for record content).
        """
        if isinstance(ref_or_path, Mapping):
            key = str(ref_or_path.get("id") or ref_or_path.get("path") or "")
        else:
            key = str(ref_or_path)
        if "/" in key:
            key = Path(key).name.split("-", 1)[0].removesuffix(".json").removesuffix(".txt")
        try:
            record = self.workspace.get(key) if key else None
        except RecordNotFoundError:
            record = None
        if record is None or record.status != "active" or record.collection not in ("memory", GENERIC_COLLECTION):
            raise RecordContentNotFoundError(f"record content not found: {ref_or_path}")
        return record

    def ref(self, record: MemoryRecord) -> dict[str, Any]:
        """The Agently ref of a stored record."""
        return record_ref(record) if record.collection == "memory" else _generic_ref(record)

    def text(self, record: MemoryRecord) -> str:
        """The record's content as text (a memory's payload as JSON)."""
        if record.collection == "memory":
            return json.dumps(record.payload(), ensure_ascii=False)
        return str(record.body.get("content", ""))

    def data(self, record: MemoryRecord) -> Any:
        """The record's payload: parsed JSON for JSON payloads (AgentlyMemory's memory dict), else text."""
        if record.collection == "memory":
            return record.payload()
        text = self.text(record)
        if (getattr(record.provenance, "agently_ref", None) or {}).get("format") == "json":
            try:
                return json.loads(text)
            except json.JSONDecodeError:
                return text
        return text

    def read_bounded(self, ref_or_path: Any, *, offset: int = 0,
                     limit: int | None = None) -> tuple[MemoryRecord, dict[str, Any]]:
        """The record and a byte range of its text, in the shape of Agently's ``RecordContentSegment``
        (without ``ref``, which the host adds from the returned record)."""
        if offset < 0 or (limit is not None and limit < 0):
            raise ConfigurationError("read offset and limit must be non-negative")
        record = self.lookup(ref_or_path)
        raw = self.text(record).encode("utf-8")
        end = len(raw) if limit is None else min(len(raw), offset + limit)
        segment = raw[offset:end]
        return record, {
            "content": segment.decode("utf-8", errors="replace"), "offset": offset, "size": len(segment),
            "total_size": len(raw), "eof": end >= len(raw), "digest": hashlib.sha256(raw).hexdigest(),
            "content_type": "application/json" if record.collection == "memory" else "text/plain",
        }


class ChromaVectorIndex:
    """Agently's ``VectorIndex`` protocol (both lines) over a backend's stored vectors (cosine similarity).

    Records are embedded when they are put, so :meth:`index_record` has nothing left to do. :meth:`search`
    returns refs best first; each carries its cosine similarity under the extra key ``score``.
    """

    name = "chroma"
    similarity = "cosine"

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    async def index_record(self, ref: Mapping[str, Any], content: str) -> None:
        return None

    async def search(
        self, query: str, *, filters: dict[str, Any] | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.backend.records.vector_search, query, filters or {}, limit)


_READ_ONLY_MODES = frozenset({"read", "read_only", "readonly"})


class ChromaRecordsBackend(ABC):
    """What both Agently backends share: the ChromaWorkspace they open and async wrappers over its records.

    The ``chroma`` Workspace provider (4.1.3.9–4.1.4.1) and the ``chroma`` RecordStore backend (4.1.4.2+)
    differ in their root (:meth:`_open_root`), capabilities and extra reads; the options, the store they open
    and ``put``/``search``/``get``/``get_data``/``get_record`` and the vector index are the same on both.

    Args:
        root: the root directory (default: the subclass's); the embedded Chroma store is ``<root>/chroma``.
        create: create the root when missing (else a missing root is an error).
        mode: ``read_write`` or ``read_only``.
        embedder: ``"minilm"`` (default), ``"onnx"``, ``"hash"`` or an Embedder object.
        workspace: an existing :class:`~agently_vecmem.workspace.ChromaWorkspace` to use as is.
        host, port: use a Chroma server instead of the embedded store.
        collection: the Chroma collection name.

    Raises:
        ConfigurationError: an unknown option or embedder name.
        WorkspaceError: the store cannot be opened.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        create: bool = True,
        mode: str = "read_write",
        embedder: Any = None,
        workspace: Any = None,
        host: str | None = None,
        port: int = 8000,
        collection: str = "vecmem_memory",
        user: str | None = None,
        **options: Any,
    ) -> None:
        if options:
            raise ConfigurationError(
                f"unknown chroma provider option(s) {sorted(options)}; accepted: embedder, workspace, host, "
                "port, collection, user"
            )
        self.read_only = mode in _READ_ONLY_MODES
        path = self._open_root(root, create=create, mode=mode, workspace=workspace, host=host)
        if workspace is None:
            workspace = shared_workspace(path / "chroma", embedder=embedder, host=host, port=port,
                                         collection=collection, read_only=self.read_only)
        if user is not None:
            workspace = workspace.for_user(user)
        self.vecmem_workspace = workspace
        self.embedder = workspace.embedder
        self.records = ChromaRecords(workspace, read_only=self.read_only)
        self.vector_index = ChromaVectorIndex(self)

    @abstractmethod
    def _open_root(self, root: str | os.PathLike[str] | None, *, create: bool, mode: str, workspace: Any,
                   host: str | None) -> Path:
        """Resolve the root (the subclass's default, its checks and directories); returns it."""

    async def put(self, content: Any, *, collection: str, kind: str | None = None, summary: str | None = None,
                  scope: dict[str, Any] | None = None, source: dict[str, Any] | None = None,
                  meta: dict[str, Any] | None = None) -> dict[str, Any]:
        """Store one record; returns its Agently RecordRef."""
        return await asyncio.to_thread(self.records.put, content, collection=collection, kind=kind,
                                       summary=summary, scope=scope, source=source, meta=meta)

    async def search(self, query: str | None = None, filters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Deterministic search with Agently's filter semantics (GLOBAL_MEMORY ignores a session filter)."""
        return await asyncio.to_thread(self.records.search, query, filters or {})

    async def get(self, ref_or_path: Any) -> str:
        """The record's content as text (a memory's payload as JSON)."""
        record = await asyncio.to_thread(self.records.lookup, ref_or_path)
        return self.records.text(record)

    async def get_data(self, ref_or_path: Any) -> Any:
        """The record's payload: parsed JSON for JSON payloads (AgentlyMemory's memory dict), else text."""
        record = await asyncio.to_thread(self.records.lookup, ref_or_path)
        return self.records.data(record)

    async def get_record(self, record_id: str) -> dict[str, Any] | None:
        """The ref of a record id, or None."""
        try:
            record = await asyncio.to_thread(self.records.lookup, record_id)
        except FileNotFoundError:
            return None
        return self.records.ref(record)


def shared_workspace(
    path: str | os.PathLike[str] | None, *, embedder: Any = None, host: str | None = None, port: int = 8000,
    collection: str = "vecmem_memory", read_only: bool = False,
) -> Any:
    """One ChromaWorkspace per store, collection and embedder in this process.

    Agently may open one store several times (``use_workspace``/``use_record_store`` on several agents, one
    provider call per agent); they must share one ChromaWorkspace, whose in-memory scope snapshots are kept
    current only on its own writes (and whose embedded store admits one writer).
    """
    from ...workspace import ChromaWorkspace

    emb = resolve_embedder(embedder)
    where = f"{host}:{port}" if host else os.path.realpath(path or ".vecmem/chroma")
    key = (where, collection, emb.model_id, int(emb.dim), read_only)
    with _shared_lock:
        ws = _shared.get(key)
        if ws is None or ws.closed:
            if host:
                ws = ChromaWorkspace(embedder=emb, host=host, port=port, collection=collection, read_only=read_only)
            else:
                ws = ChromaWorkspace(where, embedder=emb, collection=collection, read_only=read_only)
            _shared[key] = ws
        return ws


def close_shared() -> None:
    """Close every shared ChromaWorkspace (releases writer locks)."""
    with _shared_lock:
        for ws in _shared.values():
            ws.close()
        _shared.clear()


def chroma_store(
    location: str | os.PathLike[str] | None = None, *, embedder: Any = None, collection: str = "vecmem_memory",
    read_only: bool = False, user: str | None = None,
) -> Any:
    """The ChromaWorkspace to pass as ``memory_store=`` (agently 4.1.4.2+) from a path or a server address.

    Args:
        location: a directory of an embedded store (default ``./.vecmem/chroma``), or a Chroma server as
            ``http://HOST:PORT`` / ``HOST:PORT``.
        embedder: ``"minilm"`` (default), ``"onnx"``, ``"hash"`` or an Embedder.
        collection: the Chroma collection.
        read_only: open without the writer lock; writes raise.
        user: bind the store to one user (:meth:`ChromaWorkspace.for_user`): an agent given it reads and
            writes that user's memory only. None: the default user (a store that serves one user).

    Returns:
        A ChromaWorkspace on the store shared by every caller in this process that names it (bound to
        ``user`` when given).

    Example:
        >>> session.use_memory(mode="VecMemory", memory_store=chroma_store("./.agently/memory"))  # doctest: +SKIP
        >>> session.use_memory(mode="VecMemory", memory_store=chroma_store("127.0.0.1:8000", user="alice"))  # doctest: +SKIP
    """
    text = str(location) if location is not None else ""
    if text.startswith(("http://", "https://")) or (text and ":" in text and "/" not in text and "\\" not in text):
        hostport = text.split("://", 1)[-1].rstrip("/")
        host, _, port = hostport.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigurationError(f"a Chroma server address is HOST:PORT or http://HOST:PORT, got {text!r}")
        ws = shared_workspace(None, embedder=embedder, host=host, port=int(port), collection=collection,
                              read_only=read_only)
    else:
        ws = shared_workspace(text or None, embedder=embedder, collection=collection, read_only=read_only)
    return ws if user is None else ws.for_user(user)

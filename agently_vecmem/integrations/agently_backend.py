"""An Agently Workspace backend on Chroma (provider ``"chroma"``), without importing ``agently``.

:class:`ChromaWorkspaceBackend` implements the part of Agently 4.1.4.1's ``WorkspaceBackend`` protocol that
``Workspace``, ``Workspace.retrieve`` and the built-in ``AgentlyMemory`` use: ``put``, ``search``, ``get``,
``get_data``, ``capabilities`` and a ``vector_index`` (:class:`ChromaVectorIndex`) with real vectors, so
``retrieve(method="vector"|"hybrid")`` searches by meaning.

Storage design (two Chroma collections in one store):

* ``collection="memory"`` records with a memory payload (what AgentlyMemory writes) become
  :class:`~agently_vecmem.records.MemoryRecord` objects in the :class:`ChromaWorkspace` (``.vecmem_workspace``),
  the very records VecMemory reads and writes. Scope keys other than ``memory_scope``/``session_id`` (a
  Workspace ``default_scope``) are kept in ``provenance.workspace_scope`` and given back in ``ref.scope``.
  Superseded and deleted records are invisible to Agently (as they are to VecMemory's retrieval).
* Every other record (other collections, or a ``memory`` payload that is not a valid memory) goes to a
  second collection ``<collection>__records``: one Chroma row per record, id ``rec_<hex>``, the payload as
  the row's document (JSON text for dicts/lists, marked ``content_format="json"``), the record ref's
  ``scope``/``source``/``meta`` as JSON strings in metadata, and a vector of ``summary + content`` so vector
  search covers these records too.

Filters follow Agently's local backend: ``id``/``path``/``collection``/``kind`` exact, ``scope.<k>`` and
``meta.<k>`` equality, other keys ignored. A query is ranked with BM25 (:mod:`agently_vecmem.memory.lexical`,
any term matching), falling back to a case-insensitive substring match; without a query the newest record
comes first.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from ..embedders import resolve_embedder
from ..errors import ConfigurationError, RecordNotFoundError, RecordValidationError, WorkspaceError
from ..filters import Scope
from ..records import KIND_BY_SCOPE, MEMORY_SCOPES, SCOPE_BY_KIND, MemoryRecord, parse_record

__all__ = [
    "ChromaWorkspaceBackend",
    "ChromaVectorIndex",
    "GenericRecordStore",
    "create_backend",
]

_READ_ONLY_MODES = {"read", "read_only", "readonly"}
_EXACT_KEYS = ("id", "path", "collection", "kind")
_MEMORY_SCOPE_KEYS = ("memory_scope", "session_id")
_shared_lock = threading.Lock()
_shared: dict[tuple[Any, ...], Any] = {}


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _content_text(content: Any) -> tuple[str, str]:
    """(text, format) of a payload: strings stay text, bytes are decoded, anything else is JSON."""
    if isinstance(content, bytes):
        return content.decode("utf-8", errors="replace"), "text"
    if isinstance(content, str):
        return content, "text"
    return json.dumps(content, ensure_ascii=False, default=str), "json"


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-") or "record"


@dataclass(frozen=True)
class _Entry:
    """One record as the backend searches it: its ref, searchable text, sort key and vector source."""

    ref: dict[str, Any]
    text: str
    created: float
    source: str  # "memory" | "generic"
    index: int  # row in the memory view (memory) or position in the generic batch


def _matches(ref: Mapping[str, Any], filters: Mapping[str, Any]) -> bool:
    """Agently's local-backend filter semantics over one ref."""
    for key in _EXACT_KEYS:
        want = filters.get(key)
        if want is not None and str(ref.get(key)) != str(want):
            return False
    for key, want in filters.items():
        if key.startswith("scope."):
            scope = ref.get("scope") or {}
            name = key.split(".", 1)[1]
            # The local backend indexes no None scope values, so a None filter matches nothing.
            if want is None or name not in scope or scope[name] != want:
                return False
        elif key.startswith("meta."):
            if (ref.get("meta") or {}).get(key.split(".", 1)[1]) != want:
                return False
    return True


def memory_ref(record: MemoryRecord) -> dict[str, Any]:
    """The Agently record ref of a memory record (AgentlyMemory's shape)."""
    payload = record.payload()
    data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    provenance = record.provenance.model_dump()
    extra_scope = provenance.pop("workspace_scope", None)
    scope = dict(extra_scope) if isinstance(extra_scope, dict) else {}
    scope.update(record.scope_dict())
    return {
        "id": record.id,
        "collection": record.collection,
        "kind": record.kind,
        "path": f"{record.collection}/{record.id}-{_slug(record.kind)}.json",
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": len(data),
        "summary": record.summary,
        "scope": scope,
        "source": provenance,
        "created_at": _iso(record.created_at),
        "meta": {
            "tags": list(record.tags),
            "memory_scope": record.memory_scope,
            "session_id": record.session_id,
            "vector_index": record.vector_index.model_dump(),
            "importance": record.importance,
            "extracted": record.extracted,
        },
    }


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
        provenance["workspace_scope"] = extra_scope
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


class GenericRecordStore:
    """Records of any collection in one Chroma collection (see the module docstring for the layout)."""

    def __init__(self, client: Any, name: str, embedder: Any) -> None:
        self.embedder = embedder
        self.name = name
        want = {"vecmem_schema": 1, "vecmem_embedder_model": embedder.model_id,
                "vecmem_embedder_dim": int(embedder.dim), "vecmem_layout": "generic_records"}
        try:
            self._col = client.get_or_create_collection(
                name, metadata=want, configuration={"hnsw": {"space": "cosine"}}, embedding_function=None
            )
        except Exception as e:
            raise WorkspaceError(f"cannot open Chroma collection {name!r}: {e}") from e
        have = dict(self._col.metadata or {})
        if have.get("vecmem_embedder_model") != embedder.model_id:
            from ..errors import EmbedderMismatchError

            raise EmbedderMismatchError(
                f"collection {name!r} holds vectors of model {have.get('vecmem_embedder_model')!r}, but this "
                f"Workspace embeds with {embedder.model_id!r}; open it with the same embedder"
            )

    def put(self, content: Any, *, collection: str, kind: str | None, summary: str | None,
            scope: Mapping[str, Any] | None, source: Mapping[str, Any] | None,
            meta: Mapping[str, Any] | None) -> dict[str, Any]:
        text, fmt = _content_text(content)
        record_id = f"rec_{uuid.uuid4().hex}"
        data = text.encode("utf-8")
        now = time.time()
        summary = summary or text[:240].replace("\n", " ").strip()
        suffix = ".json" if fmt == "json" else ".txt"
        ref = {
            "id": record_id, "collection": collection, "kind": kind,
            "path": f"{collection}/{record_id}-{_slug(kind or collection)}{suffix}",
            "sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "summary": summary,
            "scope": dict(scope or {}), "source": dict(source or {}), "created_at": _iso(now),
            "meta": dict(meta or {}),
        }
        chroma_meta = {
            "collection": collection, "path": ref["path"], "sha256": ref["sha256"], "size": len(data),
            "summary": summary, "created_at": now, "content_format": fmt,
            "scope_json": _dumps(ref["scope"]), "source_json": _dumps(ref["source"]),
            "meta_json": _dumps(ref["meta"]),
        }
        if kind is not None:
            chroma_meta["kind"] = kind
        vector = self.embedder.embed_documents([f"{summary}\n{text[:4000]}"])
        try:
            self._col.add(ids=[record_id], embeddings=vector, metadatas=[chroma_meta], documents=[text])
        except Exception as e:
            raise WorkspaceError(f"Chroma rejected the record write: {e}") from e
        return ref

    @staticmethod
    def _ref(rid: str, meta: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "id": rid, "collection": meta.get("collection"), "kind": meta.get("kind"),
            "path": meta.get("path"), "sha256": meta.get("sha256"), "size": int(meta.get("size") or 0),
            "summary": meta.get("summary") or "", "scope": json.loads(meta.get("scope_json") or "{}"),
            "source": json.loads(meta.get("source_json") or "{}"),
            "created_at": _iso(float(meta.get("created_at") or 0.0)),
            "meta": json.loads(meta.get("meta_json") or "{}"),
        }

    def rows(self, filters: Mapping[str, Any], *, vectors: bool = False) -> tuple[list[_Entry], np.ndarray | None]:
        """Records matching ``filters`` and (optionally) their vectors, row ``i`` for entry ``i``."""
        where: dict[str, Any] = {}
        for key in ("collection", "kind", "path"):
            if filters.get(key) is not None:
                where[key] = str(filters[key])
        clause = None if not where else (
            {k: v for k, v in where.items()} if len(where) == 1 else {"$and": [{k: v} for k, v in where.items()]}
        )
        include = ["metadatas", "documents"] + (["embeddings"] if vectors else [])
        kwargs: dict[str, Any] = {"where": clause, "include": include}
        if filters.get("id") is not None:
            kwargs["ids"] = [str(filters["id"])]
        res = self._col.get(**kwargs)
        entries: list[_Entry] = []
        keep: list[int] = []
        for i, rid in enumerate(res["ids"]):
            meta = res["metadatas"][i]
            ref = self._ref(rid, meta)
            if not _matches(ref, filters):
                continue
            doc = res["documents"][i] or ""
            entries.append(_Entry(ref, f"{ref['summary']}\n{doc}", float(meta.get("created_at") or 0.0),
                                  "generic", len(keep)))
            keep.append(i)
        vecs = None
        if vectors:
            emb = res.get("embeddings")
            vecs = np.asarray([emb[i] for i in keep], dtype=np.float32).reshape(len(keep), self.embedder.dim)
        return entries, vecs

    def fetch(self, record_id: str) -> tuple[dict[str, Any], str, str] | None:
        """(ref, content text, content format) of one record, or None."""
        res = self._col.get(ids=[record_id], include=["metadatas", "documents"])
        if not res["ids"]:
            return None
        meta = res["metadatas"][0]
        return self._ref(record_id, meta), res["documents"][0] or "", str(meta.get("content_format", "text"))

    def count(self) -> int:
        return int(self._col.count())


class ChromaVectorIndex:
    """Agently's ``VectorIndex`` protocol over the backend's stored vectors (cosine similarity).

    Records are embedded when they are put, so :meth:`index_record` has nothing left to do. :meth:`search`
    returns refs best first; each carries its cosine similarity under the extra key ``score``.
    """

    name = "chroma"
    similarity = "cosine"

    def __init__(self, backend: ChromaWorkspaceBackend) -> None:
        self.backend = backend

    async def index_record(self, ref: Mapping[str, Any], content: str) -> None:
        return None

    async def search(
        self, query: str, *, filters: dict[str, Any] | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.backend.vector_search_sync, query, filters or {}, limit)


class ChromaWorkspaceBackend:
    """Agently Workspace backend storing records in Chroma (see the module docstring).

    Args:
        root: Workspace root directory (default ``.agently/workspaces/chroma``). The embedded Chroma store
            is ``<root>/chroma``; ``<root>/files`` is the Workspace's editable file area.
        create: create the root when missing (else a missing root is an error).
        mode: ``read_write`` or ``read_only``.
        embedder: ``"minilm"`` (default), ``"onnx"``, ``"hash"`` or an Embedder object.
        workspace: an existing :class:`~agently_vecmem.workspace.ChromaWorkspace` to use as is.
        host, port: use a Chroma server instead of the embedded store.
        collection: the memory collection name (generic records go to ``<collection>__records``).

    Raises:
        ConfigurationError: an unknown option or embedder name.
        WorkspaceError: the store cannot be opened.
    """

    name = "chroma"

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
        **options: Any,
    ) -> None:
        if options:
            raise ConfigurationError(
                f"unknown chroma provider option(s) {sorted(options)}; accepted: embedder, workspace, host, "
                "port, collection"
            )
        self.mode = mode
        self.read_only = mode in _READ_ONLY_MODES
        self.root = Path(root or Path(".agently") / "workspaces" / "chroma").expanduser().resolve()
        if not create and not self.root.exists():
            raise WorkspaceError(f"Workspace root does not exist: {self.root} (pass create=True)")
        self.content_root = self.root / "content"
        self.files_root = self.root / "files"
        if not self.read_only:
            self.files_root.mkdir(parents=True, exist_ok=True)
        if workspace is None:
            workspace = shared_workspace(
                self.root / "chroma", embedder=embedder, host=host, port=port, collection=collection,
                read_only=self.read_only,
            )
        self.vecmem_workspace = workspace
        self.embedder = workspace.embedder
        self.records = GenericRecordStore(workspace.client, f"{workspace.collection_name}__records", self.embedder)
        self.vector_index = ChromaVectorIndex(self)
        self.workspace_id = f"chroma:{self.root}"

    def __repr__(self) -> str:
        return f"ChromaWorkspaceBackend({str(self.root)!r}, workspace={self.vecmem_workspace!r})"

    # ------------------------------------------------------------------ protocol: writes
    def _check_writable(self) -> None:
        if self.read_only:
            raise WorkspaceError("this Workspace was opened read_only; open it with mode='read_write' to write")

    async def put(
        self,
        content: Any,
        *,
        collection: str,
        kind: str | None = None,
        summary: str | None = None,
        scope: dict[str, Any] | None = None,
        source: dict[str, Any] | None = None,
        meta: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Store one record; returns its Agently RecordRef."""
        return await asyncio.to_thread(
            self.put_sync, content, collection=collection, kind=kind, summary=summary, scope=scope,
            source=source, meta=meta,
        )

    def put_sync(self, content: Any, *, collection: str, kind: str | None = None, summary: str | None = None,
                 scope: Mapping[str, Any] | None = None, source: Mapping[str, Any] | None = None,
                 meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
        self._check_writable()
        collection = str(collection or "artifacts").strip() or "artifacts"
        if collection == "memory":
            try:
                record = record_from_put(content, kind=kind, summary=summary, scope=scope, source=source, meta=meta)
            except RecordValidationError:
                record = None  # not a memory payload: kept as a generic record of collection "memory"
            if record is not None:
                return memory_ref(self.vecmem_workspace.put(record)[0])
        return self.records.put(content, collection=collection, kind=kind, summary=summary, scope=scope,
                                source=source, meta=meta)

    # ------------------------------------------------------------------ protocol: reads
    def _memory_view(self) -> Any:
        return self.vecmem_workspace.view(Scope(None, None, "memory"))

    def _entries(self, filters: Mapping[str, Any], *, vectors: bool = False) -> tuple[list[_Entry], Any, Any]:
        """Matching records of both stores: (entries, memory view, generic vectors)."""
        entries: list[_Entry] = []
        view = generic_vecs = None
        collection = filters.get("collection")
        if collection is None or str(collection) == "memory":
            view = self._memory_view()
            want_kind = filters.get("kind")
            for i, record in enumerate(view.records):
                if want_kind is not None and record.kind != str(want_kind):
                    continue
                ref = memory_ref(record)
                if _matches(ref, filters):
                    entries.append(_Entry(ref, f"{record.summary}\n{view.documents[i]}", record.created_at,
                                          "memory", i))
        if collection is None or str(collection) != "memory" or self.records.count():
            generic, generic_vecs = self.records.rows(filters, vectors=vectors)
            entries.extend(generic)
        return entries, view, generic_vecs

    async def search(self, query: str | None = None, filters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Deterministic search with Agently's filter semantics (see the module docstring)."""
        return await asyncio.to_thread(self.search_sync, query, filters or {})

    def search_sync(self, query: str | None = None, filters: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        entries, _, _ = self._entries(filters or {})
        newest = sorted(entries, key=lambda e: -e.created)
        if not query or not str(query).strip():
            return [e.ref for e in newest]
        from ..memory.lexical import BM25Index

        scores = BM25Index.build([e.text for e in newest]).scores(str(query)) if newest else np.zeros(0)
        ranked = [e for _, e in sorted(
            ((float(s), e) for s, e in zip(scores, newest, strict=True) if s > 0), key=lambda p: -p[0]
        )]
        if ranked:
            return [e.ref for e in ranked]
        needle = str(query).lower()
        return [e.ref for e in newest if needle in e.text.lower()]

    def vector_search_sync(self, query: str, filters: Mapping[str, Any], limit: int | None) -> list[dict[str, Any]]:
        """Cosine top-``limit`` over the records matching ``filters`` (refs with an extra ``score``)."""
        if not str(query or "").strip():
            return []
        entries, view, generic_vecs = self._entries(filters, vectors=True)
        if not entries:
            return []
        qvec = self.vecmem_workspace.embed_query(str(query))
        rows = [view.vectors[e.index] if e.source == "memory" else generic_vecs[e.index] for e in entries]
        scores = np.asarray(rows, dtype=np.float32) @ qvec
        order = sorted(range(len(entries)), key=lambda i: (-float(scores[i]), -entries[i].created))
        if limit is not None:
            order = order[: max(0, int(limit))]
        return [{**entries[i].ref, "score": round(float(scores[i]), 6)} for i in order]

    def _lookup(self, ref_or_path: Any) -> tuple[str, Any]:
        """("memory", MemoryRecord) or ("generic", (ref, text, format)) for a ref, id or content path."""
        if isinstance(ref_or_path, Mapping):
            key = str(ref_or_path.get("id") or ref_or_path.get("path") or "")
        else:
            key = str(ref_or_path)
        record_id = Path(key).name.split("-", 1)[0].removesuffix(".json").removesuffix(".txt") if "/" in key else key
        if record_id.startswith("rec_"):
            found = self.records.fetch(record_id)
            if found is not None:
                return "generic", found
        else:
            try:
                return "memory", self.vecmem_workspace.get(record_id)
            except RecordNotFoundError:
                pass
        raise FileNotFoundError(f"Workspace record content not found: {ref_or_path}")

    async def get(self, ref_or_path: Any) -> str:
        """The record's content as text (a memory's payload as JSON)."""
        kind, found = await asyncio.to_thread(self._lookup, ref_or_path)
        if kind == "memory":
            return json.dumps(found.payload(), ensure_ascii=False)
        return found[1]

    async def get_data(self, ref_or_path: Any) -> Any:
        """The record's payload: parsed JSON for JSON payloads (AgentlyMemory's memory dict), else text."""
        kind, found = await asyncio.to_thread(self._lookup, ref_or_path)
        if kind == "memory":
            return found.payload()
        _, text, fmt = found
        if fmt == "json":
            try:
                return json.loads(text)
            except json.JSONDecodeError:
                return text
        return text

    async def get_record(self, record_id: str) -> dict[str, Any] | None:
        """The ref of a record id, or None."""
        try:
            kind, found = await asyncio.to_thread(self._lookup, record_id)
        except FileNotFoundError:
            return None
        return memory_ref(found) if kind == "memory" else found[0]

    def capabilities(self) -> dict[str, Any]:
        """What this backend supports (Agently's capability keys; unsupported features are False)."""
        return {
            "backend": "chroma",
            "read_only": self.read_only,
            "root": str(self.root),
            "content_root": str(self.content_root),
            "structured_get_data": True,
            "metadata_filters": True,
            "text_search": True,
            "vector_search": True,
            "vector_similarity": "cosine",
            "embedder_model": self.embedder.model_id,
            "links_query": False,
            "checkpoint_lookup": False,
            "runtime_event_store": False,
            "supports_lease": False,
            "supports_remote_backend": self.vecmem_workspace.mode == "server",
        }


def shared_workspace(
    path: Path, *, embedder: Any = None, host: str | None = None, port: int = 8000,
    collection: str = "vecmem_memory", read_only: bool = False,
) -> Any:
    """One ChromaWorkspace per store, collection and embedder in this process.

    Agently may build several Workspace objects on one root (``use_workspace`` on several agents); they
    must share one ChromaWorkspace, whose in-memory scope snapshots are kept current only on its own writes.
    """
    from ..workspace import ChromaWorkspace

    emb = resolve_embedder(embedder)
    where = f"{host}:{port}" if host else os.path.realpath(path)
    key = (where, collection, emb.model_id, int(emb.dim), read_only)
    with _shared_lock:
        ws = _shared.get(key)
        if ws is None or getattr(ws, "_closed", False):
            if host:
                ws = ChromaWorkspace(embedder=emb, host=host, port=port, collection=collection, read_only=read_only)
            else:
                ws = ChromaWorkspace(path, embedder=emb, collection=collection, read_only=read_only)
            _shared[key] = ws
        return ws


def close_shared() -> None:
    """Close every shared ChromaWorkspace (releases writer locks)."""
    with _shared_lock:
        for ws in _shared.values():
            ws.close()
        _shared.clear()


def create_backend(*, root: Any = None, create: bool = True, mode: str = "read_write", **options: Any) -> Any:
    """The provider factory registered as ``"chroma"``: ``(*, root, create, mode, **provider_options)``."""
    return ChromaWorkspaceBackend(root, create=create, mode=mode, **options)

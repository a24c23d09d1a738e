"""Chroma I/O of a ChromaWorkspace: connecting to a server with bounded timeouts, :class:`ChromaCalls` (one
translation of any Chroma failure into :class:`WorkspaceError`, one retry of a transient one) and
:class:`CollectionIO` (record reads of any size, chunked by id around SQLite's variable limit, and the
rollback that makes a put of several batches all-or-nothing); rows decoded into records, documents and
vectors."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import WorkspaceError
from ..records import MemoryRecord

__all__ = ["Row", "ChromaCalls", "CollectionIO", "RowBuffer", "connect_server", "bound_http_timeout", "is_transient",
           "too_many_variables", "decode_rows", "permute_rows"]

logger = logging.getLogger(__name__)

#: ``(metadata, document, embedding)`` of one stored record, as Chroma returns it.
Row = tuple[dict[str, Any], str, Any]
_NO_VECTOR = np.zeros(0, dtype=np.float32)


def bound_http_timeout(client: Any, timeout: float) -> None:
    """Give a server client's HTTP session a finite timeout (chromadb 1.5 creates it with none, so a stalled
    server would hang every call). Best effort: other client implementations are left alone."""
    import httpx

    session = getattr(getattr(client, "_server", None), "_session", None)
    if isinstance(session, httpx.Client):
        session.timeout = httpx.Timeout(timeout, connect=min(timeout, 5.0))


def connect_server(host: str, port: int, *, ssl: bool, headers: Mapping[str, str] | None, timeout: float) -> Any:
    """A ``chromadb.HttpClient`` for a Chroma server, with a bounded timeout, that answered a heartbeat.

    Raises:
        WorkspaceError: the server cannot be reached (the message says how to start one).
    """
    import chromadb

    try:
        client = chromadb.HttpClient(host=host, port=port, ssl=ssl, headers=dict(headers or {}))
        bound_http_timeout(client, timeout)
        client.heartbeat()
    except Exception as e:  # noqa: BLE001 - translate any transport failure
        raise WorkspaceError(
            f"cannot reach the Chroma server at {host}:{port} ({type(e).__name__}: {e}). "
            f"Start one with `chroma run --path DIR --host {host} --port {port}`."
        ) from e
    return client


def _is_transport_error(e: BaseException) -> bool:
    import httpx

    return isinstance(e, (httpx.TransportError, ConnectionError, TimeoutError)) or "Connect" in type(e).__name__


def is_transient(e: BaseException) -> bool:
    """A server-side internal error (seen once here while several processes created their first records at
    the same moment), worth one retry of an idempotent call."""
    return (type(e).__name__ == "InternalError" and type(e).__module__.startswith("chromadb")
            and not too_many_variables(e))


def too_many_variables(e: BaseException) -> bool:
    """Chroma's SQLite refused a statement with too many variables (a read of ~32k+ records in one call)."""
    return "too many SQL variables" in str(e)


def _merged(chunks: Iterator[Mapping[str, Any]], include: list[str]) -> dict[str, Any]:
    """The results of several ``collection.get`` calls as one (lists of the same fields)."""
    merged: dict[str, Any] = {"ids": [], **{key: [] for key in include}}
    for res in chunks:
        merged["ids"].extend(res["ids"])
        for key in include:
            merged[key].extend(res[key])
    return merged


def decode_rows(result: Mapping[str, Any]) -> Iterator[tuple[MemoryRecord, str, np.ndarray]]:
    """``(record, document, vector)`` of each record in a ``collection.get`` result (an empty vector when
    embeddings were not read)."""
    embeddings = result.get("embeddings")
    for i, rid in enumerate(result["ids"]):
        vec = np.asarray(embeddings[i], dtype=np.float32) if embeddings is not None else _NO_VECTOR
        yield MemoryRecord.from_chroma(rid, result["metadatas"][i]), result["documents"][i], vec


class RowBuffer:
    """Float32 rows appended chunk by chunk into ONE array, grown in place (``ndarray.resize``: ``realloc``,
    which moves a large block's pages without copying them): a read of a big scope holds its vectors once,
    where stacking the chunks at the end held them twice (1.5 GB more at 1M 384-d records).

    Example:
        >>> buf = RowBuffer(2)
        >>> buf.append(np.ones((3, 2), np.float32)); buf.append(np.zeros((1, 2), np.float32))
        >>> buf.done().shape
        (4, 2)
    """

    __slots__ = ("_rows", "_n")

    def __init__(self, dim: int) -> None:
        self._rows = np.empty((0, dim), dtype=np.float32)
        self._n = 0

    def append(self, block: np.ndarray) -> None:
        """Append ``block`` (``(m, dim)``) after the rows so far."""
        end = self._n + len(block)
        # No view of the array exists before done(): resizing it in place is safe.
        self._rows.resize((end, self._rows.shape[1]), refcheck=False)
        self._rows[self._n:end] = block
        self._n = end

    def done(self) -> np.ndarray:
        """The ``(n, dim)`` rows appended (the buffer is not used after)."""
        return self._rows


def permute_rows(rows: np.ndarray, order: Sequence[int]) -> None:
    """``rows[:] = rows[order]`` with one row of extra memory (row by row along the permutation's cycles) when
    ``rows`` is big, a copy otherwise: the rows of a big scope read in another order than its snapshot's."""
    if rows.nbytes <= _PERMUTE_COPY_BYTES:
        rows[:] = rows[np.asarray(order, dtype=np.int64)]
        return
    order = list(order)
    done = bytearray(len(order))
    for start, source in enumerate(order):
        if done[start] or source == start:
            continue
        first = rows[start].copy()
        j = start
        while True:
            done[j] = 1
            k = order[j]
            if k == start:
                rows[j] = first
                break
            rows[j] = rows[k]
            j = k


#: Below this many bytes :func:`permute_rows` copies (faster; the copy is small).
_PERMUTE_COPY_BYTES = 64 << 20


class ChromaCalls:
    """Runs Chroma calls for one store: any failure becomes a :class:`WorkspaceError` (naming the server and
    how to start it when it cannot be reached); a transient server error is retried once.

    Args:
        address: ``host:port`` of a Chroma server, or None for an embedded store or a client passed in.
    """

    def __init__(self, address: str | None) -> None:
        self.address = address

    def __call__(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            if not is_transient(e):
                raise self.translate(what, e) from e
            # Every call made here is idempotent (reads, upserts, deletes, adds of fresh ids): one retry.
            logger.warning("Chroma failed the %s (%s: %s); retrying once", what, type(e).__name__, e)
            time.sleep(0.05)
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise self.translate(what, e) from e

    def translate(self, what: str, e: Exception) -> WorkspaceError:
        """A Chroma failure as a :class:`WorkspaceError`; an unreachable server is named with the command
        that starts it."""
        if isinstance(e, WorkspaceError):
            return e
        if self.address is not None and _is_transport_error(e):
            host, _, port = self.address.rpartition(":")
            return WorkspaceError(
                f"the Chroma server at {self.address} did not answer the {what} ({type(e).__name__}: {e}). "
                f"Is it running? Start it with `chroma run --path DIR --host {host} --port {port}`; this "
                "Workspace reconnects by itself once it is back."
            )
        return WorkspaceError(f"Chroma failed the {what}: {type(e).__name__}: {e}")


class CollectionIO:
    """Reads of any size and the rollback of a multi-batch put, on one collection.

    Args:
        collection: the Chroma collection.
        calls: runs (and translates) every call.
        batch: the most ids one call may carry (Chroma's SQLite refuses ~32k variables in one statement).
    """

    def __init__(self, collection: Any, calls: ChromaCalls, batch: int) -> None:
        self.collection = collection
        self.calls = calls
        self.batch = batch

    def get_by_ids(self, what: str, ids: list[str], include: list[str]) -> dict[str, Any]:
        """``collection.get(ids=...)`` in chunks of ``batch``."""
        if len(ids) <= self.batch:
            return self.calls(what, self.collection.get, ids=ids, include=include)
        return _merged(self.chunks_by_ids(what, ids, include), include)

    def chunks_by_ids(self, what: str, ids: list[str], include: list[str]) -> Iterator[dict[str, Any]]:
        """``collection.get(ids=...)``, one result per chunk of ``batch`` ids: a reader that decodes each chunk
        holds one chunk's raw rows at a time (a 1M-record scope's raw rows took ~8.5 GB at once)."""
        for start in range(0, len(ids), self.batch):
            yield self.calls(what, self.collection.get, ids=ids[start:start + self.batch], include=include)

    def get_where(self, what: str, where: Mapping[str, Any] | None, include: list[str]) -> dict[str, Any]:
        """``collection.get(where=...)`` of any size, as one result (see :meth:`chunks_where`)."""
        chunks = list(self.chunks_where(what, where, include))
        return chunks[0] if len(chunks) == 1 else _merged(iter(chunks), include)

    def chunks_where(self, what: str, where: Mapping[str, Any] | None, include: list[str]) -> Iterator[dict[str, Any]]:
        """``collection.get(where=...)`` of any size, in one or more results. The first read is limited to
        ``batch + 1`` rows: a scope that fits is read in one call; of a bigger one, the ids are read next and
        the rest of the records by id in chunks (records changed meanwhile are caught by the change markers
        like any concurrent write). Chroma fails ``get(where=...)`` with fields above ~32k matches (SQLite's
        variable limit) only after materializing them: unlimited, that first read of 100k records took
        ~20 s and ~2 GB before it failed."""
        first = self.calls(what, self.collection.get, where=where, include=include, limit=self.batch + 1)
        yield first
        if len(first["ids"]) <= self.batch:
            return
        read = set(first["ids"])
        ids = self.calls(what, self.collection.get, where=where, include=[])["ids"]
        yield from self.chunks_by_ids(what, [i for i in ids if i not in read], include)

    def rows_by_id(self, ids: Sequence[str]) -> dict[str, Row]:
        """``id -> row`` of the ids that exist (what a put is about to replace)."""
        res = self.get_by_ids("read of the records to replace", list(ids), ["metadatas", "documents", "embeddings"])
        return {rid: (dict(meta or {}), doc, emb)
                for rid, meta, doc, emb in zip(res["ids"], res["metadatas"], res["documents"], res["embeddings"],
                                               strict=True)}

    def roll_back(self, touched: Sequence[str], metas: Sequence[Mapping[str, Any]],
                  previous: Mapping[str, Row]) -> None:
        """Undo the batches of a failed put: delete the records it added, restore the ones it replaced (their
        metadata keys the failed write added are removed explicitly, since ``upsert`` merges metadata).

        Raises:
            Exception: whatever Chroma raised; the caller reports it.
        """
        added = [i for i in touched if i not in previous]
        restored = [i for i in touched if i in previous]
        for start in range(0, len(added), self.batch):
            self.collection.delete(ids=added[start:start + self.batch])
        keys = {k for m in metas for k in m}
        for start in range(0, len(restored), self.batch):
            chunk = restored[start:start + self.batch]
            old_metas = [{**dict.fromkeys(keys - previous[i][0].keys()), **previous[i][0]} for i in chunk]
            self.collection.upsert(ids=chunk, metadatas=old_metas, documents=[previous[i][1] for i in chunk],
                                   embeddings=np.asarray([previous[i][2] for i in chunk], dtype=np.float32))
        logger.warning("a put of %d+ records failed; rolled back %d added and %d replaced records",
                       len(touched), len(added), len(restored))

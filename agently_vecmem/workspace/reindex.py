"""Add a named vector space to a store that has records (``agently-vecmem reindex STORE --add-space NAME``).

The space is declared first (``complete: false``, :mod:`.vector_spaces`): from then on every write of a
process of this version that opens the store carries it. Then the records are read in pages; each page's
records that lack a current vector of the space (none, another model's, or one of an older text) are embedded
and given it with one metadata ``update`` (Chroma merges metadata: nothing else of the record changes), inside
the change markers of a write on a server (other processes' snapshots pick the vectors up). When a pass over
the whole store finds nothing left to do, the space is declared complete.

**Resumable.** Progress is the records themselves: a killed run leaves some pages done, and the next run
embeds only what still lacks the space. **Safe beside writers.** A record rewritten between this page's read
and its update gets a vector of its old text, which every reader recognises as stale by its text digest (and
the next pass replaces); the last pass finds none. On a shared store (a server), processes of this version
take a new declaration at their next write or read at most ``SPACES_REFRESH_SECONDS`` after it
(:mod:`.chroma`), so the passes start that long after the declaration: every write they may miss carries the
space. (A single put that started before then and outlasts the whole reindex can still land without it:
readers leave the space out of that record's scopes and name this command.)
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError
from ..search import spaces as vs
from .directory import is_directory_row
from .transfer import progress_bar
from .vector_spaces import DeclaredSpace

__all__ = ["ReindexReport", "add_space"]

logger = logging.getLogger(__name__)

#: Passes over the store before giving up on declaring the space complete (writers of an older version may
#: keep adding records without it).
MAX_PASSES = 3


@dataclass
class ReindexReport:
    """What :func:`add_space` did."""

    space: str
    model: str
    records: int = 0
    embedded: int = 0
    passes: int = 0
    complete: bool = False
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def add_space(ws: Any, name: str, *, batch: int = 256, progress: bool = False) -> ReindexReport:
    """Give every record of the store a vector in space ``name`` (declared if the store lacks it).

    Args:
        ws: a writable :class:`~agently_vecmem.workspace.ChromaWorkspace`, not bound to a user (every user's
            records are given the space).
        name: the space (:data:`~agently_vecmem.search.spaces.KNOWN_SPACES`).
        batch: records read, embedded and updated per step.
        progress: show a progress bar.

    Raises:
        ConfigurationError: ``ws`` is read-only or bound to a user, ``batch`` < 1, or the space cannot be
            computed here.
    """
    from ..records import DEFAULT_USER

    if ws.read_only or ws.user_id != DEFAULT_USER:
        raise ConfigurationError("reindex needs the store opened for writing and not bound to a user")
    if batch < 1:
        raise ConfigurationError("batch must be a positive integer")
    start = time.perf_counter()
    space = _declare(ws, name)
    embedder = ws._spaces.embedders[name]
    report = ReindexReport(name, space.model)
    _wait_for_writers(ws, space)
    while report.passes < MAX_PASSES:
        report.passes += 1
        fixed, seen = _pass(ws, name, embedder, batch, progress)
        report.records = seen
        report.embedded += fixed
        if fixed == 0:
            _mark_complete(ws, name)
            report.complete = True
            break
    else:
        logger.warning("space %r: records without it keep being written (a process of an older version?); run "
                       "the reindex again once every process runs this version", name)
    with ws._lock:  # scopes read before carry no (or a partial) space: read them again
        ws._views.clear()
    report.seconds = round(time.perf_counter() - start, 3)
    return report


def _declare(ws: Any, name: str) -> DeclaredSpace:
    if name not in ws._spaces.declared:
        ws._add_spaces([name])
    if name not in ws._spaces.embedders:
        raise ConfigurationError(f"vector space {name!r} cannot be computed here")
    return ws._spaces.declared[name]


def _pass(ws: Any, name: str, embedder: Any, batch: int, progress: bool) -> tuple[int, int]:
    """One pass over every record: returns (records given the space, records seen)."""
    col = ws._io.collection
    key = vs.meta_key(name)
    total = ws._chroma("count of records", col.count)
    fixed = seen = 0
    pages = range(0, total, batch)
    for offset in progress_bar(pages, len(pages), f"adding space {name}", progress):
        page = ws._chroma("read of records to reindex", col.get, limit=batch, offset=offset,
                          include=["metadatas", "documents"])
        todo: list[tuple[str, str]] = []
        for rid, meta, text in zip(page["ids"], page["metadatas"], page["documents"], strict=True):
            if is_directory_row(meta) or not (meta or {}).get("collection"):
                continue
            seen += 1
            if ws._spaces.lacking(name, meta, text or ""):
                todo.append((rid, text))
        if not todo:
            continue
        vectors = vs.quantized(embedder.embed_documents([vs.space_text(t) for _, t in todo]))
        ids = [rid for rid, _ in todo]
        metas = [{key: vs.encode_vector(v, embedder.model_id, t)} for v, (_, t) in zip(vectors, todo, strict=True)]
        with ws._lock:
            op = ws._changes.begin(ids) if ws._changes is not None else None
            try:
                ws._chroma("update of records with a vector space", col.update, ids=ids, metadatas=metas)
            finally:
                if op is not None:
                    ws._commit_quietly(op, ids)
        fixed += len(ids)
    return fixed, seen


def _wait_for_writers(ws: Any, space: DeclaredSpace) -> None:
    """On a shared store, wait until every process of this version has had the time to take the declaration
    of ``space`` (its writes carry the space from then on), so the passes that follow leave none behind."""
    from .chroma import SPACES_REFRESH_SECONDS

    if ws._changes is None:  # an embedded store has one writer: this one
        return
    # (the margin covers the metadata read of a process whose refresh fell due just before the declaration)
    wait = space.declared_at + SPACES_REFRESH_SECONDS + 1.0 - time.time()
    if wait > 0:
        logger.info("space %r: waiting %.1f s for every process sharing the store to carry it", space.name, wait)
        time.sleep(wait)


def _mark_complete(ws: Any, name: str) -> None:
    space = ws._spaces.declared[name]
    if space.complete:
        return
    ws._declare_spaces({name: dataclasses.replace(space, complete=True)})
    logger.info("%s: every record has vector space %r", ws.collection_name, name)

"""The vector spaces of one store (:mod:`agently_vecmem.search.spaces`): which it keeps, and their rows.

Layout: a record's vector in a space is a metadata value of the record's own Chroma row
(``vecmem_vec_<space>``, ~1 KB: float16, base64, tagged with the model and with a digest of the embedded
text). One row holds every space, so a put or delete writes and removes all of them in the same Chroma call:
nothing can hold one space of a record without the others, the change log, the roll-back of a failed put,
the erasure of a record and a server's freshness guarantees cover every space because they cover the row.
(A companion collection per space would need its own writes, roll-backs and change markers, and a second
read for every scope load.) The cost: ~1 KB of SQLite per record and space, and scope reads carry it.

A store declares its spaces in its collection's metadata (``vecmem_spaces``: name -> model, dimension and
whether every record has it). A space added to a store that has records (``agently-vecmem reindex STORE
--add-space NAME``) is declared ``complete: false`` first: from then on every write of this version carries
it, the reindex fills the records written before, and marks it complete at the end. A scope whose records
do not all have a space is read without it (CJK queries then use the stored primary vectors, as before the
space existed), with a warning naming the command when the space is declared complete (a record written by
an older version or another model's vectors).

**Processes sharing a store** (a Chroma server) re-read the declarations now and then
(:meth:`StoreSpaces.refresh`, at most every ``SPACES_REFRESH_SECONDS`` of
:mod:`agently_vecmem.workspace.chroma`, on their next write or read): a space another process added is
carried by their writes from then on, and a space that became complete is read into their snapshots. A
declaration records when it was made (``declared_at``), and the reindex does not declare a space complete
before every such process has had the time to see it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigurationError, EmbedderMismatchError
from ..search import spaces as vs
from .validation import STORED_SPACE_TOLERANCE, check_vectors

__all__ = ["DeclaredSpace", "StoreSpaces", "METADATA_KEY"]

logger = logging.getLogger(__name__)

#: Collection metadata key of the declared spaces (a JSON object).
METADATA_KEY = "vecmem_spaces"


@dataclass(frozen=True)
class DeclaredSpace:
    """One space of a store: its model, dimension, whether every record written before it was declared
    has been given its vector (``agently-vecmem reindex --add-space``), and when it was declared (seconds
    since the epoch on the declaring host; 0 when unknown: a store of an earlier version)."""

    name: str
    model: str
    dim: int
    complete: bool
    declared_at: float = 0.0


@dataclass
class StoreSpaces:
    """The spaces a store keeps, with the embedders that compute them in this process.

    Attributes:
        declared: every space the store declares (in its collection metadata).
        embedders: name -> embedder of the declared spaces this process can compute (all of them unless the
            store was opened read-only on a machine without a space's model).
    """

    declared: dict[str, DeclaredSpace] = field(default_factory=dict)
    embedders: dict[str, Any] = field(default_factory=dict)
    #: ``time.monotonic()`` of the last read of the declarations (:meth:`refresh`)
    read_at: float = field(default_factory=time.monotonic)
    _warned: set[str] = field(default_factory=set)

    # ------------------------------------------------------------------ declaration
    @staticmethod
    def read(metadata: Mapping[str, Any]) -> dict[str, DeclaredSpace]:
        """The spaces declared in a collection's metadata."""
        raw = metadata.get(METADATA_KEY)
        if not raw:
            return {}
        try:
            data = json.loads(raw)
            return {name: DeclaredSpace(name, str(d["model"]), int(d["dim"]), bool(d.get("complete", False)),
                                        float(d.get("declared_at", 0.0)))
                    for name, d in data.items()}
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise ConfigurationError(f"the store's {METADATA_KEY!r} metadata is not valid ({e}): {raw!r}") from None

    @staticmethod
    def dump(declared: Mapping[str, DeclaredSpace]) -> str:
        """``declared`` as the collection metadata value."""
        return json.dumps({d.name: {"model": d.model, "dim": d.dim, "complete": d.complete,
                                    "declared_at": d.declared_at} for d in declared.values()}, sort_keys=True)

    @classmethod
    def resolve(cls, collection: str, declared: Mapping[str, DeclaredSpace], *, read_only: bool) -> StoreSpaces:
        """The spaces of an opened store with their embedders, checked against what this process runs.

        Raises:
            EmbedderMismatchError: a space's model here differs from the store's.
            ConfigurationError: a space's model cannot be loaded here and the store is writable (its writes
                could not carry the space): install it or open the store read-only.
        """
        out = cls(dict(declared))
        out.embedders = _embedders(collection, declared, missing_ok=read_only)
        return out

    def adopt(self, collection: str, changes: Mapping[str, DeclaredSpace]) -> None:
        """Use new or changed declarations (just written to the store), with the embedders of new spaces.

        Raises:
            EmbedderMismatchError, ConfigurationError: as :meth:`resolve` for a writable store.
        """
        embedders = _embedders(collection, changes)
        self._use(changes, embedders)

    def refresh(self, collection: str, declared: Mapping[str, DeclaredSpace]) -> bool:
        """Use the declarations as the store has them now (read from it again: another process may have added
        a space, or completed one). A space this process cannot compute (its model is not installed, or runs
        another model) is not carried by its writes, with a WARNING: readers then leave it out of the scopes
        those records belong to, and say so (never a failed write).

        Returns:
            Whether a space became complete: snapshots read before it did lack it and should be read again.
        """
        self.read_at = time.monotonic()
        changes = {name: d for name, d in declared.items() if self.declared.get(name) != d}
        if not changes:
            return False
        embedders = _embedders(collection, changes, missing_ok=True, other_ok=True)
        for name in changes:
            logger.info("%s: vector space %r is now declared %s (by another process)", collection, name,
                        "complete" if changes[name].complete else "as being added")
        became_complete = any(d.complete and not getattr(self.declared.get(name), "complete", False)
                              for name, d in changes.items())
        self._use(changes, embedders)
        return became_complete

    def due(self, seconds: float) -> bool:
        """Whether the declarations were last read more than ``seconds`` ago."""
        return time.monotonic() - self.read_at >= seconds

    def _use(self, changes: Mapping[str, DeclaredSpace], embedders: Mapping[str, Any]) -> None:
        """Take ``changes`` with the ``embedders`` that compute them here. New dicts replace the old ones, so a
        put encoding in another thread meanwhile keeps iterating the ones it started with."""
        computed = {name: e for name, e in self.embedders.items() if name not in changes}
        self.declared = {**self.declared, **changes}
        self.embedders = {**computed, **embedders}

    @staticmethod
    def declare(name: str, *, complete: bool) -> DeclaredSpace:
        """A declaration of space ``name`` with the model this process runs for it."""
        embedder = vs.space_embedder(name)
        return DeclaredSpace(name, embedder.model_id, int(embedder.dim), complete, round(time.time(), 3))

    def models(self) -> dict[str, str]:
        """name -> model id of every declared space."""
        return {name: d.model for name, d in self.declared.items()}

    # ------------------------------------------------------------------ rows
    def encode(self, texts: Sequence[str], reuse: Sequence[Mapping[str, Any] | None] = (),
               given: Mapping[str, Any] | None = None) -> tuple[list[dict[str, str]], dict[str, np.ndarray]]:
        """The metadata values and vectors of every computable space for records embedding ``texts``.

        Args:
            texts: the embedded text of each record (its stored document, ``record.search_text()``: with the
                date line of a dated record).
            reuse: the stored metadata of each record (or None), whose vectors are kept when they embed the
                same text with the same model (a status change, a supersede: nothing is embedded again).
            given: precomputed vectors of some spaces (``name -> (n, dim)``; an import). Rows within 1e-3 of
                unit length are kept as they are (an export's vectors read back exactly).

        Returns:
            ``(metadata per record, {space: (n, dim) vectors as they read back})``.

        Raises:
            RecordValidationError: a given space's vectors have the wrong shape or values.
        """
        n = len(texts)
        metas: list[dict[str, str]] = [{} for _ in range(n)]
        arrays: dict[str, np.ndarray] = {}
        for name, embedder in self.embedders.items():
            key = vs.meta_key(name)
            out = np.empty((n, embedder.dim), dtype=np.float32)
            todo = []
            if given and name in given:
                fresh = vs.quantized(_as_given(given[name], n, embedder, name))
                metas = [{**m, key: vs.encode_vector(v, embedder.model_id, t)}
                         for m, v, t in zip(metas, fresh, texts, strict=True)]
                arrays[name] = fresh
                continue
            for i, text in enumerate(texts):
                row = reuse[i] if i < len(reuse) else None
                vec = current_vector(row, key, self.declared[name], text)
                if vec is None:
                    todo.append(i)
                else:
                    out[i] = vec
                    metas[i][key] = row[key]  # type: ignore[index]
            if todo:
                fresh = vs.quantized(embedder.embed_documents([vs.space_text(texts[i]) for i in todo]))
                for j, i in enumerate(todo):
                    out[i] = fresh[j]
                    metas[i][key] = vs.encode_vector(fresh[j], embedder.model_id, texts[i])
            arrays[name] = out
        return metas, arrays

    def decode(self, metadatas: Sequence[Mapping[str, Any] | None], texts: Sequence[str],
               what: str = "") -> dict[str, np.ndarray]:
        """The vectors of each declared space every one of ``metadatas`` has for its record's text ``texts[i]``
        (a space some row lacks, or has for another text, is left out: see the module docstring)."""
        return self.complete(self.rows_of(metadatas, texts), len(metadatas), what)

    def computed(self) -> dict[str, DeclaredSpace]:
        """The declared spaces this process computes (has an embedder for): those a read decodes."""
        return {name: space for name, space in self.declared.items() if name in self.embedders}

    def rows_of(self, metadatas: Sequence[Mapping[str, Any] | None],
                texts: Sequence[str]) -> dict[str, tuple[np.ndarray, int]]:
        """``name -> (rows, lacking)`` of each declared space this process computes: the vectors ``metadatas``
        hold for the texts (a row without a current one is left unset) and how many rows lack one. A read in
        chunks decodes each chunk's and gives the sums to :meth:`complete`."""
        out: dict[str, tuple[np.ndarray, int]] = {}
        for name, space in self.computed().items():
            key = vs.meta_key(name)
            rows = np.empty((len(metadatas), space.dim), dtype=np.float32)
            lacking = 0
            for i, meta in enumerate(metadatas):
                vec = current_vector(meta, key, space, texts[i])
                if vec is None:
                    lacking += 1
                else:
                    rows[i] = vec
            out[name] = (rows, lacking)
        return out

    def complete(self, rows: Mapping[str, tuple[np.ndarray, int]], n: int, what: str = "") -> dict[str, np.ndarray]:
        """The spaces of :meth:`rows_of` (over ``n`` rows) that no row lacks; each space some row lacks is left
        out and reported (a WARNING once when the store says the space is complete)."""
        out: dict[str, np.ndarray] = {}
        for name, (array, lacking) in rows.items():
            if lacking:
                self._lacking(name, self.declared[name], lacking, n, what)
            else:
                out[name] = array
        return out

    def lacking(self, name: str, meta: Mapping[str, Any] | None, text: str) -> bool:
        """Whether a row lacks a current vector of space ``name`` (missing, another model's, or of another
        text)."""
        return current_vector(meta, vs.meta_key(name), self.declared[name], text) is None

    def _lacking(self, name: str, space: DeclaredSpace, lacking: int, n: int, what: str) -> None:
        hint = f"agently-vecmem reindex STORE --add-space {name}"
        if space.complete and name not in self._warned:
            self._warned.add(name)
            logger.warning("%d of %d records of %s lack vector space %r (written by an older version or with "
                           "another model): it is not used there until `%s` repairs them", lacking, n,
                           what or "a scope", name, hint)
        else:
            logger.debug("%d of %d records of %s lack vector space %r (being added: %s)", lacking, n, what, name, hint)


def _embedders(collection: str, declared: Mapping[str, DeclaredSpace], *, missing_ok: bool = False,
               other_ok: bool = False) -> dict[str, Any]:
    """The embedders of the ``declared`` spaces this process can compute. A space whose model is not installed
    (unless ``missing_ok``), or differs from the store's (unless ``other_ok``), raises; with the flag it is left
    out with a WARNING.

    Raises:
        EmbedderMismatchError: a space's model here differs from the store's.
        ConfigurationError: a space's model cannot be loaded here.
    """
    out: dict[str, Any] = {}
    for name, space in declared.items():
        if not vs.space_available(name):
            if missing_ok:
                logger.warning("%s keeps vector space %r (%s), whose model is not installed here: CJK queries "
                               "use the primary vectors, and this process's writes lack the space", collection,
                               name, space.model)
                continue
            raise ConfigurationError(
                f"collection {collection!r} keeps vector space {name!r} ({space.model}), whose model is not "
                "installed here: pip install 'agently-vecmem[multilingual]', or open the store read-only")
        embedder = vs.space_embedder(name)
        if embedder.model_id != space.model or int(embedder.dim) != space.dim:
            problem = (f"collection {collection!r} keeps vector space {name!r} with model {space.model!r} (dim "
                       f"{space.dim}), but this process computes {name!r} with {embedder.model_id!r} (dim "
                       f"{embedder.dim})")
            if not other_ok:
                raise EmbedderMismatchError(problem)
            logger.warning("%s: not computed here", problem)
            continue
        out[name] = embedder
    return out


def current_vector(meta: Mapping[str, Any] | None, key: str, space: DeclaredSpace, text: str) -> np.ndarray | None:
    """The row's vector in ``space`` when it embeds ``text`` with the space's model, else None."""
    encoded = (meta or {}).get(key)
    if vs.encoded_digest(encoded, space.model) != vs.text_digest(text):
        return None
    return vs.decode_vector(encoded, space.model, space.dim)


def _as_given(vectors: Any, n: int, embedder: Any, name: str) -> np.ndarray:
    """Given vectors of a space, validated; rows already (about) unit length are not normalized again, so an
    exported store's float16 vectors import bit for bit."""
    return check_vectors(vectors, n, embedder.dim, embedder.model_id, f"{name} vectors",
                         unit_tolerance=STORED_SPACE_TOLERANCE)

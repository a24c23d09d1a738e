"""Checks a :class:`~agently_vecmem.workspace.ChromaWorkspace` runs before it trusts its input or a
collection: the mandatory scope of every read, the shape and values of vectors, the parsing of records to
put (with their ``vector_index`` filled in), and the embedder a collection was created with. Pure
functions: nothing here does I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..embedders.base import normalize_rows
from ..errors import EmbedderMismatchError, RecordValidationError, ScopeError
from ..filters import Scope
from ..records import MemoryRecord, parse_record

__all__ = ["check_embedder", "check_vectors", "parse_records", "require_scope"]


def require_scope(scope: Any) -> None:
    """Raise :class:`ScopeError` unless ``scope`` is a :class:`Scope` (reads never default to every scope)."""
    if not isinstance(scope, Scope):
        raise ScopeError(
            "scope is required: pass Scope.global_memory(), Scope.session_memory(session_id), "
            "or ALL_SCOPES to read every scope deliberately"
        )


#: How far from 1 the norm of a named space's stored row may be and still count as unit length: spaces are
#: stored in float16 (``search.spaces.encode_vector``), which moves a unit row's norm by up to ~5e-4.
STORED_SPACE_TOLERANCE = 1e-3


def check_vectors(vectors: Any, n: int, dim: int, model_id: str, what: str = "vectors", *,
                  unit_tolerance: float = 1e-6) -> np.ndarray:
    """``vectors`` as a finite, non-zero ``(n, dim)`` float32 array of unit rows (rows whose norm is within
    ``unit_tolerance`` of 1 as given, the others normalized).

    Raises:
        RecordValidationError: wrong shape, not numeric, NaN/infinite values or an all-zero row.
    """
    try:
        arr = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise RecordValidationError(f"{what}: not a numeric ({n}, {dim}) array ({e})") from None
    if arr.ndim != 2 or arr.shape != (n, dim):
        raise RecordValidationError(
            f"{what}: expected shape ({n}, {dim}) for model {model_id!r}, "
            f"got {tuple(arr.shape)}"
        )
    if not np.isfinite(arr).all():
        bad = int(np.flatnonzero(~np.isfinite(arr).all(axis=1))[0])
        raise RecordValidationError(f"{what}: row {bad} contains NaN or infinite values")
    zero = np.flatnonzero(~arr.any(axis=1))
    if zero.size:  # a zero vector has no cosine similarity to anything
        raise RecordValidationError(f"{what}: row {int(zero[0])} is all zeros")
    # Unit rows pass through untouched: re-normalizing stored vectors on every rewrite (update,
    # soft delete, import) would make them drift in the last bits.
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    return np.where(np.abs(norms - 1.0) > unit_tolerance, normalize_rows(arr), arr)


def parse_records(items: list[Any], fields: Mapping[str, Any]) -> list[MemoryRecord]:
    """Validate records (or dicts of the record contract) with ``fields`` merged into their ``vector_index``.

    Raises:
        RecordValidationError: an item is invalid (named ``records[i]`` when there are several).
    """
    out = []
    for i, item in enumerate(items):
        # A MemoryRecord is validated again: its lists and dicts may have been mutated in place.
        data = item.model_dump(warnings=False) if isinstance(item, MemoryRecord) else item
        try:
            if isinstance(data, Mapping) and isinstance(data.get("vector_index", {}), Mapping):
                data = {**data, "vector_index": {**data.get("vector_index", {}), **fields}}
                out.append(parse_record(data))
            else:
                record = parse_record(data)
                vi = record.vector_index.model_copy(update=dict(fields))
                out.append(record.model_copy(update={"vector_index": vi}))
        except RecordValidationError as e:
            raise RecordValidationError(f"records[{i}]: {e}" if len(items) > 1 else str(e)) from None
    return out


def check_embedder(name: str, have: Mapping[str, Any], want: Mapping[str, Any]) -> None:
    """Refuse a collection whose metadata ``have`` records another embedder than ``want`` (or none).

    Raises:
        EmbedderMismatchError: the collection was not made by agently-vecmem, or with another model or dimension.
    """
    if "vecmem_embedder_model" not in have:
        raise EmbedderMismatchError(
            f"collection {name!r} was not created by agently-vecmem (no embedder recorded); "
            "use another collection name"
        )
    if have.get("vecmem_embedder_model") != want["vecmem_embedder_model"] or int(
        have.get("vecmem_embedder_dim", -1)
    ) != want["vecmem_embedder_dim"]:
        raise EmbedderMismatchError(
            f"collection {name!r} holds vectors of model {have.get('vecmem_embedder_model')!r} "
            f"(dim {have.get('vecmem_embedder_dim')}), but this Workspace embeds with "
            f"{want['vecmem_embedder_model']!r} (dim {want['vecmem_embedder_dim']}). Open it with the same embedder, "
            "or export it and import with re-embedding (`agently-vecmem import --reembed`)."
        )

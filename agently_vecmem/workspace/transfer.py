"""The JSONL transfer format of a store: records with their vectors, one JSON object a line after a header
naming the embedding model and dimension (and the model and dimension of each named vector space the lines
carry: ``{"record", "vector", "spaces": {name: vector}}``; a file without spaces imports into a store with
spaces by computing them). Pure file I/O over rows and records; the store's
:meth:`~agently_vecmem.workspace.ChromaWorkspace.export_jsonl` / ``import_jsonl`` read and write it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..embedders.base import Embedder
from ..errors import EmbedderMismatchError, RecordValidationError
from ..records import MemoryRecord, parse_record
from .validation import STORED_SPACE_TOLERANCE, check_vectors

__all__ = ["FORMAT", "write_jsonl", "read_jsonl", "progress_bar"]

#: The ``format`` field of the header line.
FORMAT = "agently-vecmem/jsonl"


def progress_bar(iterable: Iterable[Any], total: int, desc: str, enabled: bool, *,
                 unit: str = "batch") -> Iterable[Any]:
    """``iterable`` with a tqdm bar when ``enabled`` (bulk puts, imports and exports count batches; the
    evaluation counts its items, ``unit="it"``)."""
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, unit=unit)


def write_jsonl(path: str | os.PathLike[str], records: Sequence[MemoryRecord], vectors: np.ndarray, *,
                embedder: Embedder, version: int, progress: bool,
                spaces: Mapping[str, tuple[str, np.ndarray]] | None = None) -> int:
    """Write records with their vectors (and ``spaces``: name -> (model id, vectors)) after the header
    (atomically: a temporary file, then replaced); ``version`` is the schema version written in the header.
    Returns how many were written."""
    spaces = dict(spaces or {})
    tmp = Path(str(path) + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        header = {"format": FORMAT, "version": version,
                  "embedder_model": embedder.model_id, "dim": embedder.dim, "count": len(records),
                  "spaces": {name: {"model": model, "dim": int(vecs.shape[1])} for name, (model, vecs) in spaces.items()}}
        fh.write(json.dumps(header) + "\n")
        for i in progress_bar(range(len(records)), len(records), "exporting", progress, unit="record"):
            line = {"record": records[i].model_dump(mode="json"), "vector": vectors[i].tolist()}
            if spaces:
                line["spaces"] = {name: vecs[i].tolist() for name, (_, vecs) in spaces.items()}
            fh.write(json.dumps(line) + "\n")
    os.replace(tmp, path)
    return len(records)


def read_jsonl(path: str | os.PathLike[str], *, embedder: Embedder, reembed: bool,
               spaces: Mapping[str, str] | None = None) -> tuple[
                   list[MemoryRecord], list[np.ndarray] | None, dict[str, list[np.ndarray]]]:
    """Every record of an export, validated whole before anything is written, with its vector (None with
    ``reembed``: the caller embeds them again), and the vectors of the named ``spaces`` (name -> model id of
    the importing store) the file carries with the same model (the others are computed by the caller).

    Raises:
        EmbedderMismatchError: the file's model differs from ``embedder`` and ``reembed`` is False.
        RecordValidationError: the header or a line is invalid (its line number is given).
    """
    with open(path, encoding="utf-8") as fh:
        try:
            header = json.loads(fh.readline())
        except json.JSONDecodeError as e:
            raise RecordValidationError(f"{path}: line 1 is not a JSON header: {e}") from None
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise RecordValidationError(f"{path}: not an agently-vecmem export (missing header)")
        same_model = header.get("embedder_model") == embedder.model_id and header.get("dim") == embedder.dim
        if not same_model and not reembed:
            raise EmbedderMismatchError(
                f"{path} was embedded with {header.get('embedder_model')!r} (dim {header.get('dim')}); "
                f"this Workspace uses {embedder.model_id!r} (dim {embedder.dim}). "
                "Import with reembed=True (CLI: --reembed) to embed the records again."
            )
        raw_spaces = header.get("spaces")
        file_spaces: dict[str, Any] = raw_spaces if isinstance(raw_spaces, dict) else {}
        kept = {name: (model, int(file_spaces[name]["dim"])) for name, model in (spaces or {}).items()
                if not reembed and isinstance(file_spaces.get(name), dict) and file_spaces[name].get("model") == model}
        records, vectors = [], []
        space_rows: dict[str, list[np.ndarray]] = {name: [] for name in kept}
        for lineno, line in enumerate(fh, start=2):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                records.append(parse_record(item["record"]))
                if not reembed:
                    vectors.append(check_vectors([item.get("vector")], 1, embedder.dim, embedder.model_id,
                                                 "vector")[0])
                for name, (model, dim) in kept.items():
                    space_rows[name].append(check_vectors([item["spaces"][name]], 1, dim, model, f"{name} vector",
                                                          unit_tolerance=STORED_SPACE_TOLERANCE)[0])
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError, RecordValidationError) as e:
                raise RecordValidationError(f"{path}: line {lineno}: {e}") from None
    return records, None if reembed else vectors, space_rows

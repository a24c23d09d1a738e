"""JSONL export and import of a :class:`~agently_vecmem.workspace.ChromaWorkspace`: the records with their
vectors, one JSON object a line after a header naming the embedding model and dimension.

:meth:`ChromaWorkspace.export_jsonl` and :meth:`ChromaWorkspace.import_jsonl` are the public entry points;
they delegate here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import EmbedderMismatchError, RecordValidationError
from ..filters import Scope
from ..records import parse_record
from .validation import require_scope

if TYPE_CHECKING:
    from .chroma import ChromaWorkspace

__all__ = ["FORMAT", "export_jsonl", "import_jsonl", "progress_bar"]

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


def export_jsonl(ws: ChromaWorkspace, path: str | os.PathLike[str], *, scope: Scope, progress: bool,
                 version: int) -> int:
    """See :meth:`ChromaWorkspace.export_jsonl`; ``version`` is the schema version written in the header."""
    require_scope(scope)
    ws._check_open()
    rows = ws._scope_rows(scope, "export")
    tmp = Path(str(path) + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        header = {"format": FORMAT, "version": version,
                  "embedder_model": ws.embedder.model_id, "dim": ws.embedder.dim, "count": len(rows)}
        fh.write(json.dumps(header) + "\n")
        for rec, _doc, vec in progress_bar(rows, len(rows), "exporting", progress):
            fh.write(json.dumps({"record": rec.model_dump(mode="json"), "vector": vec.tolist()}) + "\n")
    os.replace(tmp, path)
    return len(rows)


def import_jsonl(ws: ChromaWorkspace, path: str | os.PathLike[str], *, reembed: bool, progress: bool,
                 batch: int) -> int:
    """See :meth:`ChromaWorkspace.import_jsonl`; with ``reembed`` the records are put ``batch`` at a time."""
    with open(path, encoding="utf-8") as fh:
        try:
            header = json.loads(fh.readline())
        except json.JSONDecodeError as e:
            raise RecordValidationError(f"{path}: line 1 is not a JSON header: {e}") from None
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise RecordValidationError(f"{path}: not an agently-vecmem export (missing header)")
        same_model = header.get("embedder_model") == ws.embedder.model_id and header.get("dim") == ws.embedder.dim
        if not same_model and not reembed:
            raise EmbedderMismatchError(
                f"{path} was embedded with {header.get('embedder_model')!r} (dim {header.get('dim')}); "
                f"this Workspace uses {ws.embedder.model_id!r} (dim {ws.embedder.dim}). "
                "Import with reembed=True (CLI: --reembed) to embed the records again."
            )
        records, vectors = [], []
        for lineno, line in enumerate(fh, start=2):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                records.append(parse_record(item["record"]))
                if not reembed:
                    vectors.append(ws._check_vectors([item.get("vector")], 1, "vector")[0])
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError, RecordValidationError) as e:
                raise RecordValidationError(f"{path}: line {lineno}: {e}") from None
    if not records:
        return 0
    if reembed:
        stored = 0
        for start in range(0, len(records), batch):
            stored += len(ws.put(records[start:start + batch], progress=progress))
        return stored
    return len(ws.put(records, vectors=vectors, progress=progress))

"""What a cached scope's records cost beside their vectors, and what loading its persisted snapshot costs, with
one fields-set per record (pydantic's default, before ``records.stored_form``) and with the one fields-set all
stored records share (this version).

For N records of the scale benchmarks' English-like corpus (``_scale_data.py``), read back as a read from Chroma
gives them (``MemoryRecord.from_chroma``), in one run, side by side:

* bytes per record beside the vectors (``tracemalloc``): the records, their documents, the id index and the
  derived structures the first retrieval builds (BM25 postings, order columns, neighbour links);
* the scope's persisted snapshot (``workspace/snapshots.py``): its size and the p50 time to load it (what a
  fresh worker pays before its first answer over the scope, beside opening the store).

No Chroma, no embedding model: only the in-process structures are measured.

Usage: ``python benchmarks/bench_record_memory.py [--quick] [--sizes 10000,50000,100000] [--repeat 3]``
"""

from __future__ import annotations

import contextlib
import gc
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402
import numpy as np  # noqa: E402
from _scale_data import Corpus, global_records  # noqa: E402

from agently_vecmem import records as records_module  # noqa: E402
from agently_vecmem.filters import Scope  # noqa: E402
from agently_vecmem.records import MemoryRecord  # noqa: E402
from agently_vecmem.search.candidates import warm_view  # noqa: E402
from agently_vecmem.search.view import ScopeView  # noqa: E402
from agently_vecmem.workspace.snapshots import SnapshotFiles  # noqa: E402

SCOPE = Scope.global_memory()
MODES = ("a set per record", "one shared set")


def _own_set(record: MemoryRecord) -> MemoryRecord:
    object.__setattr__(record, "__pydantic_fields_set__", set(record.__pydantic_fields_set__))
    return record


@contextlib.contextmanager
def mode(name: str) -> Iterator[None]:
    """``a set per record``: every record read gets a fields-set of its own (the code before this change)."""
    if name == MODES[0]:
        with mock.patch.object(records_module, "stored_form", _own_set):
            yield
    else:
        yield


def read_back(rows: list[tuple[str, dict, str]]) -> tuple[list[MemoryRecord], list[str]]:
    """Records and documents as a read from Chroma makes them (new objects, documents as new strings)."""
    return [MemoryRecord.from_chroma(rid, meta) for rid, meta, _ in rows], [(doc + ".")[:-1] for *_, doc in rows]


def measure(rows: list[tuple[str, dict, str]], vectors: np.ndarray, name: str, repeat: int) -> dict[str, float]:
    n = len(rows)
    with mode(name):
        gc.collect()
        tracemalloc.start()
        records, documents = read_back(rows)
        view = ScopeView(SCOPE, records, vectors.copy(), documents)
        warm_view(view)
        view.id_index()
        gc.collect()
        per_record = (tracemalloc.get_traced_memory()[0] - view.vector_bytes) / n
        tracemalloc.stop()
        loads = []
        with tempfile.TemporaryDirectory(prefix="bench-record-memory-") as tmp:
            files = SnapshotFiles(tmp, {"collection": "bench", "model": "hash", "dim": int(vectors.shape[1])})
            files.save(SCOPE.key, view.records, view.documents, view.rows(slice(None)), view.derived, {"kind": "seq"})
            size = c.disk_bytes(tmp)
            del view, records, documents
            for _ in range(repeat):
                gc.collect()
                t = time.perf_counter()
                loaded = files.load(SCOPE.key)
                loads.append(time.perf_counter() - t)
                assert loaded is not None and len(loaded.records) == n
                del loaded
    return {"bytes_per_record": per_record, "load_s": c.p50(loads), "file_mb": size / 1e6}


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    args, sizes = c.sized_args(p, "10000,50000,100000", "2000", 3)
    print(f"bench_record_memory ({c.load()})", flush=True)
    corpus = Corpus(seed=args.seed)
    ratios = []
    for n in sizes:
        rows, vecs = [], []
        for batch, vectors in global_records(corpus, n):
            rows += [(r.id, r.to_chroma(), r.search_text()) for r in batch]
            vecs.append(vectors)
        vectors = np.concatenate(vecs)
        got = {name: measure(rows, vectors, name, args.repeat) for name in MODES}
        print(f"{n:,} records (vectors: {vectors.nbytes / n:,.0f} B per record)")
        for name in MODES:
            g = got[name]
            c.row(f"  {name}", f"{g['bytes_per_record']:6,.0f} B/record beside the vectors",
                  f"snapshot {g['file_mb']:6.1f} MB, load p50 {g['load_s']:6.3f} s")
        old, new = got[MODES[0]], got[MODES[1]]
        ratios.append(new["bytes_per_record"] / old["bytes_per_record"])
        c.row("  shared / per record", f"{ratios[-1]:.2f}x bytes", f"{new['load_s'] / old['load_s']:.2f}x load")
    c.summary("bench_record_memory", max(ratios) < 1.0,
              f"a stored record's memory beside its vectors: {', '.join(f'{r:.2f}x' for r in ratios)} of a set per "
              f"record at {', '.join(f'{n:,}' for n in sizes)} records")


if __name__ == "__main__":
    main()

"""What rewriting records costs in a big cached scope: an importance change, a supersede (the old version
leaves the active scope, the new one is appended: what consolidation's UPDATE/SUPERSEDE writes) and a hard
delete of one record, in a GLOBAL scope of N records, and an importance change followed by a new record (the
append after a rewrite in place), each followed by the next retrieval.

Side by side in one run, in rotation:

* **rebuild** (before the derived structures were kept): the write builds a new snapshot from a copy of the
  scope, and the next retrieval builds its lexical index, order columns and neighbour links again over every
  record;
* **copy**: as *kept*, except that a removal copies the kept rows instead of leaving holes;
* **kept** (this version, ``ScopeView._rewritten``): a rewrite in place shares the vector rows, a removal
  leaves its rows as holes in them (copied only when the holes outnumber an eighth of the scope), the append
  after either writes in place, and the derived structures survive (the BM25 postings and order columns are
  filtered, not rebuilt).

The hash embedder (embedding is not what is measured), an embedded store, no persisted snapshots.

Usage: ``python benchmarks/bench_rewrite.py [--quick] [--sizes 10000,50000] [--repeat 6]``
"""

from __future__ import annotations

import contextlib
import random
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402

from agently_vecmem.eval.filler import filler_records  # noqa: E402
from agently_vecmem.filters import Scope  # noqa: E402
from agently_vecmem.memory.pending import supersede  # noqa: E402
from agently_vecmem.records import MemoryRecord  # noqa: E402
from agently_vecmem.search import view as view_module  # noqa: E402
from agently_vecmem.search.candidates import retrieve_candidates  # noqa: E402
from agently_vecmem.testing import DeterministicEmbedder  # noqa: E402
from agently_vecmem.workspace import ChromaWorkspace  # noqa: E402

GLOBAL = Scope.global_memory()
QUERIES = ["What does my sister teach?", "Where did we go for the holidays?", "Which dog did I adopt?"]


@contextlib.contextmanager
def rebuilding() -> Iterator[None]:
    """Every rewrite rebuilds its snapshot and the derived structures (the code path before this change)."""
    with mock.patch.object(view_module.ScopeView, "_rewritten", lambda self, *a, **k: None), \
            mock.patch.dict(view_module._KEPT_ON_REWRITE, clear=True):
        yield


@contextlib.contextmanager
def copying() -> Iterator[None]:
    """A removal copies the kept rows instead of leaving holes (the derived structures are still kept)."""
    with mock.patch.object(view_module, "keeps_holes", lambda holes, kept: False):
        yield


MODES: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "rebuild": rebuilding, "copy": copying, "kept": contextlib.nullcontext}


def retrieve(ws: ChromaWorkspace, query: str) -> float:
    """Seconds of one retrieval over the GLOBAL scope (the snapshot, its structures, the candidates)."""
    return c.timed(lambda: retrieve_candidates(ws.view(GLOBAL), query, ws.embed_query(query), k=10))[0]


def operations(ws: ChromaWorkspace, rng: random.Random) -> dict[str, Callable[[], object]]:
    def pick() -> MemoryRecord:
        view = ws.view(GLOBAL)
        return view.records[rng.randrange(len(view))]

    def importance() -> object:
        return ws.update(pick().id, importance=round(rng.random(), 3))

    def superseded() -> object:
        old = pick()
        new = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f"{old.summary} (corrected)", supersedes=old.id)
        return ws.put([supersede(old, new.id), new])

    def delete() -> object:
        return ws.delete([pick().id])

    def importance_then_new() -> object:
        importance()
        return ws.put([MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f"a new note {rng.random():.6f}")])

    return {"importance change": importance, "supersede": superseded, "delete": delete,
            "importance change + a new record": importance_then_new}


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10000,50000", help="GLOBAL scope sizes (records)")
    p.add_argument("--repeat", type=int, default=6, help="writes of each kind per mode")
    args = p.parse_args()
    sizes = [2000] if args.quick else [int(x) for x in args.sizes.split(",")]
    repeat = 2 if args.quick else args.repeat
    rng = random.Random(args.seed)
    print(f"bench_rewrite ({c.load()}): one write + the next retrieval, p50 ms; rebuild / copy / kept side by side")
    ratios: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-rewrite-") as tmp:
        for n in sizes:
            ws = ChromaWorkspace(str(Path(tmp) / f"s{n}"), embedder=DeterministicEmbedder(), snapshots=False,
                                 spaces=[])
            records = filler_records("en", n, args.seed)
            for i in range(0, n, 5000):
                ws.put(records[i:i + 5000])
            retrieve(ws, QUERIES[0])  # load the scope and build its structures
            for name, write in operations(ws, rng).items():
                times: dict[str, tuple[list[float], list[float]]] = {mode: ([], []) for mode in MODES}
                for i in range(len(MODES) * repeat):
                    mode = list(MODES)[(i + i // len(MODES)) % len(MODES)]  # rotate, changing which goes first
                    with MODES[mode]():
                        retrieve(ws, QUERIES[i % len(QUERIES)])  # the structures of the current snapshot
                        ws.view(GLOBAL).id_index().get("")  # and its id index: every mode starts warm
                        put = c.timed(write)[0]
                        query = retrieve(ws, QUERIES[(i + 1) % len(QUERIES)])
                    times[mode][0].append(put)
                    times[mode][1].append(query)
                cells = []
                totals = {}
                for mode, (puts, queries) in times.items():
                    totals[mode] = c.p50(puts) + c.p50(queries)
                    cells.append(f"{mode} {c.p50(puts) * 1e3:6.1f} + {c.p50(queries) * 1e3:6.1f}")
                ratios[f"{name} {n}"] = totals["kept"] / totals["rebuild"]
                c.row(f"{n:,} records, {name}", *cells,
                      f"kept/rebuild {ratios[f'{name} {n}']:.2f} kept/copy {totals['kept'] / totals['copy']:.2f}",
                      width=46)
            ws.close()
    c.summary("bench_rewrite", all(r < 1.0 for r in ratios.values()),
              "write + next retrieval, kept / rebuild: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))


if __name__ == "__main__":
    main()

"""What removing a record from a cached scope snapshot costs in memory (issue 21), at several scope sizes, in
one run: a hard delete, a supersede (the old version leaves the scope, the new one is appended), each followed
by the id lookup the next write makes, and an importance change (a rewrite in place) as the reference.

No Chroma: a ``ScopeView`` of N GLOBAL records (``_scale_data``: English-like documents, hash-embedder
vectors) with its derived structures built by a first retrieval, then, p50 of ``--repeat`` each, on that
snapshot and then on the one each write makes (as a workspace chains its writes):

* ``delete``: ``view.without({id})`` and ``id_index().get`` on the result;
* ``supersede``: ``view.with_records([old version leaving, new version])`` and ``id_index().get``;
* ``importance``: ``view.with_records([same record, other importance])`` and ``id_index().get``;
* ``retrieval``: ``retrieve_candidates`` on the snapshot the writes made (the next answer).

Only public methods are called, so the same script measures an earlier version when run in a checkout of it
(``benchmarks/RESULTS.md`` compares two).

Usage: ``python benchmarks/bench_removal.py [--quick] [--sizes 10000,100000,1000000] [--repeat 7]``
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402
import _scale_data as data  # noqa: E402
import numpy as np  # noqa: E402

from agently_vecmem.filters import Scope  # noqa: E402
from agently_vecmem.records import MemoryRecord  # noqa: E402
from agently_vecmem.search.candidates import retrieve_candidates  # noqa: E402
from agently_vecmem.search.view import ScopeView  # noqa: E402

QUERY = "What did the user say about the orchestra training and the british opponents?"


def snapshot(corpus: data.Corpus, n: int) -> ScopeView:
    """A snapshot of ``n`` GLOBAL records, as a fresh load makes it."""
    records: list[MemoryRecord] = []
    vectors: list[np.ndarray] = []
    for batch, vecs in data.global_records(corpus, n):
        records.extend(batch)
        vectors.append(vecs)
    return ScopeView(Scope.global_memory(), tuple(records), np.concatenate(vectors),
                     tuple(r.search_text() for r in records))


def measure(view: ScopeView, qvec: np.ndarray, rng: random.Random, repeat: int) -> dict[str, float]:
    """p50 ms of each write, chained on the newest snapshot, then of the retrieval after them."""
    retrieve_candidates(view, QUERY, qvec, k=10)  # the derived structures a cached scope has
    version = 1

    def write(records: list[MemoryRecord], rows: list[int], find: str) -> None:
        nonlocal view, version
        version += 1
        new = view.with_records(records, view.rows(rows), [r.search_text() for r in records], version)
        assert new is not None
        new.id_index().get(find)
        view = new

    def delete() -> None:
        nonlocal view, version
        version += 1
        rid = view.records[rng.randrange(len(view))].id
        new = view.without({rid}, version)
        assert new is not None
        new.id_index().get(rid)
        view = new

    def supersede() -> None:
        i = rng.randrange(len(view))
        old = view.records[i]
        gone = old.model_copy(update={"status": "superseded", "superseded_by": f"new{version}"})
        new = old.model_copy(update={"id": f"new{version}", "created_at": 2e9 + version, "updated_at": 2e9 + version})
        write([gone, new], [i, i], new.id)

    def importance() -> None:
        i = rng.randrange(len(view))
        rec = view.records[i]
        write([rec.model_copy(update={"importance": rng.random()})], [i], rec.id)

    timings = {name: c.p50_ms(fn, repeat) for name, fn in
               (("delete", delete), ("supersede", supersede), ("importance", importance))}
    timings["retrieval"] = c.p50_ms(lambda: retrieve_candidates(view, QUERY, qvec, k=10), repeat)
    return timings


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    args, sizes = c.sized_args(p, "10000,100000,1000000", "2000,10000", 7)
    print(f"bench_removal ({c.load()}): p50 ms of {args.repeat}; the ratio is to an importance change", flush=True)
    corpus = data.Corpus(args.seed)
    rng = random.Random(args.seed)
    qvec = corpus.embedder.embed_query(QUERY)
    worst = 0.0
    for n in sizes:
        timings = measure(snapshot(corpus, n), qvec, rng, args.repeat)
        base = timings["importance"]
        worst = max(worst, timings["delete"] / base, timings["supersede"] / base)
        print(f"{n:,} records")
        for name, label in (("delete", "hard delete + id lookup"), ("supersede", "supersede + id lookup"),
                            ("importance", "importance change + id lookup")):
            c.row(f"  {label}", f"{timings[name]:9.2f} ms", f"{timings[name] / base:6.2f}x importance")
        c.row("  retrieval after these writes", f"{timings['retrieval']:9.2f} ms")
    c.summary("bench_removal", True, f"a delete or supersede costs at most {worst:.2f}x an importance change at "
              f"{', '.join(f'{n:,}' for n in sizes)} records")


if __name__ == "__main__":
    main()

"""What a scope's BM25 index costs to keep current: appending one record and removing one, against building the
index over the scope again (what a snapshot without a kept index pays), and what scoring a query costs, at
several scope sizes, in one run.

The index (``agently_vecmem.search.lexical.BM25Index``) is what a cached scope snapshot extends on every
append and filters on every supersede or delete (``ScopeView`` keeps it, ``keep_on_rewrite``). Documents: the
growth probe's English filler sentences (``agently_vecmem/eval/filler.py``). Per size, p50 of ``--repeat``:

* ``extend``: the index of the scope plus one new document;
* ``without``: the index of the scope less one document (a supersede or a delete);
* ``query``: ``scores`` + ``best_term_scores`` + ``coverage`` of one question (what hybrid retrieval asks);
* ``build``: the index built over the scope (the baseline, measured in the same run).

Only public methods are called, so the same script measures an earlier version of the index when run in a
checkout of that version (``benchmarks/RESULTS.md`` compares two).

Usage: ``python benchmarks/bench_bm25.py [--quick] [--sizes 10000,100000,1000000] [--repeat 7]``
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402
import numpy as np  # noqa: E402

from agently_vecmem.eval.filler import filler_sentences  # noqa: E402
from agently_vecmem.search.lexical import BM25Index  # noqa: E402

QUESTIONS = ["What subject does my spouse teach?", "Where did I travel with my sister last summer?",
             "Which instrument does my son play?"]


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    args, sizes = c.sized_args(p, "10000,100000,1000000", "2000,10000", 7)
    print(f"bench_bm25 ({c.load()}): p50 ms of {args.repeat}; the ratio is to a build over the scope", flush=True)
    docs = filler_sentences("en", max(sizes) + 1, args.seed)
    worst = 0.0
    for n in sizes:
        scope, new = docs[:n], docs[n]
        build = c.p50_ms(lambda: BM25Index.build(scope), max(3, args.repeat // 2))  # noqa: B023
        index = BM25Index.build(scope)
        keep = np.ones(n, dtype=bool)
        keep[n // 2] = False
        extend = c.p50_ms(lambda: index.extend([new]), args.repeat)  # noqa: B023
        without = c.p50_ms(lambda: index.without(keep), args.repeat)  # noqa: B023
        query = c.p50_ms(lambda: [(index.scores(q), index.best_term_scores(q), index.coverage(q))  # noqa: B023
                                for q in QUESTIONS], args.repeat) / len(QUESTIONS)
        worst = max(worst, extend / build, without / build)
        print(f"{n:,} documents")
        c.row("  build over the scope", f"{build:9.2f} ms")
        c.row("  extend by one document", f"{extend:9.2f} ms", f"{extend / build:.4f}x build")
        c.row("  without one document", f"{without:9.2f} ms", f"{without / build:.4f}x build")
        c.row("  one question (scores, best terms, coverage)", f"{query:9.2f} ms")
    c.summary("bench_bm25", True, f"extend / without one document at most {worst:.4f}x a build over the scope "
              f"at {', '.join(f'{n:,}' for n in sizes)} documents")


if __name__ == "__main__":
    main()

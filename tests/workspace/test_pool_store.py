"""The pool path (``RetrievalParams.pool_min_records``) on scopes read from real Chroma, embedded and through a
``chroma run`` server, with the real MiniLM: the pool finds what the exact path finds, and the rows' sketch
follows the workspace's own writes and deletes, and on a server another worker's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from agently_vecmem.eval.filler import filler_records
from agently_vecmem.eval.probe import PROBE_DATA_PATH, SEPARATE_KINDS, load_probe, probe_records
from agently_vecmem.filters import Scope
from agently_vecmem.records import MemoryRecord
from agently_vecmem.search.candidates import retrieve_candidates
from agently_vecmem.search.params import RetrievalParams

GLOBAL = Scope.global_memory()
EXACT = RetrievalParams(pool_min_records=0)
POOL = RetrievalParams(pool_min_records=1, pool_size=40)  # a pool of ~80 of 520 records


def _top(ws: Any, question: str, params: RetrievalParams, k: int = 3) -> list[str]:
    return [c.record.id for c in retrieve_candidates(ws.view(GLOBAL), question, ws.embed_query(question), k=k,
                                                     params=params)]


@pytest.mark.slow
def test_the_pool_over_a_chroma_scope_follows_writes_and_deletes(workspace_factory: Any, minilm: Any) -> None:
    probe = load_probe(PROBE_DATA_PATH)
    items = [i for i in probe.items if i.kind not in SEPARATE_KINDS][:40]
    writer = workspace_factory(minilm, spaces=[])
    facts = probe_records(items, "en")
    writer.put(facts + filler_records("en", 480, 0, facts=[i.fact["en"] for i in items]))
    gold = {i.id: r.id for i, r in zip(items, facts, strict=True)}
    questions = [(i.question["en"], gold[i.id]) for i in items]
    agree = [g in _top(writer, q, POOL) for q, g in questions if g in _top(writer, q, EXACT)]
    assert len(agree) >= 20 and np.mean(agree) >= 0.9
    assert writer.view(GLOBAL)._cols.rows.sketch is not None

    # the workspace's own write: appended in place, the sketch projects the new row only
    sketch = writer.view(GLOBAL)._cols.rows.sketch
    new = MemoryRecord(id="fact-new", memory_scope="GLOBAL_MEMORY", summary="My sister keeps three goats on a farm in Wales.")
    writer.put(new)
    assert _top(writer, "Where does my sister keep her goats?", POOL, k=1) == ["fact-new"]
    assert writer.view(GLOBAL)._cols.rows.sketch is sketch

    # on a server, another workspace (another worker) sees the write and then the deletes, through its pool
    readers = [workspace_factory(minilm, spaces=[])] if workspace_factory.backend == "server" else []
    for reader in readers:
        assert _top(reader, "Where does my sister keep her goats?", POOL, k=1) == ["fact-new"]
    writer.delete("fact-new")
    writer.delete(questions[0][1], hard=True)
    for ws in (writer, *readers):
        assert "fact-new" not in _top(ws, "Where does my sister keep her goats?", POOL, k=10)
        assert questions[0][1] not in _top(ws, questions[0][0], POOL, k=10)

"""Bad input (issue #8, item 5): a clear error naming the field, and the collection stays fully usable.

Every case runs against one shared embedded collection; afterwards the count is unchanged and a fresh
put + search still works (so a rejected input never reached Chroma, e.g. a list metadata value that
would brick the collection).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agently_vecmem import (
    ALL_SCOPES,
    ConfigurationError,
    MemoryRecord,
    RecordValidationError,
    Scope,
    ScopeError,
)
from agently_vecmem.session import Session
from agently_vecmem.testing import DeterministicEmbedder, ScriptedModel
from agently_vecmem.workspace import ChromaWorkspace

DIM = 32


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory):
    path: Path = tmp_path_factory.mktemp("bad-input")
    ws = ChromaWorkspace(path, embedder=DeterministicEmbedder(dim=DIM))
    ws.put([MemoryRecord(memory_scope="GLOBAL_MEMORY", summary=f"baseline fact {i}") for i in range(3)])
    yield ws
    ws.close()


def rec(**kw: Any) -> dict[str, Any]:
    return {"memory_scope": "SESSION_MEMORY", "session_id": "s1", "summary": "a fact", **kw}


def mutated_record(ws: ChromaWorkspace) -> None:
    r = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="mutated in place")
    r.tags.extend(f"t{i}" for i in range(6000))  # bypasses validate_assignment; put must re-validate
    ws.put(r)


CASES: list[tuple[str, Callable[[ChromaWorkspace], Any], type[Exception], str]] = [
    ("huge tag list", lambda ws: ws.put(rec(tags=[f"t{i}" for i in range(10_000)])), RecordValidationError, "tags"),
    ("tag list past Chroma's brick size, mutated in place", mutated_record, RecordValidationError, "tags"),
    ("huge tag list via update", lambda ws: ws.update(ws.scan(scope=Scope.global_memory())[0].id,
                                                      tags=[str(i) for i in range(5500)]),
     RecordValidationError, "tags"),
    ("non-string tags", lambda ws: ws.put(rec(tags=["ok", 3])), RecordValidationError, "tags"),
    ("None tag", lambda ws: ws.put(rec(tags=[None])), RecordValidationError, "tags"),
    ("None summary", lambda ws: ws.put(rec(summary=None)), RecordValidationError, "summary"),
    ("None importance", lambda ws: ws.put(rec(importance=None)), RecordValidationError, "importance"),
    ("NaN importance", lambda ws: ws.put(rec(importance=math.nan)), RecordValidationError, "importance"),
    ("inf created_at", lambda ws: ws.put(rec(created_at=math.inf)), RecordValidationError, "created_at"),
    ("NaN in body", lambda ws: ws.put(rec(body={"x": math.nan})), RecordValidationError, "body"),
    ("NaN in provenance", lambda ws: ws.put(rec(provenance={"x": math.nan})), RecordValidationError, "provenance"),
    ("20 MB body", lambda ws: ws.put(rec(body={"blob": "x" * 20_000_000})), RecordValidationError, "body"),
    ("20 MB summary", lambda ws: ws.put(rec(summary="y" * 20_000_000)), RecordValidationError, "summary"),
    ("unknown scope name on a record", lambda ws: ws.put(rec(memory_scope="USER_MEMORY")),
     RecordValidationError, "memory_scope"),
    ("unknown record key", lambda ws: ws.put(rec(owner="admin")), RecordValidationError, "owner"),
    ("session record without session", lambda ws: ws.put(rec(session_id=None)), RecordValidationError,
     "session_id"),
    ("wrong dimension vector on put", lambda ws: ws.put(rec(), vectors=np.ones((1, DIM + 1))),
     RecordValidationError, "vectors"),
    ("NaN vector on put", lambda ws: ws.put(rec(), vectors=np.full((1, DIM), np.nan)), RecordValidationError,
     "vectors"),
    ("wrong dimension query", lambda ws: ws.search(np.ones(DIM + 5), scope=Scope.global_memory()),
     RecordValidationError, "vectors"),
    ("bad batch: one invalid record writes nothing", lambda ws: ws.put([rec(summary="good one"), rec(tags=[1])]),
     RecordValidationError, "records[1]"),
    ("unknown scope name", lambda ws: ws.scan(scope=Scope("PRIVATE_MEMORY")), ScopeError, "PRIVATE_MEMORY"),
    ("scope name via Scope.of", lambda ws: Scope.of("global"), ScopeError, "global"),
    ("missing scope", lambda ws: ws.scan(scope="GLOBAL_MEMORY"), ScopeError, "scope"),
    ("None filter value", lambda ws: ws.scan(scope=Scope.global_memory(), where={"tags": None}), ScopeError, "tags"),
    ("filter widening the scope", lambda ws: ws.scan(scope=Scope.session_memory("s1"),
                                                     where={"session_id": "other"}), ScopeError, "session_id"),
    ("NaN filter value", lambda ws: ws.scan(scope=Scope.global_memory(), where={"importance": {"$gt": math.nan}}),
     ScopeError, "importance"),
    ("bad k", lambda ws: ws.search("x", scope=Scope.global_memory(), k="many"), ConfigurationError, "k"),
]


@pytest.mark.parametrize(("name", "action", "error", "field"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_rejected_and_store_stays_usable(ws, name, action, error, field) -> None:
    before = ws.count(scope=ALL_SCOPES)
    with pytest.raises(error) as info:
        action(ws)
    assert isinstance(info.value, ValueError), "argument errors must also be ValueErrors"
    assert field in str(info.value), f"the error does not name {field!r}: {info.value}"
    assert len(str(info.value)) < 5_000, "the error message echoes the huge input"
    assert ws.count(scope=ALL_SCOPES) == before
    probe = MemoryRecord(memory_scope="SESSION_MEMORY", session_id="probe", summary=f"probe after {name}")
    ws.put(probe)
    assert ws.search(probe.summary, scope=Scope.session_memory("probe"), k=1)[0].record.id == probe.id
    assert ws.count(scope=ALL_SCOPES) == before + 1
    ws.delete(probe.id, hard=True)
    assert ws.count(scope=ALL_SCOPES) == before


@pytest.mark.parametrize(("key", "value", "field"), [
    ("retrieve.max_candidates", "many", "retrieve.max_candidates"),
    ("retrieve.bogus_key", 1, "bogus_key"),
    ("bogus_section", {"x": 1}, "bogus_section"),
    ("retrieve_plan.mode", "parallel", "retrieve_plan.mode"),
    ("consolidate.similarity_threshold", math.nan, "similarity_threshold"),
])
def test_invalid_settings_name_the_field_and_leave_memory_usable(ws, key, value, field) -> None:
    model = ScriptedModel()
    model.on("chat", lambda body: "reply")
    session = Session(id=f"settings-{field}").use_memory(mode="VecMemory", workspace=ws, model=model)
    before = ws.count(scope=ALL_SCOPES)
    session.settings.set(f"session.memory.VecMemory.{key}", value)
    with pytest.raises(ConfigurationError) as info:
        session.chat("hello", model=model)
    assert field in str(info.value)
    assert ws.count(scope=ALL_SCOPES) == before
    # Fixing the setting makes the same session work again.
    session.settings.set(f"session.memory.VecMemory.{key}", None)
    session.settings.set("session.memory.VecMemory", {})
    fresh = Session(id=f"settings-ok-{field}").use_memory(mode="VecMemory", workspace=ws, model=model)
    assert fresh.chat("hello again", model=model) == "reply"
    assert ws.count(scope=ALL_SCOPES) == before + 1  # the raw turn of the good chat

"""Pure storing decisions: normalizing extracted memories, raw turns, duplicate keys, supersede."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agently_vecmem.memory.pending import (
    PendingMemory,
    dedup_key,
    exact_duplicates,
    merge_tags,
    normalize_memory,
    raw_turn_record,
    supersede,
)
from agently_vecmem.memory.replies import ConsolidateReply, ExtractedMemory, ExtractReply
from agently_vecmem.records import MAX_TAG_CHARS, MemoryRecord


def mem(**kw) -> ExtractedMemory:
    return ExtractedMemory.model_validate(kw)


def test_normalize_memory_mirrors_agently() -> None:
    r = normalize_memory(mem(scope="global_memory", summary=" Likes tea ", tags=["a", " a", "b", ""],
                             importance=0.7), session_id="s1", turn_index=4)
    assert (r.memory_scope, r.kind, r.session_id, r.summary, r.tags) == (
        "GLOBAL_MEMORY", "global_memory", None, "Likes tea", ["a", "b"])
    assert r.body == {"summary": "Likes tea"} and r.importance == 0.7
    assert r.provenance.model_dump() == {"plugin": "VecMemory", "session_id": "s1", "turn_index": 4}

    r = normalize_memory(mem(scope="WORKSPACE", summary="x", body="plain"), session_id="s1", turn_index=0)
    assert (r.memory_scope, r.session_id, r.body) == ("SESSION_MEMORY", "s1", {"summary": "plain"})

    r = normalize_memory(mem(body={"fact": "no summary given"}), session_id="s1", turn_index=0)
    assert r.summary == "no summary given"
    assert normalize_memory(mem(summary="  ", body={}), session_id="s1", turn_index=0) is None


def test_normalize_caps_long_tags_and_rejects_bad_bodies() -> None:
    r = normalize_memory(mem(summary="x", tags=["t" * 500]), session_id="s", turn_index=0)
    assert len(r.tags[0]) == MAX_TAG_CHARS
    with pytest.raises(ValidationError):
        normalize_memory(mem(summary="x", body={"n": float("nan")}), session_id="s", turn_index=0)


def test_extracted_memory_reply_leniency() -> None:
    m = mem(summary="x", importance=8, action="update", tags="solo")
    assert (m.importance, m.action, m.tags) == (0.8, "UPDATE", ["solo"])
    with pytest.raises(ValidationError):
        mem(summary="x", importance=42)
    with pytest.raises(ValidationError):
        ExtractReply.model_validate({"memories": "none"})
    with pytest.raises(ValidationError):
        ConsolidateReply.model_validate({"decisions": []})
    assert ConsolidateReply.model_validate({"decisions": [{"index": 0, "action": "noop"}]}).decisions[0].action == "NOOP"


def test_raw_turn_record() -> None:
    r = raw_turn_record(session_id="s1", user_content="  My   sister\nClara  ", assistant_content="Nice " * 2000,
                        turn_index=2, max_chars=400, reason="extract_failed")
    assert r.extracted is False and r.memory_scope == "SESSION_MEMORY" and r.session_id == "s1"
    assert r.summary == "Turn: My sister Clara" and r.tags == ["raw_turn"]
    assert r.body["user"] == "My   sister\nClara" and len(r.body["assistant"]) <= 200
    assert r.provenance.raw_reason == "extract_failed" and r.provenance.turn_index == 2


def test_dedup_key_normalizes_case_and_space_per_scope() -> None:
    a = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="Dog  is\nBiscuit")
    b = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="dog is biscuit")
    c = MemoryRecord(memory_scope="SESSION_MEMORY", session_id="s1", summary="dog is biscuit")
    d = MemoryRecord(memory_scope="SESSION_MEMORY", session_id="s2", summary="dog is biscuit")
    assert dedup_key(a) == dedup_key(b)
    assert len({dedup_key(x) for x in (a, c, d)}) == 3
    pending = [PendingMemory(a), PendingMemory(b), PendingMemory(c)]
    assert exact_duplicates(pending, set()) == [1]
    assert exact_duplicates(pending, {dedup_key(c)}) == [1, 2]


def test_supersede_keeps_the_record() -> None:
    old = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="lives in Berlin", updated_at=1.0)
    new = supersede(old, "mem_new")
    assert (new.id, new.status, new.superseded_by, new.summary) == (old.id, "superseded", "mem_new", old.summary)
    assert new.updated_at > 1.0 and old.status == "active"
    assert supersede(old, None).superseded_by is None


def test_merge_tags() -> None:
    assert merge_tags(["a", " b"], "c", None, ["a", 3]) == ["a", "b", "c", "3"]

"""The record contract: validation, normalization and the lossless Chroma metadata round trip."""

from __future__ import annotations

import json
import math
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from agently_vecmem.errors import RecordValidationError
from agently_vecmem.records import (
    MAX_BODY_CHARS,
    MAX_TAG_CHARS,
    MAX_TAGS,
    MemoryRecord,
    Provenance,
    VectorIndexMeta,
    parse_record,
    stored_form,
)


def full_record(**over: object) -> MemoryRecord:
    data: dict[str, object] = {
        "memory_scope": "SESSION_MEMORY",
        "session_id": "s1",
        "summary": "User adopted a dog named Biscuit",
        "body": {"pet": "dog", "name": "Biscuit", "nested": {"age": 3, "tricks": ["sit", "roll"]}, "ok": True},
        "tags": ["pet", "dog"],
        "importance": 0.8,
        "provenance": {"plugin": "VecMemory", "session_id": "s1", "turn_index": 4, "dia_id": "D1:3", "n": 2.5},
        "vector_index": {"model": "m", "dim": 8, "extra_key": "x"},
        "status": "superseded",
        "superseded_by": "mem_new",
        "supersedes": "mem_old",
        "extracted": False,
        "created_at": 1_700_000_000.123456,
        "updated_at": 1_700_000_001.654321,
    }
    data.update(over)
    return MemoryRecord.model_validate(data)


def test_defaults_and_kind() -> None:
    r = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="User prefers tea")
    assert r.kind == "global_memory" and r.collection == "memory" and r.status == "active"
    assert r.id.startswith("mem_") and r.session_id is None
    assert MemoryRecord(memory_scope="SESSION_MEMORY", session_id="s", summary="x").kind == "session_memory"


def test_chroma_round_trip_every_field() -> None:
    r = full_record()
    meta = r.to_chroma()
    assert all(v is not None and not isinstance(v, dict) for v in meta.values())
    back = MemoryRecord.from_chroma(r.id, meta)
    assert back == r
    assert back.provenance.model_extra == {"dia_id": "D1:3", "n": 2.5}
    assert back.vector_index.model_extra == {"extra_key": "x"}


def test_to_chroma_writes_numbers_as_floats() -> None:
    # Chroma truncates a float operand compared with an int stored value ({"$eq": 0.5} matches 0).
    meta = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="x", importance=1, created_at=5, updated_at=6).to_chroma()
    assert all(type(meta[k]) is float for k in ("importance", "created_at", "updated_at"))


def test_to_chroma_omits_absent_optional_keys() -> None:
    meta = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="x").to_chroma()
    for key in ("session_id", "tags", "superseded_by", "supersedes"):
        assert key not in meta


json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
json_values = st.recursive(
    json_scalars, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(
    body=st.dictionaries(st.text(max_size=10), json_values, max_size=5),
    tags=st.lists(st.text(min_size=1, max_size=12), max_size=8),
    importance=st.floats(0, 1),
    summary=st.text(max_size=50),
    session=st.one_of(st.none(), st.text(min_size=1, max_size=10)),
)
def test_round_trip_property(body: dict, tags: list, importance: float, summary: str, session: str | None) -> None:
    scope = "SESSION_MEMORY" if session else "GLOBAL_MEMORY"
    r = MemoryRecord(memory_scope=scope, session_id=session, summary=summary, body=body, tags=tags,
                     importance=importance, provenance={"extra": body})
    back = MemoryRecord.from_chroma(r.id, json.loads(json.dumps(r.to_chroma())))
    assert back == r
    assert_same_record(MemoryRecord.from_trusted(r.id, r.to_chroma()), back)


def assert_same_record(trusted: MemoryRecord, validated: MemoryRecord) -> None:
    """What a snapshot decodes without validation is the record a validated read gives, in every respect."""
    assert trusted == validated and repr(trusted) == repr(validated)
    assert trusted.model_dump() == validated.model_dump()
    assert list(trusted.__dict__) == list(validated.__dict__)
    assert trusted.model_fields_set == validated.model_fields_set
    for name, value in validated.__dict__.items():
        assert type(trusted.__dict__[name]) is type(value), name


@pytest.mark.parametrize("over", [{}, {"occurred_at": 1_690_000_000.5, "extracted": True}, {"tags": [], "body": {}},
                                  {"memory_scope": "GLOBAL_MEMORY", "session_id": None, "status": "active"}])
def test_a_trusted_decode_is_the_validated_record(over: dict[str, object]) -> None:
    r = full_record(**over)
    back = MemoryRecord.from_trusted(r.id, r.to_chroma())
    assert_same_record(back, MemoryRecord.from_chroma(r.id, r.to_chroma()))
    back.summary = "assignments are still validated"
    with pytest.raises(ValidationError):
        back.importance = 2.0
    assert back.model_copy(update={"importance": 0.1}).importance == 0.1


def test_body_is_normalized_to_its_json_form() -> None:
    r = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="x", body={"t": (1, 2), "d": {1: "a"}})
    assert r.body == {"t": [1, 2], "d": {"1": "a"}}
    assert MemoryRecord.from_chroma(r.id, r.to_chroma()).body == r.body


@pytest.mark.parametrize(
    "over, field",
    [
        ({"importance": math.nan}, "importance"),
        ({"importance": math.inf}, "importance"),
        ({"importance": None}, "importance"),
        ({"importance": 1.5}, "importance"),
        ({"body": {"x": math.nan}}, "body"),
        ({"body": {"x": [1, math.inf]}}, "body"),
        ({"body": {"x": object()}}, "body"),
        ({"body": None}, "body"),
        ({"summary": None}, "summary"),
        ({"tags": ["a", 3]}, "tags"),
        ({"tags": "a,b"}, "tags"),
        ({"tags": [None]}, "tags"),
        ({"tags": [f"t{i}" for i in range(MAX_TAGS + 1)]}, "tags"),
        ({"tags": ["x" * (MAX_TAG_CHARS + 1)]}, "tags"),
        ({"created_at": math.nan}, "created_at"),
        ({"provenance": {"dia_id": math.nan}}, "provenance"),
        ({"provenance": {"dia_id": (1, 2)}}, "provenance"),
        ({"vector_index": {"x": math.inf}}, "vector_index"),
        ({"status": "archived"}, "status"),
        ({"memory_scope": "LOCAL"}, "memory_scope"),
        ({"unknown": 1}, "unknown"),
        ({"id": ""}, "id"),
    ],
)
def test_invalid_records_name_the_field(over: dict, field: str) -> None:
    data = {"memory_scope": "GLOBAL_MEMORY", "summary": "x", **over}
    with pytest.raises(RecordValidationError) as e:
        parse_record(data)
    assert field in str(e.value)


def test_body_size_limit_names_body() -> None:
    with pytest.raises(RecordValidationError, match="body") as e:
        parse_record({"memory_scope": "GLOBAL_MEMORY", "summary": "x", "body": {"blob": "a" * (20 * 2**20)}})
    assert str(MAX_BODY_CHARS) in str(e.value)


def test_scope_rules() -> None:
    with pytest.raises(RecordValidationError, match="session_id"):
        parse_record({"memory_scope": "SESSION_MEMORY", "summary": "x"})
    with pytest.raises(RecordValidationError, match="session_id"):
        parse_record({"memory_scope": "GLOBAL_MEMORY", "session_id": "s1", "summary": "x"})
    with pytest.raises(RecordValidationError, match="kind"):
        parse_record({"memory_scope": "GLOBAL_MEMORY", "kind": "session_memory", "summary": "x"})


def test_tags_are_stripped_and_deduplicated() -> None:
    r = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="x", tags=[" a", "a", "b ", "", "  "])
    assert r.tags == ["a", "b"]


def test_parse_record_rejects_non_mappings() -> None:
    with pytest.raises(RecordValidationError, match="dict or MemoryRecord"):
        parse_record(["not", "a", "record"])  # type: ignore[arg-type]


def test_document_and_payload() -> None:
    r = full_record()
    doc = r.document()
    assert doc.startswith(r.summary) and "name: Biscuit" in doc and "tags: pet, dog" in doc
    payload = r.payload()
    assert payload["memory_scope"] == "SESSION_MEMORY" and payload["provenance"]["dia_id"] == "D1:3"
    assert r.scope_dict() == {"memory_scope": "SESSION_MEMORY", "session_id": "s1"}
    assert json.loads(r.content()) == r.body


def test_provenance_and_vector_meta_defaults() -> None:
    assert Provenance().plugin == "VecMemory"
    assert VectorIndexMeta().space == "cosine"


def test_records_read_back_share_their_repeated_parts() -> None:
    """Snapshot memory: equal provenance / vector_index texts give one shared frozen instance."""
    a = MemoryRecord(memory_scope="SESSION_MEMORY", session_id="s1", summary="a", vector_index={"model": "m", "dim": 3})
    b = MemoryRecord(memory_scope="SESSION_MEMORY", session_id="s1", summary="b", vector_index={"model": "m", "dim": 3})
    ra, rb = (MemoryRecord.from_chroma(r.id, r.to_chroma()) for r in (a, b))
    assert (ra, rb) == (a, b)
    assert ra.vector_index is rb.vector_index and ra.provenance is rb.provenance
    with pytest.raises(ValidationError):
        ra.vector_index.dim = 4  # type: ignore[misc]  # frozen: a change would leak into every sharer
    changed = ra.model_copy(update={"provenance": ra.provenance.model_copy(update={"turn_index": 7})})
    assert changed.provenance.turn_index == 7 and rb.provenance.turn_index is None


def test_stored_records_share_one_fields_set_and_stay_independent() -> None:
    """Snapshot memory: a stored record has every field set, through one set shared by all (a set each was
    ~2.2 KB, most of a big scope's memory); an assignment or a copy of one record changes no other."""
    a = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="a", tags=["x"])
    b = MemoryRecord(memory_scope="GLOBAL_MEMORY", summary="b")
    assert a.model_fields_set != set(MemoryRecord.model_fields)  # built by a user: only what was given
    ra, rb = (MemoryRecord.from_chroma(r.id, r.to_chroma()) for r in (a, b))
    assert ra.__pydantic_fields_set__ is rb.__pydantic_fields_set__
    assert ra.model_fields_set == set(MemoryRecord.model_fields)
    assert (ra, rb) == (a, b) and ra.model_dump() == a.model_dump()
    ra.importance = 0.9  # validate_assignment adds the name to the shared set: a no-op
    ra.tags = ["y"]
    assert rb.importance == 0.5 and rb.tags == [] and rb.model_fields_set == set(MemoryRecord.model_fields)
    copy = rb.model_copy(update={"summary": "c"})
    assert copy.__pydantic_fields_set__ is not rb.__pydantic_fields_set__ and rb.summary == "b"
    back = pickle.loads(pickle.dumps([ra, rb]))  # a persisted snapshot keeps the sharing
    assert back == [ra, rb] and back[0].__pydantic_fields_set__ is back[1].__pydantic_fields_set__
    assert stored_form(a) is a and a.__pydantic_fields_set__ is ra.__pydantic_fields_set__

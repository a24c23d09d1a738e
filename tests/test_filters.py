"""Scopes and the where-filter grammar; :func:`matches` is checked against real Chroma as an oracle."""

from __future__ import annotations

import math
import uuid

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agently_vecmem.errors import ScopeError
from agently_vecmem.filters import ALL_SCOPES, Scope, compile_where, matches


def test_scope_constructors_and_conditions() -> None:
    assert Scope.global_memory().where() == {
        "$and": [{"collection": {"$eq": "memory"}}, {"memory_scope": {"$eq": "GLOBAL_MEMORY"}},
                 {"status": {"$eq": "active"}}]
    }
    s1 = Scope.session_memory("s1")
    assert s1.conditions() == {"collection": "memory", "memory_scope": "SESSION_MEMORY", "session_id": "s1",
                               "status": "active"}
    assert "status" not in Scope.session_memory("s1", include_inactive=True).conditions()
    assert ALL_SCOPES.where() is None
    assert Scope.of("SESSION_MEMORY", "s2") == Scope.session_memory("s2")
    assert Scope.of("GLOBAL_MEMORY", "ignored") == Scope.global_memory()
    assert s1.kind == "session_memory" and s1.key != Scope.session_memory("s2").key


def test_conditions_are_fresh_every_call() -> None:
    scope = Scope.global_memory()
    scope.conditions()["memory_scope"] = "SESSION_MEMORY"
    assert scope.conditions()["memory_scope"] == "GLOBAL_MEMORY"


@pytest.mark.parametrize(
    "make",
    [
        lambda: Scope("LOCAL_MEMORY"),
        lambda: Scope("global_memory"),
        lambda: Scope.of("GLOBAL"),
        lambda: Scope.session_memory(""),
        lambda: Scope.session_memory(None),  # type: ignore[arg-type]
        lambda: Scope.of("SESSION_MEMORY"),
        lambda: Scope("GLOBAL_MEMORY", "s1"),
        lambda: Scope(None, "s1"),  # would silently read every scope
    ],
)
def test_invalid_scopes(make: object) -> None:
    with pytest.raises(ScopeError):
        make()  # type: ignore[operator]


def test_scope_error_is_value_error() -> None:
    with pytest.raises(ValueError):
        Scope("NOPE")


def test_extra_conditions_narrow_but_never_widen() -> None:
    clause = Scope.session_memory("s1").where({"tags": {"$contains": "pet"}})
    assert {"tags": {"$contains": "pet"}} in clause["$and"]
    for key in ("session_id", "memory_scope", "collection", "status"):
        with pytest.raises(ScopeError, match="fixed by the scope"):
            Scope.session_memory("s1").where({key: "x"})
    assert ALL_SCOPES.where({"memory_scope": "GLOBAL_MEMORY"}) == {"memory_scope": {"$eq": "GLOBAL_MEMORY"}}


@pytest.mark.parametrize(
    "cond",
    [
        {"$regex": "x"},
        {"$eq": 1, "$ne": 2},
        {"$in": []},
        {"$in": "abc"},
        {"$in": [[1]]},
        {"$in": ["a", 1]},
        {"$in": [1, 0.5]},
        {"$in": [True, 1]},
        {"$eq": [1]},
        {"$gt": "a"},
        {"$gt": math.nan},
        {"$eq": math.inf},
        None,
        [1, 2],
        math.nan,
    ],
)
def test_bad_conditions(cond: object) -> None:
    with pytest.raises(ScopeError):
        compile_where({"importance": cond})


@pytest.mark.parametrize("key", ["", "$and", 3])
def test_bad_keys(key: object) -> None:
    with pytest.raises(ScopeError):
        compile_where({key: 1})  # type: ignore[dict-item]


def test_compile_where_shapes() -> None:
    assert compile_where(None) is None and compile_where({}) is None
    assert compile_where({"a": 1}) == {"a": {"$eq": 1}}
    assert compile_where({"a": 1, "b": {"$in": ("x",)}}) == {"$and": [{"a": {"$eq": 1}}, {"b": {"$in": ["x"]}}]}


def test_matches_is_typed_like_chroma() -> None:
    meta = {"flag": True, "n": 1, "x": 1.0, "tags": ["a", "b"]}
    assert not matches({"flag": {"$eq": 1}}, meta)
    assert matches({"flag": {"$ne": 1}}, meta)
    assert not matches({"flag": {"$gt": 0}}, meta)
    assert matches({"n": {"$eq": 1.0}}, meta) and matches({"x": {"$eq": 1}}, meta)
    assert matches({"missing": {"$ne": "a"}}, meta) and matches({"missing": {"$nin": ["a"]}}, meta)
    assert matches({"missing": {"$not_contains": "a"}}, meta)
    assert not matches({"missing": {"$gt": 0}}, meta)
    assert matches({"tags": {"$contains": "a"}}, meta) and not matches({"tags": {"$contains": "c"}}, meta)


# --------------------------------------------------------------------------- oracle: real Chroma
# Chroma quirk (1.5.9): a float operand against an *int* stored value is truncated ({"$eq": 0.5} matches
# 0). Records never store ints (to_chroma writes every number as float), so int fields are only
# queried with ints here.
_STRS = ["a", "b", "c"]
_NUMS = [0, 1, 2, 0.5, 1.0]
_values = st.one_of(st.sampled_from(_STRS), st.sampled_from(_NUMS), st.booleans())
_FIELDS = ["s", "n", "b", "maybe"]


def _metadata(i: int) -> dict:
    rng = np.random.default_rng(i)
    meta: dict = {
        "s": _STRS[i % 3],
        "n": float(_NUMS[i % len(_NUMS)]),
        "i": i % 4,
        "b": bool(i % 2),
        "tags": [t for t in _STRS if rng.random() < 0.5] or ["a"],
    }
    if i % 4:
        meta["maybe"] = [_STRS[i % 3], float(i % 3), i % 2 == 0][i % 3]
    return meta


_META = [_metadata(i) for i in range(40)]

_scalar_cond = st.one_of(
    _values,
    st.tuples(st.sampled_from(["$eq", "$ne"]), _values).map(lambda t: {t[0]: t[1]}),
    st.tuples(
        st.sampled_from(["$in", "$nin"]),
        st.one_of(*(st.lists(st.sampled_from(vals), min_size=1, max_size=3)
                    for vals in (_STRS, [0, 1, 2], [0.5, 1.0], [True, False]))),
    ).map(lambda t: {t[0]: t[1]}),
    st.tuples(st.sampled_from(["$gt", "$gte", "$lt", "$lte"]), st.sampled_from(_NUMS)).map(
        lambda t: {t[0]: t[1]}
    ),
)
_int_cond = st.one_of(
    st.integers(0, 4),
    st.tuples(st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]), st.integers(0, 4)).map(
        lambda t: {t[0]: t[1]}
    ),
    st.tuples(st.sampled_from(["$in", "$nin"]), st.lists(st.integers(0, 4), min_size=1, max_size=3)).map(
        lambda t: {t[0]: t[1]}
    ),
)
_clause = st.one_of(
    st.tuples(st.sampled_from(_FIELDS), _scalar_cond).map(lambda t: compile_where({t[0]: t[1]})),
    _int_cond.map(lambda c: compile_where({"i": c})),
    st.tuples(st.sampled_from(["$contains", "$not_contains"]), st.sampled_from(_STRS)).map(
        lambda t: {"tags": {t[0]: t[1]}}
    ),
)
_where = st.one_of(
    _clause,
    st.tuples(st.sampled_from(["$and", "$or"]), st.lists(_clause, min_size=2, max_size=3)).map(
        lambda t: {t[0]: t[1]}
    ),
)


@pytest.fixture(scope="module")
def oracle_collection():  # noqa: ANN201 - chromadb type
    import chromadb

    client = chromadb.EphemeralClient()
    col = client.create_collection(f"oracle-{uuid.uuid4().hex[:8]}", embedding_function=None)
    col.add(ids=[str(i) for i in range(len(_META))], embeddings=np.eye(len(_META), 4, dtype=np.float32) + 0.1,
            metadatas=_META)
    yield col
    client.delete_collection(col.name)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=_where)
def test_matches_agrees_with_chroma(oracle_collection, where: dict) -> None:  # noqa: ANN001
    try:
        chroma_ids = set(oracle_collection.get(where=where, include=[])["ids"])
    except Exception as e:  # noqa: BLE001
        raise AssertionError(f"chroma rejects {where}: {e}") from e
    ours = {str(i) for i, meta in enumerate(_META) if matches(where, meta)}
    assert ours == chroma_ids, where

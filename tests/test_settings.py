"""Settings: dotted keys, parent chain with key-by-key dict merge, namespaces."""

from __future__ import annotations

import pytest

from agently_vecmem.errors import ConfigurationError
from agently_vecmem.settings import Settings, SettingsNamespace, deep_merge


def test_dotted_set_and_get() -> None:
    s = Settings()
    s.set("session.max_length", 12000)
    assert s.get("session.max_length") == 12000
    assert s.get("session") == {"max_length": 12000}
    assert s.get("session.missing", "dflt") == "dflt"
    assert "session.max_length" in s and "session.nope" not in s


def test_constructor_expands_dotted_keys_and_merges() -> None:
    s = Settings({"a.b": 1, "a": {"c": 2}})
    assert s.data == {"a": {"b": 1, "c": 2}}


def test_parent_chain_merges_dicts_key_by_key() -> None:
    base = Settings({"session": {"memory": {"VecMemory": {"retrieve": {"budget": 4000, "top_k": 8}}}}})
    child = Settings(parent=base)
    child.set("session.memory.VecMemory.retrieve.budget", 2000)
    assert child.get("session.memory.VecMemory.retrieve.budget") == 2000
    assert child.get("session.memory.VecMemory.retrieve") == {"budget": 2000, "top_k": 8}
    assert base.get("session.memory.VecMemory.retrieve.budget") == 4000
    # a value set on the parent later is seen by the child
    base.set("session.memory.VecMemory.retrieve.rerank", True)
    assert child.get("session.memory.VecMemory.retrieve.rerank") is True
    assert child.get("session.memory.VecMemory.retrieve.budget", inherit=False) == 2000
    assert child.get("session.memory.VecMemory.retrieve.top_k", inherit=False) is None


def test_plain_dict_parent_and_three_levels() -> None:
    grand = {"x": {"a": 1, "b": 1}}
    parent = Settings({"x": {"b": 2}}, parent=grand)
    child = Settings({"x": {"c": 3}}, parent=parent)
    assert child.data == {"x": {"a": 1, "b": 2, "c": 3}}


def test_set_merges_mapping_but_replaces_lists_and_scalars() -> None:
    s = Settings()
    s.set("a", {"x": 1})
    s.set("a", {"y": 2})
    assert s.get("a") == {"x": 1, "y": 2}
    s.set("l", ["a"])
    s.set("l", ["b"])
    assert s.get("l") == ["b"]
    parent = Settings({"keys": [None, "p"]})
    assert Settings({"keys": ["input"]}, parent=parent).get("keys") == ["input"]


def test_update_and_set_settings_alias_chain() -> None:
    s = Settings().update({"session.max_length": 10, "session": {"input_keys": ["input"]}})
    assert s.set_settings("other", 1) is s
    assert s.data == {"session": {"max_length": 10, "input_keys": ["input"]}, "other": 1}


def test_set_through_scalar_prefix_is_a_clear_error() -> None:
    s = Settings({"a": 5})
    with pytest.raises(ConfigurationError, match="'a' holds int"):
        s.set("a.b", 1)
    with pytest.raises(ConfigurationError):
        s.set("", 1)


def test_reads_are_copies() -> None:
    s = Settings({"a": {"b": [1]}})
    s.get("a")["b"].append(2)
    s.data["a"]["c"] = 1
    assert s.get("a") == {"b": [1]}


def test_setdefault_and_delete() -> None:
    s = Settings({"a": None})
    assert s.setdefault("a", 3) == 3
    assert s.setdefault("a", 4) == 3
    s.delete("a")
    s.delete("nope.deeper")
    assert "a" not in s


def test_namespace_view() -> None:
    s = Settings()
    ns = s.namespace("session", defaults={"max_length": None, "input_keys": None})
    assert isinstance(ns, SettingsNamespace)
    assert ns.data == {"max_length": None, "input_keys": None}
    assert ns.get("max_length", 7) == 7
    ns.set("max_length", 50)
    assert s.get("session.max_length") == 50
    ns.update({"memory.VecMemory.retrieve.budget": 10})
    assert ns.get("memory.VecMemory.retrieve") == {"budget": 10}
    assert ns.setdefault("input_keys", ["input"]) == ["input"]
    assert "max_length" in ns


def test_namespace_defaults_do_not_shadow_later_parent_values() -> None:
    parent = Settings()
    child = Settings(parent=parent)
    ns = child.namespace("session", defaults={"max_length": None})
    assert ns.get("max_length") is None
    parent.set("session.max_length", 77)
    assert ns.get("max_length") == 77


def test_foreign_parent_with_get() -> None:
    class Foreign:
        def get(self, key=None):
            return {"session": {"max_length": 9}}

    assert Settings(parent=Foreign()).get("session.max_length") == 9
    with pytest.raises(ConfigurationError):
        Settings(parent=42)


def test_deep_merge_does_not_mutate() -> None:
    a = {"x": {"y": 1}}
    b = {"x": {"z": 2}}
    assert deep_merge(a, b) == {"x": {"y": 1, "z": 2}}
    assert a == {"x": {"y": 1}} and b == {"x": {"z": 2}}

"""Import/export in Agently's format: JSON/YAML, key order, session_key_path, legacy keys, path vs content."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agently_vecmem.errors import ConfigurationError
from agently_vecmem.session import Session, SessionDataError

KEYS = ["id", "auto_resize", "full_context", "context_window", "memo", "session_settings"]


def make_session() -> Session:
    s = Session("sess-1", settings={"session": {"max_length": 1000, "input_keys": ["input"]}})
    s.set_chat_history([{"role": "user", "content": "你好 \"quoted\""}, {"role": "assistant", "content": "hi"}])
    s.register_resize_handler("memo", lambda *a: (None, [{"role": "assistant", "content": "hi"}], {"n": 1, "l": [1]}))
    s.run_resize_strategy("memo")
    return s


def test_json_export_format_and_round_trip() -> None:
    s = make_session()
    text = s.get_json_session()
    assert text == json.dumps(s.to_serializable_session_data(), indent=2, ensure_ascii=False)
    assert "你好" in text
    data = json.loads(text)
    assert list(data) == KEYS
    data["session_settings"].pop("memory", None)  # registered plugins may add their defaults
    assert data["session_settings"] == {"max_length": 1000, "input_keys": ["input"], "reply_keys": None}
    restored = Session().load_json_session(text)
    assert restored.id == "sess-1"
    assert restored.full_context == s.full_context
    assert restored.context_window == [{"role": "assistant", "content": "hi"}]
    assert restored.memo == {"n": 1, "l": [1]}
    assert restored.session_settings.get("max_length") == 1000
    assert restored.session_settings.get("input_keys") == ["input"]
    assert s.to_json() == text


def test_yaml_export_format_and_round_trip() -> None:
    s = make_session()
    text = s.to_yaml()
    assert list(yaml.safe_load(text)) == KEYS
    assert text.startswith("id: sess-1\nauto_resize: true\n")
    restored = Session().load_yaml(text)
    assert restored.to_serializable_session_data() == s.to_serializable_session_data()


def test_memo_absent_keeps_current_and_none_memo_round_trip() -> None:
    s = Session()
    s.register_resize_handler("memo", lambda *a: (None, None, "keep me"))
    s.run_resize_strategy("memo")
    s.load_json_session('{"id": "x", "full_context": []}')
    assert s.memo == "keep me" and s.id == "x"
    fresh = Session().load_json(Session("y").to_json())
    assert fresh.memo is None


def test_yaml_session_key_path_and_json5_content() -> None:
    doc = {"payload": {"session": {"id": "nested", "full_context": [{"role": "user", "content": "a"}]}}}
    s = Session().load_yaml_session(yaml.safe_dump(doc), session_key_path="payload.session")
    assert s.id == "nested" and s.context_window == [{"role": "user", "content": "a"}]
    j5 = "{ // comment\n id: 'j5', full_context: [{role: 'user', content: 'b'},], }"
    assert Session().load_json_session(j5).full_context == [{"role": "user", "content": "b"}]
    with pytest.raises(SessionDataError):
        Session().load_json_session('{"a": 1}', session_key_path="payload.session")


def test_legacy_window_context_then_full_context() -> None:
    full = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    legacy = {"id": "l", "full_context": full, "window_context": full[1:]}
    assert Session().load_json(json.dumps(legacy)).context_window == full[1:]
    no_window = {"id": "l", "full_context": full}
    assert Session().load_json(json.dumps(no_window)).context_window == full
    both = {"full_context": full, "context_window": full[:1], "window_context": full[1:]}
    assert Session().load_json(json.dumps(both)).context_window == full[:1]


def test_path_vs_content(tmp_path: Path) -> None:
    s = make_session()
    json_file = tmp_path / "s.json"
    json_file.write_text(s.to_json(), encoding="utf-8")
    yaml_file = tmp_path / "s.yaml"
    yaml_file.write_text(s.to_yaml(), encoding="utf-8")
    assert Session().load_json_session(json_file).full_context == s.full_context
    assert Session().load_json_session(str(json_file)).id == "sess-1"
    assert Session().load_yaml_session(yaml_file).memo == {"n": 1, "l": [1]}


def test_load_errors_are_clear() -> None:
    with pytest.raises(ConfigurationError, match="Cannot load JSON content"):
        Session().load_json_session("{not json")
    with pytest.raises(ValueError):
        Session().load_yaml_session("a: [unclosed")
    with pytest.raises(TypeError):
        Session().load_json_session("[1, 2]")
    with pytest.raises(TypeError, match="full_context"):
        Session().load_json_session('{"full_context": "text"}')
    with pytest.raises(TypeError, match="session_settings"):
        Session().load_json_session('{"full_context": [], "session_settings": [1]}')


def test_auto_resize_loaded_and_settings_applied_with_update() -> None:
    s = Session(settings={"session": {"reply_keys": ["answer"], "max_length": 5}})
    s.load_json('{"auto_resize": false, "full_context": [], "session_settings": {"max_length": 99}}')
    assert s.auto_resize is False
    assert s.session_settings.get("max_length") == 99
    assert s.session_settings.get("reply_keys") == ["answer"]

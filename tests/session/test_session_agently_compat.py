"""Cross-compatibility with the real agently 4.1.4.1 ``agently.core.Session`` (skipped without agently)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

agently = pytest.importorskip("agently")
from agently.core import Session as AgentlySession  # noqa: E402
from agently.types.data import ChatMessage as AgentlyChatMessage  # noqa: E402

from agently_vecmem.session import Prompt, Session, context_length, resolve_contents  # noqa: E402
from agently_vecmem.session.recording import format_keyed_content, format_value  # noqa: E402

HISTORY = [
    {"role": "user", "content": "Remember: my order id is A-100. 你好"},
    {"role": "assistant", "content": 'Noted "A-100".'},
    {"role": "user", "content": "What is my order id?"},
]


def plain(messages) -> list[dict]:
    return [{"role": m.role, "content": m.content} if hasattr(m, "model_dump") else dict(m) for m in messages]


def test_agently_export_loads_into_ours() -> None:
    theirs = AgentlySession("agently-1", settings={})
    theirs.set_chat_history(HISTORY)
    theirs.register_resize_handler("memo", lambda f, w, m, s: (None, list(w[-2:]), {"summary": "order A-100"}))
    theirs.run_resize_strategy("memo")
    for text, load in ((theirs.get_json_session(), "load_json_session"), (theirs.get_yaml_session(), "load_yaml")):
        ours = getattr(Session(), load)(text)
        assert ours.id == theirs.id
        assert ours.full_context == plain(theirs.full_context)
        assert ours.context_window == plain(theirs.context_window)
        assert ours.memo == theirs.memo
        assert ours.session_settings.get("max_length") is None


def test_our_export_loads_into_agently() -> None:
    ours = Session("ours-1", settings={"session": {"max_length": 5000}})
    ours.set_chat_history(HISTORY)
    ours.register_resize_handler("memo", lambda f, w, m, s: (None, list(w[-1:]), {"k": [1, 2]}))
    ours.run_resize_strategy("memo")
    for text, load in ((ours.get_json_session(), "load_json_session"), (ours.get_yaml_session(), "load_yaml")):
        theirs = getattr(AgentlySession(settings={}), load)(text)
        assert theirs.id == ours.id
        assert plain(theirs.full_context) == ours.full_context
        assert plain(theirs.context_window) == ours.context_window
        assert theirs.memo == ours.memo
        assert theirs.session_settings.get("max_length") == 5000
    assert list(theirs.to_serializable_session_data()) == list(ours.to_serializable_session_data())


def test_export_text_is_identical_for_same_state() -> None:
    theirs = AgentlySession("same", settings={})
    ours = Session("same")
    for s in (theirs, ours):
        s.set_chat_history(HISTORY)
    ours_data = ours.to_serializable_session_data()
    theirs_data = theirs.to_serializable_session_data()
    # agently's session_settings also carry its built-in AgentlyMemory defaults; the rest is identical
    theirs_data["session_settings"].pop("memory", None)
    ours_data["session_settings"].pop("memory", None)  # other tests may register plugin defaults
    assert ours_data == theirs_data


def test_defaults_match() -> None:
    assert AgentlySession(settings={}).session_settings.get("max_length") is None
    assert Session().session_settings.get("max_length") is None


def test_message_length_matches_agently() -> None:
    for m in HISTORY + [{"role": "tool", "content": "it's \\ \n \t 'x' \"y\""}]:
        assert len(str(AgentlyChatMessage(**m).model_dump())) == context_length([m])


def _run_both(messages: list[dict], max_length: int, batch: bool) -> tuple[AgentlySession, Session]:
    theirs = AgentlySession(settings={"session": {"max_length": max_length}})
    ours = Session(settings={"session": {"max_length": max_length}})
    for s in (theirs, ours):
        if batch:
            s.add_chat_history(messages)
        else:
            for m in messages:
                s.add_chat_history(m)
    return theirs, ours


def test_simple_cut_matches_agently_tail_case() -> None:
    content = "".join(str(i % 10) for i in range(500))
    theirs, ours = _run_both([{"role": "user", "content": content}], 100, batch=False)
    assert plain(theirs.context_window) == ours.context_window
    assert len(ours.context_window[0]["content"]) == 100


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=st.lists(
        st.tuples(st.sampled_from(["user", "assistant"]), st.text(max_size=150)), min_size=1, max_size=15
    ),
    max_length=st.integers(min_value=1, max_value=500),
    batch=st.booleans(),
)
def test_simple_cut_matches_agently_on_random_inputs(messages, max_length, batch) -> None:
    items = [{"role": r, "content": c} for r, c in messages]
    theirs, ours = _run_both(items, max_length, batch)
    ours_window = ours.context_window
    theirs_window = plain(theirs.context_window)
    newest = items[-1]["content"]
    tail_with_short_content = len(theirs_window) == 1 and theirs_window != items[-1:] and len(newest) < max_length
    if tail_with_short_content:
        # documented difference: agently slices content[len - max_length:], which for a content shorter
        # than max_length keeps fewer characters than exist; we keep the whole content
        assert ours_window == [{"role": items[-1]["role"], "content": newest}]
    else:
        assert ours_window == theirs_window
    assert plain(theirs.full_context) == ours.full_context


def test_prompt_text_matches_agently_prompt() -> None:
    from agently import Agently

    data = {
        "system": "Be brief.",
        "chat_history": HISTORY,
        "CHAT SESSION MEMO": {"note": "x", "list": [1, 2]},
        "GLOBAL_MEMORY": [{"summary": "s", "content": "c", "tags": ["a"], "score": 0.5,
                           "source_ref": {"collection": "memory", "kind": "global_memory", "id": "rec_1"}}],
        "SESSION_MEMORY": [],
        "input": "What is my id?",
    }
    theirs = Agently.create_prompt()
    ours = Prompt()
    for key, value in data.items():
        theirs.set(key, value)
        ours.set(key, value)
    assert ours.to_text() == theirs.to_text()
    assert ours.to_messages() == theirs.to_messages()
    only_input = Agently.create_prompt()
    only_input.set("input", "hello")
    assert Prompt({"input": "hello"}).to_text() == only_input.to_text()
    assert Prompt({"input": "hello"}).to_messages() == only_input.to_messages()


@pytest.mark.parametrize(
    "key",
    [".agent.system", ".execution.input.code", ".execution", "info.task", "question", "input.question",
     "input/meta/lines/1", "meta.lines[0]", "meta", "missing", ".agent"],
)
def test_input_key_resolution_matches_agently(key: str) -> None:
    prompt = {"system": "S", "info": {"task": "review"},
              "input": {"question": "Q?", "code": "print(1)", "meta": {"lang": "py", "lines": [1, 2]}}}
    agent = {"system": "Agent system"}
    found, value = AgentlySession._extract_input_value(prompt, key, agent)
    expected = AgentlySession._format_session_keyed_content([(key, value)]) if found else None
    assert resolve_contents(prompt, "x", [key], None, agent)[0] == expected


@pytest.mark.parametrize("value", ["text", 3, 0.5, True, None, {"b": 1, "a": [1, {"x": "é"}]}, [1, "two"]])
def test_value_formatting_matches_agently(value) -> None:
    assert format_value(value) == AgentlySession._format_session_value(value)
    assert format_keyed_content([("k", value)]) == AgentlySession._format_session_keyed_content([("k", value)])


def test_default_recording_matches_agently_resolve_finally_contents() -> None:
    from agently import Agently

    class Result:
        def __init__(self, prompt) -> None:
            self.prompt = prompt

        async def async_get_data(self):
            return {"answer": "4", "why": ["math"]}

    theirs_prompt = Agently.create_prompt()
    theirs_prompt.set("input", {"question": "2+2?"})
    settings_ = agently.Agently.settings
    theirs = asyncio.run(AgentlySession.resolve_finally_contents(Result(theirs_prompt), settings_, theirs_prompt))
    ours = resolve_contents(Prompt({"input": {"question": "2+2?"}}), {"answer": "4", "why": ["math"]}, None, None)
    assert ours == theirs

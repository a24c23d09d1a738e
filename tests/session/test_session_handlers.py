"""Resize pipeline: default analysis, simple_cut, custom sync/async handlers, warnings, memo."""

from __future__ import annotations

import asyncio
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agently_vecmem.errors import ConfigurationError
from agently_vecmem.session import Session, context_length, message_length, simple_cut_window


def msg(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


def test_max_length_defaults_to_none_and_never_cuts() -> None:
    s = Session()
    assert s.session_settings.get("max_length") is None
    assert s.session_settings.data["max_length"] is None
    s.add_chat_history([msg("user", "x" * 5000), msg("assistant", "y" * 5000)])
    assert len(s.context_window) == 2
    assert s.analyze_context() is None


def test_simple_cut_keeps_a_100_char_tail_when_newest_does_not_fit() -> None:
    s = Session(settings={"session": {"max_length": 100}})
    content = "".join(str(i % 10) for i in range(500))
    s.add_chat_history(msg("user", content))
    window = s.context_window
    assert window == [msg("user", content[-100:])]
    assert len(window[0]["content"]) == 100
    assert s.full_context == [msg("user", content)]


def test_window_never_exceeds_max_length_after_adds() -> None:
    s = Session(settings={"session": {"max_length": 300}})
    for i in range(40):
        s.add_chat_history(msg("user" if i % 2 == 0 else "assistant", f"turn {i} " + "z" * (i % 7) * 5))
        assert context_length(s.context_window) <= 300
        assert s.context_window == s.full_context[-len(s.context_window):]
    assert len(s.full_context) == 40


def test_message_length_matches_str_of_model_dump() -> None:
    m = msg("user", 'it\'s "quoted" é \n')
    assert message_length(m) == len(str({"role": "user", "content": 'it\'s "quoted" é \n'}))


def test_simple_cut_window_edge_cases() -> None:
    assert simple_cut_window([], 10) == []
    assert simple_cut_window([msg("user", "abc")], 0) == [msg("user", "")]
    # content shorter than max_length but the message (with its dict overhead) longer: keep all of it
    assert simple_cut_window([msg("user", "abcdefghij")], 20) == [msg("user", "abcdefghij")]


def test_max_length_set_on_parent_after_creation_is_seen() -> None:
    from agently_vecmem.settings import Settings

    agent_settings = Settings()
    s = Session(settings=agent_settings)
    agent_settings.set("session.max_length", 50)
    s.add_chat_history(msg("user", "q" * 200))
    assert len(s.context_window[0]["content"]) == 50


def test_sync_and_async_handlers_and_memo() -> None:
    calls: list[str] = []

    def analysis(full_context, context_window, memo, session_settings):
        calls.append("analysis")
        return "keep_last_two" if len(context_window) > 3 else None

    async def keep_last_two(full_context, context_window, memo, session_settings):
        await asyncio.sleep(0)
        calls.append("resize")
        # Agently handlers see ChatMessage objects: attribute access must work
        assert all(isinstance(m.content, str) and m.role for m in context_window)
        return None, list(context_window[-2:]), {"dropped": len(full_context) - 2, "seen": session_settings.get("tag")}

    s = Session(settings={"session": {"tag": "t"}})
    s.register_analysis_handler(analysis).register_resize_handler("keep_last_two", keep_last_two)
    s.add_chat_history([msg("user", str(i)) for i in range(5)])
    assert [m["content"] for m in s.context_window] == ["3", "4"]
    assert len(s.full_context) == 5
    assert s.memo == {"dropped": 3, "seen": "t"}
    assert calls == ["analysis", "resize"]
    # the memo property is a copy
    s.memo["dropped"] = 99
    assert s.memo["dropped"] == 3


def test_sync_resize_handler_and_full_context_rewrite() -> None:
    def summarize(full_context, context_window, memo, session_settings):
        return [msg("system", "summary")], [msg("system", "summary")], None

    s = Session(auto_resize=False)
    s.register_resize_handler("summarize", summarize)
    s.add_chat_history([msg("user", "a"), msg("assistant", "b")])
    s.run_resize_strategy("summarize")
    assert s.full_context == [msg("system", "summary")]
    assert s.memo is None  # None from the handler means "keep"


def test_register_none_restores_default_analysis() -> None:
    s = Session(settings={"session": {"max_length": 40}})
    s.register_analysis_handler(lambda *a: None)
    s.add_chat_history(msg("user", "w" * 100))
    assert len(s.context_window[0]["content"]) == 100
    s.register_analysis_handler(None)
    s.resize()
    assert len(s.context_window[0]["content"]) == 40


def test_unknown_strategy_warns() -> None:
    s = Session()
    s.register_analysis_handler(lambda *a: "nope")
    with pytest.warns(UserWarning, match="Can not find strategy 'nope'"):
        s.add_chat_history(msg("user", "hi"))
    assert s.context_window == [msg("user", "hi")]


def test_deprecated_aliases_warn() -> None:
    s = Session(auto_resize=False)
    with pytest.warns(DeprecationWarning, match="register_resize_handler"):
        s.register_execution_handlers("noop", lambda *a: (None, None, {"m": 1}))
    with pytest.warns(DeprecationWarning, match="run_resize_strategy"):
        s.execute_strategy("noop")
    with pytest.warns(DeprecationWarning):
        asyncio.run(s.async_execute_strategy("noop"))
    assert s.memo == {"m": 1}


def test_bad_handler_results_are_clear_errors() -> None:
    s = Session(auto_resize=False)
    s.register_resize_handler("bad", lambda *a: None)
    with pytest.raises(ConfigurationError, match="must return"):
        s.run_resize_strategy("bad")
    with pytest.raises(ConfigurationError):
        s.register_resize_handler("", lambda *a: None)
    with pytest.raises(ConfigurationError):
        s.register_resize_handler("x", "not callable")  # type: ignore[arg-type]


def test_sync_api_works_inside_a_running_loop() -> None:
    async def main() -> list:
        s = Session(settings={"session": {"max_length": 100}})
        s.add_chat_history(msg("user", "a" * 300))  # sync call inside a loop: runs in a worker thread
        await s.async_add_chat_history(msg("assistant", "ok"))
        return s.context_window

    window = asyncio.run(main())
    assert window[-1] == msg("assistant", "ok")
    assert context_length(window) <= 100 + 40


messages_strategy = st.lists(
    st.tuples(st.sampled_from(["user", "assistant", "system", "tool"]), st.text(max_size=120)),
    min_size=1,
    max_size=25,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=messages_strategy, max_length=st.integers(min_value=1, max_value=600), batch=st.booleans())
def test_property_window_is_suffix_within_budget(messages, max_length, batch) -> None:
    s = Session(settings={"session": {"max_length": max_length}})
    items = [msg(role, content) for role, content in messages]
    if batch:
        s.add_chat_history(items)
    else:
        for item in items:
            s.add_chat_history(item)
    full, window = s.full_context, s.context_window
    assert full == items
    if context_length(window) <= max_length:
        assert window == full[len(full) - len(window):]
    else:
        # the one tail-cut message: the newest message's role and the tail of its content
        assert len(window) == 1
        newest = full[-1]
        assert window[0]["role"] == newest["role"]
        assert newest["content"].endswith(window[0]["content"])
        assert len(window[0]["content"]) <= max_length
        assert message_length(newest) > max_length


def test_handlers_get_copies_not_internal_lists() -> None:
    def mutate(full_context, context_window, memo, session_settings):
        full_context.clear()
        context_window.append({"role": "user", "content": "injected"})
        return None

    s = Session()
    s.register_analysis_handler(mutate)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s.add_chat_history(msg("user", "a"))
    assert s.full_context == [msg("user", "a")] and s.context_window == [msg("user", "a")]
